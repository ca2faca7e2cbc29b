"""Test inputs for the mask-consuming kernels: rows that cover the parameter product."""

from __future__ import annotations

import dataclasses

import jax.numpy as jnp
import numpy as np

from infernix_jax import mask_layout
from infernix_jax import pallas as ip

# Probabilities are computed in f32 from exactly converted inputs (bf16 -> f32 is exact), so
# both dtypes share the f32 arithmetic tolerance; kept as a table so a dtype can diverge.
TOLERANCE = {np.dtype(np.float32): dict(rtol=2e-5, atol=2e-6),
             np.dtype(jnp.bfloat16): dict(rtol=2e-5, atol=2e-6)}


@dataclasses.dataclass
class Case:
  """R rows of masked sampling inputs plus the per-row parameters for the oracle."""
  logits: np.ndarray        # [R, Vm] in the case dtype
  legal: np.ndarray         # bool[R, V] grammar sets (ignored where not enabled)
  enabled: np.ndarray       # bool[R]
  rows: list                # per-row dict: temperature, top_k, top_p, min_p, presence,
                            # frequency, history (list of ids, repeats count), repetition,
                            # prompt (list of ids)
  vocab_size: int

  @property
  def mask(self):
    return jnp.asarray(mask_layout.pack(self.legal))

  def params(self, hmax: int = 6) -> ip.SamplingParams:
    r = len(self.rows)
    ids = np.full((r, hmax), -1, np.int32)
    counts = np.zeros((r, hmax), np.int32)
    for i, row in enumerate(self.rows):
      uniq, cnt = np.unique(np.asarray(row.get("history", []), np.int32), return_counts=True)
      # Split one id over two entries when possible: duplicates must be summed.
      entries = [(int(u), int(c)) for u, c in zip(uniq, cnt)]
      if entries and entries[0][1] >= 2:
        u, c = entries[0]
        entries[0:1] = [(u, 1), (u, c - 1)]
      for j, (u, c) in enumerate(entries[:hmax]):
        ids[i, j], counts[i, j] = u, c
    g = lambda k, d: jnp.asarray([row.get(k, d) for row in self.rows])
    return ip.SamplingParams.create(
        r, temperature=g("temperature", 1.0), top_k=g("top_k", 0), top_p=g("top_p", 1.0),
        min_p=g("min_p", 0.0), presence_penalty=g("presence", 0.0),
        frequency_penalty=g("frequency", 0.0), history_ids=jnp.asarray(ids),
        history_counts=jnp.asarray(counts), repetition_penalty=g("repetition", 1.0),
        prompt_ids=[row.get("prompt", []) for row in self.rows])

  def oracle_legal(self, i):
    vm = self.logits.shape[1]
    legal = np.zeros(vm, bool)
    legal[:self.vocab_size] = self.legal[i] if self.enabled[i] else True
    return legal


def product_case(seed: int, vocab_size: int, width: int, dtype) -> Case:
  """One row per interesting combination (see the comments)."""
  rng = np.random.default_rng(seed)
  v, vm = vocab_size, width
  rows, logits, legal, enabled = [], [], [], []

  def add(row, z=None, allowed=None, on=True):
    z = rng.normal(size=vm) * 3.0 if z is None else z
    allowed = rng.random(v) < 0.4 if allowed is None else allowed
    rows.append(row), logits.append(z), legal.append(allowed), enabled.append(on)

  add(dict(temperature=0.0))                                            # greedy
  add(dict(temperature=1.0))                                            # plain sampling
  add(dict(temperature=0.7, top_k=5))
  add(dict(temperature=1.3, top_p=0.8))
  add(dict(temperature=1.0, min_p=0.1))
  add(dict(temperature=0.9, top_k=10, top_p=0.9, min_p=0.05, presence=0.7, frequency=0.4,
           history=list(rng.integers(0, v, 5)) + [3, 3, 3]))
  add(dict(temperature=1.0, top_k=20), on=False)                        # disabled row
  add(dict(temperature=1.0), allowed=np.zeros(v, bool))                 # empty legal set
  z = rng.normal(size=vm); allowed = rng.random(v) < 0.5; allowed[7] = True; z[7] = np.nan
  add(dict(temperature=1.0), z=z, allowed=allowed)                      # NaN legal
  z = rng.normal(size=vm); allowed = rng.random(v) < 0.5; allowed[[4, 9]] = False
  z[4], z[9] = np.nan, np.inf
  add(dict(temperature=1.0, top_k=3), z=z, allowed=allowed)             # NaN/inf illegal: fine
  z = rng.normal(size=vm); allowed = rng.random(v) < 0.5; allowed[11] = True; z[11] = np.inf
  add(dict(temperature=0.0), z=z, allowed=allowed)                      # +inf legal
  allowed = rng.random(v) < 0.3; allowed[0] = True
  z = np.where(np.arange(vm) < v, rng.normal(size=vm), 0.0); z[:v][allowed] = -np.inf
  add(dict(temperature=1.0), z=z, allowed=allowed)                      # all legal -inf
  z = rng.normal(size=vm) * 3.0
  ranked = np.argsort(-z[:v], kind="stable")
  allowed = np.zeros(v, bool); allowed[ranked[30:37]] = True            # beyond the top 20
  add(dict(temperature=1.0, top_k=3), z=z, allowed=allowed)
  add(dict(temperature=0.0), z=z, allowed=allowed)
  z = rng.normal(size=vm); allowed = rng.random(v) < 0.5
  top = np.flatnonzero(allowed)[[2, 5, 8]]; z[top] = z.max() + 1.0      # tied maximum
  add(dict(temperature=0.0), z=z, allowed=allowed)
  allowed = np.zeros(v, bool); allowed[rng.choice(v, 4, replace=False)] = True
  add(dict(temperature=1.0, top_k=10), allowed=allowed)                 # k > |legal|
  z = rng.normal(size=vm); z[v:] = 50.0
  add(dict(temperature=0.0), z=z, on=False)                             # padding ids >= V
  add(dict(temperature=0.0, presence=1.0, frequency=2.0,
           history=[int(np.argmax(z[:v]))] * 2), z=z, on=False)         # penalized greedy
  z = np.round(rng.normal(size=vm) * 2) / 2; allowed = rng.random(v) < 0.6
  add(dict(temperature=1.0, top_k=6), z=z, allowed=allowed)            # ties at the k-th
  add(dict(temperature=1.0, top_p=0.0), z=z, allowed=allowed)          # top-p 0: max group
  add(dict(temperature=2.0, top_k=1))
  # Repetition penalty over prompt + history (positive logits divided, others multiplied),
  # then presence / frequency; below 1 it favours the seen ids.
  seen = list(rng.integers(0, v, 6))
  add(dict(temperature=0.8, repetition=1.6, prompt=seen[:4], history=seen[3:] + [1, 1],
           presence=0.3, frequency=0.2))
  z = rng.normal(size=vm) * 3.0; allowed = rng.random(v) < 0.5
  best = int(np.flatnonzero(allowed)[np.argmax(z[:v][allowed])])
  add(dict(temperature=0.0, repetition=3.0, prompt=[best]), z=z, allowed=allowed)
  add(dict(temperature=1.2, top_k=4, repetition=0.5, prompt=seen, history=[2]))
  logits = np.asarray(logits, np.float32).astype(dtype)
  return Case(logits, np.asarray(legal), np.asarray(enabled), rows, v)


PRODUCT = [  # (vocab_size, logits width, dtype)
    (100, 128, np.float32),
    (257, 257, np.float32),
    (257, 288, jnp.bfloat16),
    (1000, 1000, jnp.bfloat16),
]
