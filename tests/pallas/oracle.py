"""FP64 numpy oracle of the target distribution and statistics helpers for kernel tests.

Written from DESIGN.md section 5 with sorting and per-row Python loops, independently of the
bisection code under test.
"""

from __future__ import annotations

import numpy as np
from scipy import stats

FLAG_DEAD_END, FLAG_NONFINITE, FLAG_EMPTY = 1, 2, 4


def target(logits, legal, *, temperature=1.0, top_k=0, top_p=1.0, min_p=0.0,
           presence=0.0, frequency=0.0, history=(), repetition=1.0, prompt=()):
  """Target distribution of one row.

  Args:
    logits: [Vm] any float dtype (converted to f64 exactly); legal: bool[Vm].
    history: iterable of token ids (repeats count).
    repetition, prompt: the repetition penalty over the ids of prompt and history (vLLM:
      a positive logit divided by it, another multiplied), applied before presence and
      frequency.

  Returns:
    (p f64[Vm], greedy int (-1 if flagged), flag int).
  """
  z = np.asarray(logits, np.float64).copy()
  for t in set(int(t) for t in list(prompt) + list(history) if 0 <= t < z.size):
    z[t] = z[t] / repetition if z[t] > 0 else z[t] * repetition
  counts = {}
  for t in history:
    if t >= 0:
      counts[t] = counts.get(t, 0) + 1
  for t, c in counts.items():
    if t < z.size:
      z[t] -= presence + frequency * c
  legal = np.asarray(legal, bool)
  p = np.zeros(z.size)
  if not legal.any():
    return p, -1, FLAG_EMPTY
  if np.isnan(z[legal]).any() or (z[legal] == np.inf).any() or not np.isfinite(z[legal]).any():
    return p, -1, FLAG_NONFINITE
  fin = np.flatnonzero(legal & np.isfinite(z))
  order = sorted(fin, key=lambda v: (-z[v], v))                 # descending z, ties: small id
  greedy = int(order[0])
  if temperature <= 0:
    p[greedy] = 1.0
    return p, greedy, 0
  cand = order[:top_k] if 0 < top_k < len(order) else order
  zt = z / temperature
  m = zt[greedy]
  w = {v: np.exp(zt[v] - m) for v in cand}
  w = {v: x for v, x in w.items() if x >= min_p}
  if top_p < 1.0:
    total = sum(w.values())
    kept = {}
    for v, x in w.items():
      greater = sum(y for u, y in w.items() if z[u] > z[v])
      if greater < top_p * total or z[v] == z[greedy]:
        kept[v] = x
    w = kept
  total = sum(w.values())
  for v, x in w.items():
    p[v] = x / total
  return p, greedy, 0


def chi_square_pvalue(observed, expected_probs, min_expected=5.0):
  """Goodness-of-fit p-value; bins with small expected counts are pooled.

  Observed counts outside the expected support (expected 0) make the p-value 0.
  """
  observed = np.asarray(observed, np.float64)
  n = observed.sum()
  expected = np.asarray(expected_probs, np.float64) * n if np.isclose(
      np.sum(expected_probs), 1.0) else np.asarray(expected_probs, np.float64)
  if np.any((expected == 0) & (observed > 0)):
    return 0.0
  big = expected >= min_expected
  obs = list(observed[big]) + ([observed[~big].sum()] if (~big).any() else [])
  exp = list(expected[big]) + ([expected[~big].sum()] if (~big).any() else [])
  obs, exp = np.asarray(obs), np.asarray(exp)
  keep = exp > 0
  obs, exp = obs[keep], exp[keep]
  if len(obs) < 2:
    return 1.0
  return float(stats.chisquare(obs, exp * obs.sum() / exp.sum()).pvalue)
