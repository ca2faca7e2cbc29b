"""The token trie of a finite constrained language, by a bounded walk of a constraint session.

Every node is a token sequence the constraint accepts as a prefix; a node is a *member* when
EOS is legal after it (the sequence spells a complete output). Sessions are byte level, so the
trie holds every tokenization of every member, not only the canonical one.
"""

from __future__ import annotations

import dataclasses
import time
from typing import Any

import numpy as np

from infernix_jax import mask_layout
from infernix_jax.constrain.errors import ConstraintError, FeatureConflictError

DEFAULT_MAX_NODES = 100_000  # refuse a language whose token trie is larger
DEFAULT_MAX_DEPTH = 64  # refuse members longer than this many tokens (or infinite languages)


class LanguageTooLargeError(ConstraintError):
  """The constraint's language has more token sequences (or longer ones) than the bounds."""


class MaxTokensTooSmallError(FeatureConflictError):
  """max_tokens is below the token length of an output the law can produce.

  The engine would cut that output at max_tokens, and the cut can spell a shorter member:
  the samples would silently follow another law. `param` names the request field.

  Attributes:
    param: "max_tokens".
    max_tokens: the request's value.
    longest: the token length (EOS excluded) the request needs.
  """

  param = "max_tokens"

  def __init__(self, message: str, *, max_tokens: int, longest: int):
    super().__init__(message)
    self.max_tokens, self.longest = max_tokens, longest


def check_max_tokens(longest: int, max_tokens: int, *, name: str = "the constraint",
                     what: str = "its longest member") -> None:
  """Refuses an exact-finite request whose max_tokens would cut an output of the law.

  Args:
    longest: the token length (EOS excluded) of the longest output the law can produce.
    max_tokens: the request's max_tokens (EOS counts as one of them).
    name: how the message names the constraint.
    what: how the message names that output (e.g. "its longest member").

  Raises:
    MaxTokensTooSmallError: max_tokens < longest.
  """
  if max_tokens >= longest:
    return
  raise MaxTokensTooSmallError(
      f"sampling_law='exact-finite': max_tokens={max_tokens} is below the {longest} tokens of "
      f"{what} ({name}); the engine would cut such outputs at max_tokens, and a cut can spell "
      f"a shorter member, so the samples would not follow the law. Raise max_tokens to at "
      f"least {longest} ({longest + 1} to let the output end on EOS), shorten the language, "
      f"or use sampling_law='local'", max_tokens=max_tokens, longest=longest)


@dataclasses.dataclass(frozen=True)
class TokenTrie:
  """Every token sequence a finite constraint accepts, as a tree rooted at the empty output.

  Node 0 is the root. Children of a node are listed in increasing token order.

  Attributes:
    parent: i32[N] parent node (-1 for the root).
    token: i32[N] the token on the edge from the parent (-1 for the root).
    depth: i32[N] tokens from the root.
    member: bool[N] EOS is legal after the node (the node spells a complete output).
    eos_ids: the EOS ids the session allowed at member nodes (any of them ends the output).
    children: per node, a dict token -> child node.
    build_seconds: host seconds of the walk.
  """

  parent: np.ndarray
  token: np.ndarray
  depth: np.ndarray
  member: np.ndarray
  eos_ids: tuple[int, ...]
  children: tuple[dict[int, int], ...]
  build_seconds: float = 0.0

  @property
  def size(self) -> int:
    """N, the number of nodes."""
    return len(self.parent)

  def path(self, node: int) -> list[int]:
    """The token sequence from the root to `node`."""
    out = []
    while node > 0:
      out.append(int(self.token[node]))
      node = int(self.parent[node])
    return out[::-1]

  def walk(self, tokens, node: int = 0) -> int:
    """The node reached from `node` by `tokens` (EOS excluded); -1 when it leaves the trie."""
    for t in tokens:
      node = self.children[node].get(int(t), -1)
      if node < 0:
        return -1
    return node

  def members(self) -> list[list[int]]:
    """Every member token sequence (EOS excluded), in node order."""
    return [self.path(i) for i in np.flatnonzero(self.member)]

  def longest_member(self) -> int:
    """The token length (EOS excluded) of the longest member (0 when there is none)."""
    return int(self.depth[self.member].max(initial=0))

  def leaves(self) -> np.ndarray:
    """i32[...] the nodes without children (every root-to-node path ends at one of them)."""
    return np.asarray([i for i, c in enumerate(self.children) if not c], np.int32)


def check_finite_kind(spec: Any) -> None:
  """Refuses constraint kinds whose language is never finite or blows up by construction.

  Raises:
    FeatureConflictError: a JSON object constraint (infinite), or a JSON Schema with
      insignificant whitespace allowed (every run of up to `max_whitespace` blanks between
      JSON tokens multiplies the language).
  """
  kind = str(getattr(spec.kind, "value", spec.kind))
  if kind == "json_object":
    raise FeatureConflictError(
        "sampling_law='exact-finite' needs a finite language; json_object accepts infinitely "
        "many outputs: use a JSON Schema with enum/const values, a choice or a bounded grammar")
  if kind == "json_schema" and spec.max_whitespace != 0:
    raise FeatureConflictError(
        f"sampling_law='exact-finite' with a JSON Schema needs max_whitespace=0 (got "
        f"{spec.max_whitespace}): runs of insignificant whitespace between JSON tokens multiply "
        f"the language; build it with OutputConstraint.json_schema(text, max_whitespace=0)")


def build(session: Any, vocab: Any, *, max_nodes: int = DEFAULT_MAX_NODES,
          max_depth: int = DEFAULT_MAX_DEPTH, name: str = "the constraint") -> TokenTrie:
  """Walks a fresh constraint session depth first and records every accepted token sequence.

  The session is never committed: each node's legal set comes from `session.lookahead` over
  its path (the mask after the last token), so any backend's session works.

  Args:
    session: a fresh session of the compiled constraint (`compiled.new_session()`).
    vocab: the constraint's Vocabulary (V, EOS ids).
    max_nodes: refuse languages whose trie has more nodes.
    max_depth: refuse token sequences longer than this (an infinite language hits it).
    name: how errors name the constraint (e.g. its kind and a short source).

  Returns:
    the TokenTrie.

  Raises:
    LanguageTooLargeError: the trie exceeds `max_nodes`, or a path exceeds `max_depth`.
  """
  t0 = time.perf_counter()
  eos = np.asarray(sorted(int(e) for e in vocab.eos_ids), np.int64)
  w = mask_layout.mask_words(vocab.size)
  buf = np.zeros((max_depth + 2, w), np.int32)
  parent, token, depth, member = [-1], [-1], [0], [False]
  children: list[dict[int, int]] = [{}]
  eos_seen: set[int] = set()
  stack = [(0, [])]
  while stack:
    node, path = stack.pop()
    n = len(path)
    states = session.lookahead(list(path), out=buf[:n + 1])
    if states[n] != mask_layout.READY:
      continue  # cannot happen for a legal path short of a dead end: no children, no EOS
    legal = np.flatnonzero(mask_layout.unpack(buf[n], vocab.size))
    is_eos = np.isin(legal, eos)
    if is_eos.any():
      member[node] = True
      eos_seen.update(int(t) for t in legal[is_eos])
    nxt = [int(t) for t in legal[~is_eos]]
    if nxt and n >= max_depth:
      raise LanguageTooLargeError(
          f"sampling_law='exact-finite': {name} accepts token sequences longer than "
          f"max_depth={max_depth} tokens (e.g. a prefix of {n} tokens still continues); its "
          f"language is too long or infinite: bound the grammar or use sampling_law='local'")
    for t in nxt:
      if len(parent) >= max_nodes:
        raise LanguageTooLargeError(
            f"sampling_law='exact-finite': {name} has more than max_nodes={max_nodes} token "
            f"sequences (prefixes of members, every tokenization counted); shrink the language, "
            f"sample within a law_tolerance (best first, certified) or use "
            f"sampling_law='local'")
      child = len(parent)
      parent.append(node)
      token.append(t)
      depth.append(n + 1)
      member.append(False)
      children.append({})
      children[node][t] = child
      stack.append((child, path + [t]))
  return TokenTrie(parent=np.asarray(parent, np.int32), token=np.asarray(token, np.int32),
                   depth=np.asarray(depth, np.int32), member=np.asarray(member, bool),
                   eos_ids=tuple(sorted(eos_seen)), children=tuple(children),
                   build_seconds=time.perf_counter() - t0)
