"""Draft ids outside the vocabulary through the engine and the device automaton.

A scripted drafter proposes the greedy continuation with one bad id (negative, V, the mask
words' spare bits, the logits' padding, Vm, past the words, int32 extremes) at a position
that moves from round to round, as a chain or a tree: at T = 0 every lane's output equals
ordinary decoding, for unconstrained lanes and every session type (xgrammar, llguidance,
trie on the host and on the device automaton, Qwen tool framing with the name companion).
The device automaton rejects such ids itself, and never wraps a wide integer to a legal id.
"""

from __future__ import annotations

import dataclasses
import functools
from typing import Any, ClassVar

import numpy as np
import pytest

from infernix_jax import constrain as ic
from infernix_jax import mask_layout
from infernix_jax.constrain.trie import tables as trie_tables
from infernix_jax.pallas import OneHotQ
from infernix_jax.runtime import device_automaton as da
from infernix_jax.runtime.drafters.base import Drafter, Proposal
from infernix_jax.runtime.engine import Engine
from infernix_jax.runtime.types import GenerationRequest
from infernix_jax.testing import exact_oracle as h
from tests.constrain.conftest import qwen3_vocab  # noqa: F401  (fixture)

K = 3
READY, UNREACHABLE = mask_layout.READY, mask_layout.UNREACHABLE


def bad_ids(vocab) -> tuple[int, ...]:
  v, w, vm = vocab.size, vocab.mask_words, vocab.padded_size
  ids = {-(2 ** 31), -1, v, 32 * w - 1, 32 * w, vm - 1, vm, 2 ** 31 - 1}
  return tuple(sorted(i for i in ids if not 0 <= i < v))


@dataclasses.dataclass(frozen=True, eq=False)
class Scripted(Drafter):
  """Drafts the known greedy output of each prompt, one draft replaced by a bad id.

  Round r of a lane puts ``bad[r % len(bad)]`` at draft position ``r % K`` (a tree: the
  scripted chain plus the bad id as a second child of the root and of the first node).
  """

  scripts: tuple = ()  # ((prompt ids, greedy output ids), ...)
  bad: tuple = ()
  as_tree: bool = False
  name: ClassVar[str] = "scripted"

  @property
  def tree(self) -> bool:  # type: ignore[override]
    return self.as_tree

  def init(self, spec):
    return None, ((None, 0),) * spec.lanes

  def extend(self, params, state, rows, hidden, reset):
    state = list(state)
    for lane, tokens in rows.items():
      if reset:
        state[lane] = (dict(self.scripts).get(tuple(tokens)), 0)
    return tuple(state)

  def propose(self, params, state, inp):
    b = len(state)
    drafts = np.zeros((b, self.k), np.int32)
    parents = np.tile(np.arange(-1, self.k - 1, dtype=np.int32), (b, 1))
    n = np.zeros((b,), np.int32)
    new = list(state)
    for i, (script, r) in enumerate(state):
      limit = min(int(inp.limit[i]), self.k)
      if script is None or limit <= 0:
        continue
      p = int(inp.position[i])
      true = [int(t) for t in script[p:p + self.k]]
      true += [0] * (self.k - len(true))
      bad = self.bad[r % len(self.bad)]
      if self.as_tree:
        # node 0 true[0] (root), node 1 bad (root), node 2 true[1] (under 0), node 3.. bad
        # (under 0); depth 1 only when the lane may take one draft
        deep = limit >= 2
        row = [true[0], bad, true[1] if deep else bad] + [bad] * (self.k - 3)
        par = [-1, -1, 0 if deep else -1] + [0 if deep else -1] * (self.k - 3)
        drafts[i], parents[i] = row, par
        n[i] = self.k
      else:
        row = list(true)
        row[r % self.k] = bad
        drafts[i] = row
        n[i] = limit
      new[i] = (script, r + 1)
    parent_rows = parents if self.as_tree else None
    return Proposal(drafts, n, OneHotQ(), parent_rows), tuple(new)


def _requests(specs, prompts, max_tokens):
  return [GenerationRequest(list(p), max_tokens=max_tokens, constraint=s)
          for p, s in zip(prompts, specs)]


TOY_SPECS = [
    None,
    ic.OutputConstraint.regex("(a|b|c|ab)+x[12]{1,4}").with_backend("xgrammar"),
    ic.OutputConstraint.regex("(a|b|c|ab)+x[12]{1,4}").with_backend("llguidance"),
    ic.OutputConstraint.choice(["abc", "ab", "ba1", "cab", "x{y}", "abcabcab"]).with_backend(
        "trie"),
]
TOY_PROMPTS = [[1, 1, 2, 1], [2, 1, 1, 2, 1], [3, 2, 1, 2], [1, 2, 3, 1, 2]]


@functools.lru_cache(maxsize=None)
def _toy_reference():
  cfg, model = h.tiny_model()
  eng = Engine(model, h.toy_vocab(), None, lanes=4, capacity=40)
  return eng.generate(_requests(TOY_SPECS, TOY_PROMPTS, 12))


@pytest.mark.slow  # an engine per cell
@pytest.mark.parametrize("as_tree", [False, True])
@pytest.mark.parametrize("on_device", [False, True])
def test_toy_engine_output_equals_ordinary_decoding(as_tree, on_device):
  vocab = h.toy_vocab()
  want = _toy_reference()
  assert all(r.error is None for r in want), [r.error for r in want]
  scripts = tuple((tuple(p), tuple(r.token_ids)) for p, r in zip(TOY_PROMPTS, want))
  drafter = Scripted(k=K, scripts=scripts, bad=bad_ids(vocab), as_tree=as_tree)
  cfg, model = h.tiny_model()
  eng = Engine(model, vocab, drafter, lanes=4, capacity=40, device_automaton=on_device)
  got = eng.generate(_requests(TOY_SPECS, TOY_PROMPTS, 12))
  for g, w in zip(got, want):
    assert g.error is None, g.error
    assert (g.token_ids, g.text, g.finish_reason) == (w.token_ids, w.text, w.finish_reason)
  assert sum(g.drafted for g in got) > 0 and sum(g.accepted for g in got) > 0


@pytest.mark.slow  # two engines over the full Qwen3 logits width
def test_qwen_tool_call_engine_output_equals_ordinary_decoding(qwen3_vocab):  # noqa: F811
  """The reported case: a non-strict Qwen tool call (name companion) on a model whose logits
  (Vm 151936) are wider than the mask (4740 words = 151680 ids) and the vocabulary (V)."""
  from infernix_jax.constrain import framing as fr
  from tests.runtime.test_thinking_budget import CONTENT, tiny_qwen3
  cfg, model = tiny_qwen3()
  tools = fr.parse_tools([{"type": "function", "function": {
      "name": "note", "parameters": {"type": "object", "required": ["text"],
                                     "properties": {"text": {"type": "string"}}}}}])

  def reqs():
    return [GenerationRequest(CONTENT, max_tokens=24, tools=tools, tool_choice="required"),
            GenerationRequest(CONTENT, max_tokens=24)]

  want = Engine(model, qwen3_vocab, None, lanes=2, capacity=64, cfg=cfg).generate(reqs())
  assert all(r.error is None for r in want), [r.error for r in want]
  scripts = ((tuple(CONTENT), tuple(want[0].token_ids)),)
  drafter = Scripted(k=K, scripts=scripts, bad=bad_ids(qwen3_vocab))
  got = Engine(model, qwen3_vocab, drafter, lanes=2, capacity=64, cfg=cfg).generate(reqs())
  for g, w in zip(got, want):
    assert g.error is None, g.error
    assert (g.token_ids, g.text, g.finish_reason) == (w.token_ids, w.text, w.finish_reason)
  assert got[0].drafted > 0


def test_device_automaton_rejects_out_of_vocab_drafts():
  """The device lookahead equals the host trie session's for every bad id at every position,
  for int32 drafts and for wider integers (2**32 + a legal id must not wrap to that id)."""
  vocab = h.toy_vocab()
  compiled = ic.ConstraintCompiler(vocab).compile(
      ic.OutputConstraint.choice(["abc", "ab", "ba1", "cab"]).with_backend("trie"))
  session = compiled.new_session()
  auto = da.DeviceAutomaton.from_tables(trie_tables.export(session.automaton, dense=False))
  chain = [4, 3]  # "ab" "c"
  rows, host_rows = [], []
  for j in range(len(chain) + 1):
    for bad in bad_ids(vocab) + (2 ** 32 + chain[j] if j < len(chain) else 2 ** 32,
                                  -(2 ** 32) + 4, 2 ** 40):
      rows.append(chain[:j] + [bad] + chain[j:])
      host_rows.append(chain[:j] + [-1] + chain[j:])
  k = len(chain) + 1
  buf = np.zeros((k + 1, vocab.mask_words), np.int32)
  want = [(session.lookahead(r, out=buf).copy(), buf.copy()) for r in host_rows]
  nodes = np.full(len(rows), session.node, np.int32)
  masks, states, _ = da.lookahead(auto, nodes, np.array(rows, np.int64),
                                  np.full(len(rows), k, np.int32))
  for b, (w_states, w_mask) in enumerate(want):
    assert np.array_equal(np.asarray(states[b]), w_states), rows[b]
    assert np.array_equal(np.asarray(masks[b]), w_mask), rows[b]
  # The same drafts as a tree (each row a chain: parents j - 1).
  parents = np.tile(np.arange(-1, k - 1, dtype=np.int32), (len(rows), 1))
  tmasks, tstates = da.tree_lookahead(auto, nodes, np.array(rows, np.int64), parents,
                                      np.full(len(rows), k, np.int32))
  assert np.array_equal(np.asarray(tstates), np.asarray(states))
  assert np.array_equal(np.asarray(tmasks), np.asarray(masks))
  # A wide id whose low 32 bits are a legal first token is illegal, not that token.
  one = np.array([[2 ** 32 + 4]], np.int64)
  _, st, path = da.lookahead(auto, np.array([session.node], np.int32), one,
                             np.array([1], np.int32))
  assert np.asarray(st).tolist() == [[READY, UNREACHABLE]]
  assert int(np.asarray(path)[0, 1]) == auto.dead
