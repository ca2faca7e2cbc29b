"""Device-resident trie automaton: per-state masks and sparse transitions as jnp arrays.

Regular constraints (choice via the trie backend) can run drafting and verification masks on the
device with no host round trip (DESIGN.md section 6). The host compiles and exports the tables
(``constrain.trie.tables.export``); this module uploads them and provides pure jnp functions:

  auto = DeviceAutomaton.from_tables(tables)
  nodes = step(auto, nodes, tokens)            # [...] -> [...]; illegal -> auto.dead
  words = mask(auto, nodes)                    # [...] -> [..., W] packed int32
  masks, states, path = lookahead(auto, nodes [B], drafts [B, K], n_drafts [B])

States S = N + 2: trie nodes, ``end`` (EOS accepted) and ``dead``; both sinks have an all-zero
mask and step to ``dead``. Axis letters (docs/CONTRACTS.md): B rows, K drafts, P = K + 1 positions,
W mask words.
"""

from __future__ import annotations

import dataclasses
import functools

import jax
import jax.numpy as jnp
import numpy as np

from infernix_jax import mask_layout


@functools.partial(
    jax.tree_util.register_dataclass,
    data_fields=["row_ptr", "ids", "next", "masks", "word_ptr", "word_idx", "word_val",
                 "dense_of", "dense"],
    meta_fields=["vocab_size", "n_nodes", "end", "dead", "search_steps", "max_words"])
@dataclasses.dataclass(frozen=True)
class DeviceAutomaton:
  """A trie automaton on the device (a pytree: pass it to jitted functions as an argument).

  Attributes:
    row_ptr: int32 [S + 1]; ids: int32 [E + 1]; next: int32 [E + 1] (one sentinel entry).
    masks: int32 [S, W] per-state packed masks, or None (compact form below).
    word_ptr: int32 [S + 1]; word_idx, word_val: int32 [Ew + 1]; dense_of: int32 [S];
      dense: int32 [Nd + 1, W] (compact form: non-zero words of narrow states, packed rows of
      wide ones).
    vocab_size: V. n_nodes: N trie nodes. end, dead: the sinks.
    search_steps: binary-search iterations (ceil(log2(longest row + 1))).
    max_words: most stored words of a narrow state.
  """

  row_ptr: jax.Array
  ids: jax.Array
  next: jax.Array
  masks: jax.Array | None
  word_ptr: jax.Array
  word_idx: jax.Array
  word_val: jax.Array
  dense_of: jax.Array
  dense: jax.Array
  vocab_size: int
  n_nodes: int
  end: int
  dead: int
  search_steps: int
  max_words: int

  @property
  def mask_words(self) -> int:
    return mask_layout.mask_words(self.vocab_size)

  @classmethod
  def from_tables(cls, tables, device=None) -> "DeviceAutomaton":
    """Uploads ``constrain.trie.tables.AutomatonTables`` to ``device`` (default device if None)."""
    put = functools.partial(jax.device_put, device=device)
    pad = lambda a, v: np.concatenate([np.asarray(a, np.int32), np.array([v], np.int32)])  # noqa: E731
    w = mask_layout.mask_words(tables.vocab_size)
    dense = np.concatenate([tables.dense.reshape(-1, w), np.zeros((1, w), np.int32)])
    return cls(
        row_ptr=put(np.asarray(tables.row_ptr, np.int32)),
        ids=put(pad(tables.ids, -1)), next=put(pad(tables.next, tables.dead)),
        masks=None if tables.masks is None else put(tables.masks),
        word_ptr=put(np.asarray(tables.word_ptr, np.int32)),
        word_idx=put(pad(tables.word_idx, 0)), word_val=put(pad(tables.word_val, 0)),
        dense_of=put(np.asarray(tables.dense_of, np.int32)), dense=put(dense),
        vocab_size=int(tables.vocab_size), n_nodes=int(tables.end), end=int(tables.end),
        dead=int(tables.dead), search_steps=max(1, int(np.ceil(np.log2(tables.max_row + 1)))),
        max_words=max(1, int(tables.max_words)))


def token_ids(token) -> jax.Array:
  """Token ids as int32 with no wrap-around: an id that int32 cannot hold (a wider integer
  input, e.g. 2**32 + 5) becomes -1, which no state accepts, instead of wrapping to a
  possibly legal id. Ids in int32 but outside 0..V-1 need nothing here: `step` finds no edge
  for them, so they are illegal drafts like any other."""
  if not isinstance(token, jax.Array):
    token = np.asarray(token)
    if token.dtype.kind not in "iu":
      raise TypeError(f"token ids must be integers, got dtype {token.dtype}")
  if token.dtype.itemsize > 4 or token.dtype == np.uint32:
    lo, hi = np.iinfo(np.int32).min, np.iinfo(np.int32).max
    fits = (token >= lo) & (token <= hi)
    token = (jnp.where(fits, token, -1) if isinstance(token, jax.Array)
             else np.where(fits, token, -1))
  return jnp.asarray(token, jnp.int32)


def step(auto: DeviceAutomaton, node: jax.Array, token: jax.Array) -> jax.Array:
  """The state after ``token`` from ``node`` (``auto.dead`` when the token is illegal).

  Args:
    auto: the device automaton.
    node: int32 [...] states (anything outside 0..S-1 is treated as dead).
    token: int [...] token ids (broadcast against ``node``); an id outside 0..V-1 (negative,
      in the logits' padding, past it) has no edge: the result is ``auto.dead``.

  Returns:
    int32 [...] next states.
  """
  node = jnp.asarray(node, jnp.int32)
  token = token_ids(token)
  node, token = jnp.broadcast_arrays(node, token)
  in_range = (node >= 0) & (node <= auto.dead)
  node = jnp.where(in_range, node, auto.dead)
  lo = auto.row_ptr[node]
  end = auto.row_ptr[node + 1]
  hi = end
  last = auto.ids.shape[0] - 1
  # Lower bound of `token` in the node's ascending id segment; fixed trip count (static).
  for _ in range(auto.search_steps):
    active = lo < hi
    mid = (lo + hi) >> 1
    less = auto.ids[jnp.minimum(mid, last)] < token
    lo = jnp.where(active & less, mid + 1, lo)
    hi = jnp.where(active & ~less, mid, hi)
  j = jnp.minimum(lo, last)
  found = (lo < end) & (auto.ids[j] == token)
  return jnp.where(found, auto.next[j], auto.dead).astype(jnp.int32)


def mask(auto: DeviceAutomaton, node: jax.Array) -> jax.Array:
  """Packed legal-token mask of each state.

  Args:
    auto: the device automaton.
    node: int32 [...] states.

  Returns:
    int32 [..., W] (mask_layout words; sinks are all zero).
  """
  node = jnp.asarray(node, jnp.int32)
  node = jnp.where((node >= 0) & (node <= auto.dead), node, auto.dead)
  if auto.masks is not None:
    return auto.masks[node]
  flat = node.reshape(-1)
  w = auto.mask_words
  last = auto.word_idx.shape[0] - 1

  def one(n):
    start = auto.word_ptr[n]
    cnt = auto.word_ptr[n + 1] - start
    j = jnp.arange(auto.max_words, dtype=jnp.int32)
    pos = jnp.minimum(start + j, last)
    widx = jnp.where(j < cnt, auto.word_idx[pos], w)   # index w is out of range: dropped
    sparse = jnp.zeros((w,), jnp.int32).at[widx].set(auto.word_val[pos], mode="drop")
    d = auto.dense_of[n]
    return jnp.where(d >= 0, auto.dense[jnp.where(d >= 0, d, auto.dense.shape[0] - 1)], sparse)

  return jax.vmap(one)(flat).reshape(node.shape + (w,))


def lookahead(auto: DeviceAutomaton, node: jax.Array, drafts: jax.Array,
              n_drafts: jax.Array) -> tuple[jax.Array, jax.Array, jax.Array]:
  """Masks for K drafts per row, with the host sessions' lookahead semantics (DESIGN.md 3).

  Position i is Ready with the mask of the prefix drafts[:i] when that prefix was accepted
  and its legal set is non-empty, DeadEnd when it was accepted but nothing is legal, and
  Unreachable (all-zero filler) after an illegal draft, after EOS (also an EOS committed
  before the call), or past ``n_drafts``.

  Args:
    auto: the device automaton.
    node: int32 [B] current state of each row.
    drafts: int32 [B, K] draft tokens.
    n_drafts: int32 [B] drafts to check per row (0..K).

  Returns:
    (masks int32 [B, P, W], states int8 [B, P], path int32 [B, P]): ``path[:, i]`` is the state
    after drafts[:i] (dead once a draft was illegal).
  """
  node = jnp.asarray(node, jnp.int32)
  drafts = token_ids(drafts)
  n_drafts = jnp.asarray(n_drafts, jnp.int32)
  k = drafts.shape[1]

  def body(cur, inp):
    i, tok = inp
    nxt = step(auto, cur, tok)
    nxt = jnp.where(i < n_drafts, nxt, auto.dead)
    return nxt, nxt

  _, rest = jax.lax.scan(body, node, (jnp.arange(k, dtype=jnp.int32), drafts.T))
  path = jnp.concatenate([node[:, None], rest.T], axis=1)          # [B, P]
  words = mask(auto, path)                                          # [B, P, W]
  nonempty = jnp.any(words != 0, axis=-1)                           # [B, P]
  # A position is reached when its prefix was accepted and did not end: a live trie node.
  # (A row that already accepted EOS starts at `end`: every position is Unreachable.)
  reached = path < auto.n_nodes
  states = jnp.where(reached, jnp.where(nonempty, mask_layout.READY, mask_layout.DEAD_END),
                     mask_layout.UNREACHABLE).astype(jnp.int8)
  return jnp.where(reached[..., None], words, 0), states, path


class AutomatonSet:
  """The tries of the active lanes as one DeviceAutomaton, re-uploaded when the set changes.

  Lanes of different choice sets share one table (`constrain.trie.tables.combine`); a lane's
  state on the device is `node_of(session)`.
  """

  def __init__(self):
    self._key: tuple = ()
    self._offsets: dict[int, int] = {}
    self._keep: list = []  # the automata of the current tables (their ids stay valid)
    self.auto: DeviceAutomaton | None = None
    self._end = self._dead = 0

  def update(self, sessions) -> DeviceAutomaton | None:
    """The DeviceAutomaton covering `sessions` (TrieSessions), rebuilt only when needed."""
    from infernix_jax.constrain.trie import tables as trie_tables
    automata = {id(s.automaton): s for s in sessions}
    key = tuple(sorted(automata))
    if not key:
      return None
    if key != self._key and not set(key) <= set(self._offsets):
      parts = [trie_tables.export(automata[i].automaton, dense=False) for i in key]
      combined, offsets = trie_tables.combine(parts)
      self.auto = DeviceAutomaton.from_tables(combined)
      self._offsets = {i: int(o) for i, o in zip(key, offsets)}
      self._keep = [automata[i].automaton for i in key]
      self._end, self._dead = combined.end, combined.dead
      self._key = key
    return self.auto

  def node_of(self, session) -> int:
    """The lane's state in the combined automaton (sinks map to the shared sinks)."""
    a, node = session.automaton, session.node
    if node == a.end:
      return self._end
    if node == a.dead:
      return self._dead
    return self._offsets[id(a)] + node


def tree_lookahead(auto: DeviceAutomaton, node: jax.Array, drafts: jax.Array,
                   parents: jax.Array, n_nodes: jax.Array) -> tuple[jax.Array, jax.Array]:
  """`lookahead` over a draft tree: position 0 is the row's state, position j + 1 the state
  after drafted node j's root path (parents[j] in {-1, 0..j-1}; nodes >= n_nodes dead).

  Args:
    node: int32 [B]; drafts, parents: int32 [B, N]; n_nodes: int32 [B].

  Returns:
    (masks int32 [B, N + 1, W], states int8 [B, N + 1]) with `lookahead`'s semantics.
  """
  node = jnp.asarray(node, jnp.int32)
  drafts = token_ids(drafts)
  parents = jnp.asarray(parents, jnp.int32)
  b, k = drafts.shape
  path = jnp.concatenate([node[:, None], jnp.full((b, k), auto.dead, jnp.int32)], axis=1)
  rows = jnp.arange(b)
  for j in range(k):  # parents first: a node steps from its parent's state
    cur = path[rows, jnp.clip(parents[:, j] + 1, 0, k)]
    nxt = jnp.where(j < n_nodes, step(auto, cur, drafts[:, j]), auto.dead)
    path = path.at[:, j + 1].set(nxt)
  words = mask(auto, path)                                          # [B, N + 1, W]
  nonempty = jnp.any(words != 0, axis=-1)
  reached = path < auto.n_nodes
  states = jnp.where(reached, jnp.where(nonempty, mask_layout.READY, mask_layout.DEAD_END),
                     mask_layout.UNREACHABLE).astype(jnp.int8)
  return jnp.where(reached[..., None], words, 0), states
