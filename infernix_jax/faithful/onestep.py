"""The one-step estimate of the grammar-faithful law for any constraint, by on-demand forwards.

μ*(y) ∝ p(y)·[y ∈ L] decodes token by token with p*(t | y) ∝ p(t | y)·Φ(y t), Φ the future
validity (`faithful.law`). The one-step estimator (Nie et al., arXiv:2605.07698) replaces Φ by
the legal mass one token later, Φ̂(y t) = Σ_{u legal after y t} p(u | y t) (EOS counted where
it is legal), and gives EOS at y the weight p(EOS | y) (Φ̂ = 1: the output ends, valid). It
needs no token trie: the target runs once more per evaluated candidate at the positions
actually decoded, so any constraint works (unbounded grammars, JSON with whitespace, regex).

Axis letters (docs/CONTRACTS.md): P verified positions of one lane (padded), Q positions of a
target row (a tree-attention row: the anchor, the drafts, the candidates), R candidates of one
lane and round (padded to a power of two), W mask words, V vocab, Vm logits width; C
candidates per position (+1: the best legal token left out).
"""

from __future__ import annotations

import functools
import time
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from infernix_jax import mask_layout
from infernix_jax.faithful.law import GREEDY_BLOCK
from infernix_jax.faithful.target import ForwardCost, pow2
from infernix_jax.pallas import unpack_legal

DEFAULT_CANDIDATES = 16  # legal tokens per position whose Φ̂ is evaluated (the most probable)
PREFILL_OVER = 64  # output tokens not yet in the law's cache: above this, prefilled first
MIN_ROWS = 8  # positions and candidates of a call are powers of two from here (few compiles)


def _unpack(words, vocab_size: int):
  """Packed masks i32[N, W] -> bool[N, V] on the device (`mask_layout` bit order)."""
  return unpack_legal(words, jnp.ones(words.shape[:1], bool), vocab_size, vocab_size)


@functools.partial(jax.jit, static_argnames=("vocab_size", "top"))
def _position_stats(logits, at, words, is_eos, temperature, *, vocab_size: int, top: int):
  """What the host needs at each verified position of one lane, from one target row.

  Args:
    logits: f32[1, Q, Vm] the lane's row; at: i32[P] the row position of each verified
      position; words: i32[P, W] their legal masks; is_eos: bool[V]; temperature: f32[].
    vocab_size: V; top: C + 1.

  Returns:
    (top_ids i32[P, C+1], top_logp f32[P, C+1]: the most probable legal non-EOS tokens, -inf
    past the legal ones; rest f32[P]: log mass of the legal tokens (EOS included) outside
    the first C; eos f32[P]: log mass of the legal EOS ids; eos_id i32[P]: the likeliest).
  """
  z = logits[0, at, :vocab_size].astype(jnp.float32) / temperature  # [P, V]
  lp = jax.nn.log_softmax(z, axis=-1)
  legal = _unpack(words, vocab_size)  # [P, V]
  top_lp, top_id = jax.lax.top_k(jnp.where(legal & ~is_eos, lp, -jnp.inf), top)  # [P, C+1]
  p = at.shape[0]
  cand = jnp.zeros_like(legal).at[jnp.arange(p)[:, None], top_id[:, :top - 1]].set(
      top_lp[:, :top - 1] > -jnp.inf)  # [P, V]
  rest = jax.nn.logsumexp(jnp.where(legal & ~cand, lp, -jnp.inf), axis=-1)
  eos = jnp.where(legal & is_eos, lp, -jnp.inf)  # [P, V]
  return (top_id, top_lp, rest, jax.nn.logsumexp(eos, axis=-1),
          jnp.argmax(eos, axis=-1).astype(jnp.int32))


@functools.partial(jax.jit, static_argnames=("vocab_size",))
def _legal_mass(logits, at, words, temperature, *, vocab_size: int):
  """log Σ_{u legal} p(u | node): logits f32[1, Q, Vm] of a tree row, at i32[R] the nodes,
  words i32[R, W] their legal masks -> f32[R] (-inf where nothing is legal)."""
  z = logits[0, at, :vocab_size].astype(jnp.float32) / temperature  # [R, V]
  lp = jax.nn.log_softmax(z, axis=-1)
  return jax.nn.logsumexp(jnp.where(_unpack(words, vocab_size), lp, -jnp.inf), axis=-1)


class OneStepLaw:
  """p̂*(t | y) ∝ p(t | y)·Φ̂(y t) of one request, applied by the engine as a logit bias.

  Φ̂(y t) is evaluated for the `candidates` most probable legal non-EOS tokens at y; every
  other legal token keeps Φ̂ = 1, i.e. exactly its weight under the local law (with
  `candidates` >= the legal set the law is the estimator's, as `ExactFiniteLaw.onestep` gives
  on a finite language). EOS at y has Φ̂ = 1.

  Cost per `bias_row` (one lane, one round): one target call over [output not yet cached,
  last committed token, drafts] (p at every verified position, and the law's KV cache
  catches up with the committed output), then one tree-attention call (`models.tree_verify`)
  over the last committed token, the drafts and, under each position i, its candidates t
  (each reads drafts[:i] only: p(· | y t), hence Φ̂), plus a constraint lookahead per
  candidate. A prompt longer than PREFILL_OVER is prefilled (chunked) on the first call.

  The state is the number of committed output tokens (the engine's lanes start at 0); the
  tokens themselves are kept here, since a law serves one request: `advance` from a state
  drops whatever the law held after it.

  Args:
    graphdef, state: the target (`nnx.split(model)`).
    cfg: its ModelConfig.
    prompt: the request's prompt ids (at least one).
    compiled: the request's compiled constraint (the law opens its own session).
    vocab: the constraint's Vocabulary (V, EOS ids).
    candidates: C, the tokens per position whose Φ̂ is evaluated.

  Attributes:
    cost: ForwardCost of every target call so far (seconds: the whole of `bias_row`).
    report: a ConstraintReport (or None) whose law_forwards / law_tokens / law_seconds grow
      with `cost` (the engine sets it).
  """

  def __init__(self, graphdef: Any, state: Any, cfg: Any, prompt, compiled: Any, vocab: Any,
               *, candidates: int = DEFAULT_CANDIDATES):
    if candidates < 1:
      raise ValueError(f"candidates={candidates} must be >= 1")
    prompt = [int(t) for t in prompt]
    if not prompt:
      raise ValueError("the prompt is empty: give at least one token")
    self.graphdef, self.state, self.cfg = graphdef, state, cfg
    self.prompt, self.compiled, self.vocab = prompt, compiled, vocab
    self.v = vocab.size
    self.w = mask_layout.mask_words(self.v)
    self.c = min(candidates, self.v - 1)  # never more than the non-EOS ids
    self.eos_ids = tuple(sorted(int(e) for e in vocab.eos_ids))
    self._is_eos = np.zeros(self.v, bool)
    self._is_eos[list(self.eos_ids)] = True
    self.cost = ForwardCost()
    self.report = None
    self._output: list[int] = []  # the committed output (EOS excluded)
    self._cache = None  # one-row KVCache of prompt + output, all but the last token
    self._held: list[int] = []  # the tokens whose keys the cache holds (lengths[0] of them)
    self._anchor = prompt[-1]  # the last token of prompt + output (not in the cache)
    self._session = None  # the law's own constraint session (lookahead only after commits)
    self._session_path: list[int] = []  # the output tokens it committed

  # --- what the engine calls -----------------------------------------------------------------
  def advance(self, state: int, tokens) -> int:
    """The state after `tokens` (EOS excluded) from `state`: the output length."""
    del self._output[state:]
    self._output.extend(int(t) for t in tokens)
    return len(self._output)

  def bias_row(self, state: int, drafts, out: np.ndarray, temperature: float) -> None:
    """Writes the bias of every verified position of one lane: out[i] (f32[Vm], zeroed) gets
    that of the output `state` followed by drafts[:i], for i in 0 .. len(drafts).

    Sampling (T > 0): T·(log Φ̂(y t) − log Z(y)) on the legal tokens, Φ̂ = 1 off the
    evaluated candidates and on EOS, Z(y) = Σ_t p(t | y)·Φ̂(y t) over the legal set (EOS
    included), so softmax(logits / T + bias / T) over the legal set is p̂*. Greedy (T = 0):
    0 on the argmax of p(t | y)·Φ̂(y t) (p at T = 1; ties: EOS, then the smaller id),
    GREEDY_BLOCK on every other legal token. Positions the constraint cannot reach (an
    illegal draft before them) or where nothing is legal get no bias.
    """
    t0 = time.perf_counter()
    forwards, tokens = self.cost.forwards, self.cost.tokens
    drafts = [int(t) for t in np.asarray(drafts).reshape(-1)]
    t = float(temperature) if temperature > 0 else 1.0
    session = self._session_at(state)
    n = len(drafts)
    buf = np.zeros((n + 2, self.w), np.int32)  # [P + 1, W]
    states = session.lookahead(drafts, out=buf[:n + 1])
    ready = [i for i in range(n + 1) if states[i] == mask_layout.READY]
    if ready:
      stats = self._positions(state, drafts[:ready[-1]], ready, buf, t)
      cands = self._candidates(session, drafts, ready, stats, t)
      for k, i in enumerate(ready):
        self._write(out[i], buf[i], [x[k] for x in stats], cands[k], float(temperature))
    self._spend(self.cost.forwards - forwards, self.cost.tokens - tokens,
                time.perf_counter() - t0)

  # --- the three steps of bias_row -----------------------------------------------------------
  def _positions(self, state: int, drafts: list[int], ready: list[int], masks: np.ndarray,
                 t: float):
    """One target call over [output not yet cached, anchor, drafts]: the stats of
    `_position_stats` at the `ready` positions (numpy); the cache then holds the output."""
    from infernix_jax import models as im
    seq = self.prompt + self._output[:state]
    need = len(seq) - 1  # the cache holds all but the anchor
    held = self._held
    if len(held) <= need and held == seq[:len(held)]:
      common = len(held)  # the usual case: the output only grew
    else:
      common = next((j for j, (a, b) in enumerate(zip(held, seq)) if a != b),
                    min(len(held), need))
    pending = seq[common:need]
    if len(pending) > PREFILL_OVER:  # a long prompt: chunked prefill first
      head = np.zeros((1, pow2(len(pending), 16)), np.int32)  # [1, T]
      self._grow(common + head.shape[1])
      head[0, :len(pending)] = pending
      _, _, self._cache = im.prefill(self.graphdef, self.state,
                                     self._cache.with_lengths(np.asarray([common], np.int32)),
                                     head, np.asarray([len(pending)], np.int32))
      self.cost.forwards += 1
      self.cost.tokens += len(pending)
      common, pending = need, []
    row = pending + [seq[-1]] + drafts
    width = pow2(len(row), MIN_ROWS)
    self._grow(common + width)
    tokens = np.zeros((1, width), np.int32)  # [1, Q]
    tokens[0, :len(row)] = row
    logits, _, cache = im.verify(self.graphdef, self.state,
                                 self._cache.with_lengths(np.asarray([common], np.int32)),
                                 jnp.asarray(tokens))
    self._cache = cache.with_lengths(np.asarray([need], np.int32))
    self._held, self._anchor = seq[:need], seq[-1]
    self.cost.forwards += 1
    self.cost.tokens += width
    p = pow2(len(ready), MIN_ROWS)
    at = np.full((p,), len(pending) + ready[-1], np.int32)  # [P]
    at[:len(ready)] = [len(pending) + i for i in ready]
    words = np.zeros((p, self.w), np.int32)  # [P, W]
    words[:len(ready)] = masks[ready]
    out = _position_stats(logits, jnp.asarray(at), jnp.asarray(words),
                          jnp.asarray(self._is_eos), jnp.float32(t), vocab_size=self.v,
                          top=self.c + 1)
    top_id, top_lp, rest, eos, eos_id = (np.asarray(x)[:len(ready)] for x in out)
    return (top_id.astype(np.int64), top_lp.astype(np.float64), rest.astype(np.float64),
            eos.astype(np.float64), eos_id.astype(np.int64))

  def _candidates(self, session, drafts: list[int], ready: list[int], stats, t: float):
    """Φ̂ of each ready position's candidates: per position (ids i64[C'], log p f64[C'],
    log Φ̂ f64[C']), from one tree-attention call over the token tree [anchor, drafts, and
    under each position i its candidates t] (node t reads anchor, drafts[:i], t)."""
    from infernix_jax import models as im
    top_id, top_lp = stats[0], stats[1]
    chain = drafts[:ready[-1]]
    nodes, at, words, per = [], [], [], []
    buf = np.zeros((len(chain) + 2, self.w), np.int32)
    for k, i in enumerate(ready):
      keep = np.isfinite(top_lp[k, :self.c])
      ids = top_id[k, :self.c][keep]
      per.append((ids, top_lp[k, :self.c][keep], len(nodes)))
      for tok in ids:
        session.lookahead(chain[:i] + [int(tok)], out=buf[:i + 2])  # READY or DEAD_END
        nodes.append((int(tok), i))
        words.append(buf[i + 1].copy())
    if not nodes:
      return [(ids, lp, np.zeros(0)) for ids, lp, _ in per]
    q = pow2(1 + len(chain) + len(nodes), 16)  # buckets bound the compiles
    tokens = np.zeros((1, q), np.int32)  # [1, Q]: the anchor, the chain, the candidates
    depth = np.zeros((1, q), np.int32)
    ancestors = np.zeros((1, q, q), bool)  # [1, Q, Q]
    ancestors[0, np.arange(q), np.arange(q)] = True  # padding reads itself only
    tokens[0, :1 + len(chain)] = [self._anchor] + chain
    depth[0, :1 + len(chain)] = np.arange(1 + len(chain))
    ancestors[0, :1 + len(chain), :1 + len(chain)] = np.tri(1 + len(chain), dtype=bool)
    for j, (tok, i) in enumerate(nodes, start=1 + len(chain)):
      tokens[0, j], depth[0, j] = tok, i + 1
      ancestors[0, j, :i + 1] = True  # the anchor and drafts[:i]
      at.append(j)
    r = pow2(len(nodes), MIN_ROWS)
    at_ = np.zeros((r,), np.int32)  # [R]
    at_[:len(nodes)] = at
    words_ = np.zeros((r, self.w), np.int32)  # [R, W]
    words_[:len(nodes)] = words
    self._grow(len(self._held) + q)
    logits, self._cache = im.tree_verify(self.graphdef, self.state, self._cache,
                                         jnp.asarray(tokens), jnp.asarray(depth),
                                         jnp.asarray(ancestors))
    mass = np.asarray(_legal_mass(logits, jnp.asarray(at_), jnp.asarray(words_),
                                  jnp.float32(t), vocab_size=self.v), np.float64)
    self.cost.forwards += 1
    self.cost.tokens += q
    return [(ids, lp, mass[start:start + len(ids)]) for ids, lp, start in per]

  def _write(self, out: np.ndarray, words: np.ndarray, stats, cand, temperature: float) -> None:
    """One position's bias into out (f32[Vm]) from its stats and candidates' Φ̂."""
    top_id, top_lp, rest, eos_lp, eos_id = stats
    ids, lp, log_phi = cand
    legal = np.flatnonzero(mask_layout.unpack(words, self.v))
    if temperature > 0:
      log_z = np.logaddexp.reduce(np.append(lp + log_phi, rest))
      if not np.isfinite(log_z):
        return  # no legal mass under p at all: leave the local law
      out[legal] = -temperature * log_z
      out[ids] = np.maximum(temperature * (log_phi - log_z), GREEDY_BLOCK)
      return
    # Greedy: candidates weigh p·Φ̂; the best token left out weighs p (Φ̂ = 1).
    weights = list(zip(lp + log_phi, ids))
    if len(ids) < len(top_lp) and np.isfinite(top_lp[len(ids)]):
      weights.append((top_lp[len(ids)], top_id[len(ids)]))
    best = max(weights, key=lambda x: (x[0], -x[1]), default=(-np.inf, -1))
    choice = int(eos_id) if np.isfinite(eos_lp) and eos_lp >= best[0] else int(best[1])
    if choice < 0 or not np.isfinite(max(best[0], eos_lp)):
      return
    out[legal] = GREEDY_BLOCK
    out[choice] = 0.0

  # --- state ---------------------------------------------------------------------------------
  def _session_at(self, state: int):
    """The law's session, committed to the first `state` output tokens (a fresh one when
    what it committed is not a prefix of them: sessions only move forward)."""
    done = self._session_path
    if self._session is None or len(done) > state or done != self._output[:len(done)]:
      self._session, done = self.compiled.new_session(), []
    extra = self._output[len(done):state]
    if extra:
      r = self._session.accept(extra)
      if int(r.accepted) != len(extra):
        self._session, self._session_path = None, []
        raise ValueError(f"the constraint accepts {int(r.accepted)} of the {len(extra)} output "
                         f"tokens {extra[:8]} the law was advanced by; advance only by tokens "
                         f"the request's session committed")
    self._session_path = self._output[:state]
    return self._session

  def _grow(self, capacity: int) -> None:
    """Makes the one-row cache hold at least `capacity` positions (prefilled the first time
    with nothing: `_positions` appends the prompt like any uncached output)."""
    from infernix_jax import models as im
    size = pow2(capacity, 64)
    if self._cache is None:
      self._cache = im.KVCache.init(self.cfg, batch=1, capacity=size)
    elif self._cache.capacity < size:
      pad = ((0, 0), (0, 0), (0, size - self._cache.capacity), (0, 0), (0, 0))  # S only
      self._cache = type(self._cache)(k=jnp.pad(self._cache.k, pad),
                                      v=jnp.pad(self._cache.v, pad), lengths=self._cache.lengths)

  def _spend(self, forwards: int, tokens: int, seconds: float) -> None:
    self.cost.seconds += seconds
    if self.report is not None:
      self.report.law_forwards += forwards
      self.report.law_tokens += tokens
      self.report.law_seconds += seconds
