"""A toy target/drafter/grammar world for speculative-acceptance tests.

Logits, grammar sets and proposal distributions at position i depend on the prefix
d_0..d_{i-1} through lookup tables, so the exact target process is known: t_0 ~ p_0,
t_1 ~ p_1(. | t_0), ... (p from the FP64 oracle). Drafts are really sampled from q, masks
and states follow the lookahead of DESIGN.md section 3, and every column the verification
cannot reach holds garbage (NaN logits, random mask bits) to prove it is never read into the
result.
"""

from __future__ import annotations

import dataclasses

import jax.numpy as jnp
import numpy as np

from infernix_jax import mask_layout
from infernix_jax import pallas as ip
from tests.pallas import oracle


@dataclasses.dataclass
class World:
  vocab: int
  width: int
  k: int
  seed: int = 0
  legal_frac: float = 0.6

  def __post_init__(self):
    rng = np.random.default_rng(self.seed)
    v, vm, k = self.vocab, self.width, self.k
    self.logits = [rng.normal(size=(v,) * i + (vm,)) * 1.3 for i in range(k + 1)]
    self.legal = []
    for i in range(k + 1):
      a = rng.random((v,) * i + (v,)) < self.legal_frac
      a[..., rng.integers(0, v)] = True                        # never empty: no DeadEnd here
      self.legal.append(a)
    self.q = [rng.dirichlet(np.ones(v) * 0.7, size=(v,) * i) for i in range(k)]
    # 6 candidates per prefix (the first one duplicated: its probability is split in two).
    self.sparse_ids = []
    for i in range(k):
      ids = np.argsort(rng.random((v,) * i + (v,)), axis=-1)[..., :6]
      self.sparse_ids.append(np.concatenate([ids[..., :5], ids[..., :1]], axis=-1))

  def proposal(self, i, prefix, kind):
    """Dense q_i(. | prefix) over Vm for kind in onehot/sparse/dense/masked."""
    v, vm = self.vocab, self.width
    q = np.zeros(vm)
    if kind == "onehot":
      # A greedy drafter that knows the grammar except at about one prefix in five.
      score = self.logits[i][tuple(prefix)][:v] + self.q[i][tuple(prefix)]
      if hash(tuple(prefix)) % 5:
        score = np.where(self.legal[i][tuple(prefix)], score, -np.inf)
      q[int(np.argmax(score))] = 1
    elif kind == "sparse":
      ids = self.sparse_ids[i][tuple(prefix)][:6]               # 6 real candidates, 10 pads
      np.add.at(q, ids, self.q[i][tuple(prefix)][ids])
    else:
      q[:v] = self.q[i][tuple(prefix)]
      if kind == "masked":
        q[:v] *= self.legal[i][tuple(prefix)]
    return q / q.sum()

  def target(self, i, prefix, params):
    legal = np.zeros(self.width, bool)
    legal[:self.vocab] = self.legal[i][tuple(prefix)]
    hist = list(params.get("history", [])) + list(prefix)
    kw = {k: params[k] for k in ("temperature", "top_k", "top_p", "min_p", "presence",
                                 "frequency") if k in params}
    return oracle.target(self.logits[i][tuple(prefix)], legal, history=hist, **kw)[0]

  def batch(self, rows, kind, params, rng, n_drafts=None):
    """Inputs of spec_accept for ``rows`` independent rounds (drafts sampled from q)."""
    v, vm, k = self.vocab, self.width, self.k
    p = k + 1
    n = np.full(rows, k) if n_drafts is None else np.asarray(n_drafts)
    drafts = rng.integers(0, v, size=(rows, k))                # garbage beyond n
    qd = np.zeros((rows, k, vm))
    sparse_ids = np.full((rows, k, ip.SPARSE_Q_WIDTH), -1)
    sparse_p = np.zeros((rows, k, ip.SPARSE_Q_WIDTH))
    logits = np.full((rows, p, vm), np.nan)                    # garbage unless reachable
    legal = rng.random((rows, p, v)) < 0.5
    states = np.zeros((rows, p), np.int8)
    # Vectorized over rows by grouping on the prefix code (tables are small).
    code = np.zeros(rows, np.int64)
    alive = np.ones(rows, bool)
    for i in range(p):
      for c in np.unique(code[alive]):
        sel = np.flatnonzero(alive & (code == c))
        key = tuple((int(c) // v ** (i - 1 - j)) % v for j in range(i))
        logits[sel, i] = self.logits[i][key]
        legal[sel, i] = self.legal[i][key]
        if i < k:
          q = self.proposal(i, key, kind)
          active = sel[n[sel] > i]
          qd[sel, i] = q
          drafts[active, i] = rng.choice(vm, size=len(active), p=q)
          if kind == "sparse":
            ids6 = self.sparse_ids[i][key][:6]
            sparse_ids[sel, i, :6] = ids6
            sparse_p[sel, i, :6] = q[ids6] / np.bincount(ids6, minlength=vm)[ids6]
      if i == k:
        break
      d = drafts[:, i]
      legal_d = (d < v) & legal[np.arange(rows), i, np.clip(d, 0, v - 1)]
      illegal = alive & (n > i) & ~legal_d
      states[illegal[:, None] & (np.arange(p)[None, :] > i)] = mask_layout.UNREACHABLE
      alive = alive & (n > i) & legal_d
      code = code * v + np.clip(d, 0, v - 1)
    if kind == "onehot":
      q = ip.OneHotQ()
    elif kind == "sparse":
      q = ip.SparseQ(jnp.asarray(sparse_ids, jnp.int32), jnp.asarray(sparse_p, jnp.float32))
    else:
      q = ip.DenseQ(jnp.asarray(qd, jnp.float32))
    hist = params.get("history", [])
    sp = ip.SamplingParams.create(
        rows, temperature=params.get("temperature", 1.0), top_k=params.get("top_k", 0),
        top_p=params.get("top_p", 1.0), min_p=params.get("min_p", 0.0),
        presence_penalty=params.get("presence", 0.0),
        frequency_penalty=params.get("frequency", 0.0),
        history_ids=jnp.asarray(np.tile(np.asarray(hist, np.int32).reshape(1, -1), (rows, 1))))
    return dict(logits=jnp.asarray(logits, jnp.float32),
                mask=jnp.asarray(mask_layout.pack(legal)),
                mask_enabled=jnp.ones((rows,), bool), states=jnp.asarray(states),
                drafts=jnp.asarray(drafts, jnp.int32), n_drafts=jnp.asarray(n, jnp.int32),
                q=q, params=sp, seed=jnp.asarray((np.arange(rows, dtype=np.uint64) * 2654435761 + self.seed)
                                % 2**32, jnp.uint32),
                position=jnp.asarray(rng.integers(0, 10_000, rows), jnp.int32))
