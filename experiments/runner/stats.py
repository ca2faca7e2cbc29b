"""Intervals for study figures: a seeded percentile bootstrap over independent units (requests,
or prompts where requests share a prompt), and its paired form for axis effects.

A unit is whatever the resampling draws whole: a list of request records, one per unit. The
statistic is computed on the concatenation of the drawn units, so ratio figures (accepted
length = (accepted drafts + rounds) / rounds over all requests of a cell) are resampled as
ratios, not as means of per-request ratios. Units that each fall in one category (sampled
outputs, right or wrong answers) can be resampled from their counts alone
(`bootstrap_counts`).
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Sequence

import numpy as np

LEVEL = 0.95
RESAMPLES = 2000


def _quantiles(values: np.ndarray, level: float) -> tuple:
  """The percentile bounds of bootstrap values [R] or [R, P] at `level`, per column (NaN
  draws, e.g. a position no resampled round drafted, are left out)."""
  tail = (1 - level) / 2
  with warnings.catch_warnings():
    warnings.simplefilter("ignore", RuntimeWarning)  # an all-NaN column gives NaN bounds
    low, high = np.nanquantile(values, [tail, 1 - tail], axis=0)
  return low, high


def _check(level: float) -> None:
  if not 0 < level < 1:
    raise ValueError(f"level={level}: must lie in (0, 1)")


def _resample_rows(n: int, seed: int, resamples: int) -> np.ndarray:
  """[R, n] indices of n units drawn with replacement, R times (every bootstrap's draws)."""
  return np.random.default_rng(seed).integers(0, n, size=(resamples, n))


def _draws(groups: list, value: Callable[[list], object], seed: int,
           resamples: int) -> np.ndarray:
  """value() of `resamples` draws of len(groups) groups with replacement: [R] or [R, P]."""
  rows = _resample_rows(len(groups), seed, resamples)
  return np.array([value([groups[i] for i in row]) for row in rows], float)


def _interval(groups: list, value: Callable[[list], float], seed: int, resamples: int,
              level: float) -> tuple[float, float, float]:
  """(value(groups), low, high): the percentile interval of `value` over `resamples` draws of
  len(groups) groups with replacement (NaN bounds for one group)."""
  _check(level)
  point = float(value(groups))
  if len(groups) == 1:
    return point, float("nan"), float("nan")
  low, high = _quantiles(_draws(groups, value, seed, resamples), level)
  return point, float(low), float(high)


def bootstrap(units: Sequence, statistic: Callable[[list], float], *, seed: int = 0,
              resamples: int = RESAMPLES, level: float = LEVEL) -> tuple[float, float, float]:
  """(point, low, high): `statistic` over all units and the percentile interval of its
  bootstrap distribution at `level` (units drawn with replacement, `resamples` times, from
  `np.random.default_rng(seed)`: the same call gives the same interval).

  Args:
    units: the independent units; each is passed on as a list of its records (a unit that
      is not a list is one record).
    statistic: records -> float.

  Raises:
    ValueError: no units, or a level outside (0, 1).
  """
  groups = [u if isinstance(u, list) else [u] for u in units]
  if not groups:
    raise ValueError("bootstrap: no units to resample")
  return _interval(groups, lambda chosen: statistic([r for g in chosen for r in g]), seed,
                   resamples, level)


def bootstrap_ratio(numerators: Sequence[float], denominators: Sequence[float], *,
                    seed: int = 0, resamples: int = RESAMPLES,
                    level: float = LEVEL) -> tuple[float, float, float]:
  """`bootstrap` of a ratio of sums, sum(numerator) / sum(denominator), given each unit's two
  sums [n]: the same draws as `bootstrap` with the same seed (so the same interval), each
  resample weighted by how often it drew every unit, all resamples in one [R, n] x [n]
  product instead of a Python statistic per resample. A resample whose denominator sums to 0
  is NaN (left out of the quantiles).

  Raises:
    ValueError: no units, numerators and denominators of different lengths, or a level
      outside (0, 1).
  """
  _check(level)
  num = np.asarray(numerators, float)
  den = np.asarray(denominators, float)
  if num.shape != den.shape or num.ndim != 1:
    raise ValueError(f"bootstrap_ratio: numerators {num.shape} and denominators {den.shape} "
                     "must be one value per unit each")
  n = len(num)
  if not n:
    raise ValueError("bootstrap_ratio: no units to resample")
  with np.errstate(invalid="ignore", divide="ignore"):
    point = float(num.sum() / den.sum()) if den.sum() else float("nan")
    if n == 1:
      return point, float("nan"), float("nan")
    rows = _resample_rows(n, seed, resamples)
    flat = (rows + n * np.arange(resamples)[:, None]).ravel()
    weights = np.bincount(flat, minlength=resamples * n).reshape(resamples, n).astype(float)
    totals = weights @ den
    values = np.where(totals != 0, (weights @ num) / totals, np.nan)
  low, high = _quantiles(values, level)
  return point, float(low), float(high)


def paired_ratio(pairs: Sequence[tuple], statistic: Callable[[list], float], *, seed: int = 0,
                 resamples: int = RESAMPLES, level: float = LEVEL) -> tuple[float, float, float]:
  """The ratio statistic(on) / statistic(off) with a paired bootstrap interval: `pairs` holds
  (on_records, off_records) of the same unit (same prompt and seed on both sides of the
  axis), and each resample draws whole pairs, so the prompt's effect cancels."""
  if not pairs:
    raise ValueError("paired_ratio: no pairs to resample")

  def ratio(chosen):
    return (statistic([r for a, _ in chosen for r in a])
            / statistic([r for _, b in chosen for r in b]))

  return _interval([(list(a), list(b)) for a, b in pairs], ratio, seed, resamples, level)


def _paired_of_sums(sums: Sequence[Sequence[float]], combine: Callable, name: str, *,
                    seed: int, resamples: int, level: float) -> tuple[float, float, float]:
  """combine(A, B) of the ratio-of-sums figures A = sum(a_num) / sum(a_den) and
  B = sum(b_num) / sum(b_den) over n pairs, with the paired bootstrap interval: every resample
  draws whole pairs (the draws of `paired_ratio` with the same seed) and weights each pair's
  four sums [n] by how often it was drawn, all resamples in one [R, n] x [n] product."""
  _check(level)
  a_num, a_den, b_num, b_den = (np.asarray(x, float) for x in sums)
  if not (a_num.ndim == 1 and a_num.shape == a_den.shape == b_num.shape == b_den.shape):
    raise ValueError(f"{name}: the four sums must be one value per pair each; got shapes "
                     f"{[x.shape for x in (a_num, a_den, b_num, b_den)]}")
  n = len(a_num)
  if not n:
    raise ValueError(f"{name}: no pairs to resample")

  def value(w):  # w [..., n] -> combine over the weighted pairs
    with np.errstate(invalid="ignore", divide="ignore"):
      return combine((w @ a_num) / (w @ a_den), (w @ b_num) / (w @ b_den))

  point = float(value(np.ones(n)))
  if n == 1:
    return point, float("nan"), float("nan")
  rows = _resample_rows(n, seed, resamples)
  flat = (rows + n * np.arange(resamples)[:, None]).ravel()
  weights = np.bincount(flat, minlength=resamples * n).reshape(resamples, n).astype(float)
  values = value(weights)
  low, high = _quantiles(np.where(np.isfinite(values), values, np.nan), level)
  return point, float(low), float(high)


def paired_ratio_of_sums(a_num, a_den, b_num, b_den, *, seed: int = 0,
                         resamples: int = RESAMPLES,
                         level: float = LEVEL) -> tuple[float, float, float]:
  """(sum(a_num) / sum(a_den)) / (sum(b_num) / sum(b_den)) with its paired bootstrap interval,
  given each pair's sums on side a and side b [n] (e.g. accepted length = (accepted drafts +
  rounds) / rounds over a prompt's requests in two cells): `paired_ratio` of that figure,
  the same draws with the same seed (so the same interval), without a Python statistic per
  resample. A resample whose denominators sum to 0 is left out of the quantiles.

  Raises:
    ValueError: no pairs, sums of different lengths, or a level outside (0, 1).
  """
  return _paired_of_sums((a_num, a_den, b_num, b_den), np.divide, "paired_ratio_of_sums",
                         seed=seed, resamples=resamples, level=level)


def paired_difference_of_sums(a_num, a_den, b_num, b_den, *, seed: int = 0,
                              resamples: int = RESAMPLES,
                              level: float = LEVEL) -> tuple[float, float, float]:
  """As `paired_ratio_of_sums`, for the difference of the two figures (in their own units,
  e.g. tokens per round): `paired_difference` of a ratio-of-sums figure.

  Raises:
    ValueError: no pairs, sums of different lengths, or a level outside (0, 1).
  """
  return _paired_of_sums((a_num, a_den, b_num, b_den), np.subtract,
                         "paired_difference_of_sums", seed=seed, resamples=resamples,
                         level=level)


def bootstrap_each(units: Sequence, statistic: Callable[[list], Sequence[float]], *,
                   seed: int = 0, resamples: int = RESAMPLES,
                   level: float = LEVEL) -> list[tuple[float, float, float]]:
  """`bootstrap` of a vector statistic (records -> [P] floats, e.g. acceptance at each draft
  position): one (point, low, high) per component, every component from the same draws (so
  the call costs one bootstrap, not P). A component that is NaN in a draw is left out of
  that component's quantiles.

  Raises:
    ValueError: no units, or a level outside (0, 1).
  """
  _check(level)
  groups = [u if isinstance(u, list) else [u] for u in units]
  if not groups:
    raise ValueError("bootstrap_each: no units to resample")
  value = lambda chosen: statistic([r for g in chosen for r in g])  # noqa: E731
  point = np.asarray(value(groups), float)
  if len(groups) == 1:
    return [(float(p), float("nan"), float("nan")) for p in point]
  low, high = _quantiles(_draws(groups, value, seed, resamples), level)
  return [(float(p), float(a), float(b)) for p, a, b in zip(point, low, high)]


def paired_difference(pairs: Sequence[tuple], statistic: Callable[[list], float], *,
                      seed: int = 0, resamples: int = RESAMPLES,
                      level: float = LEVEL) -> tuple[float, float, float]:
  """The difference statistic(on) - statistic(off) with a paired bootstrap interval, drawn
  like `paired_ratio` (whole (on_records, off_records) pairs of one unit): the effect of an
  axis on a rate or an accuracy, in its own units (e.g. percentage points)."""
  if not pairs:
    raise ValueError("paired_difference: no pairs to resample")

  def difference(chosen):
    return (statistic([r for a, _ in chosen for r in a])
            - statistic([r for _, b in chosen for r in b]))

  return _interval([(list(a), list(b)) for a, b in pairs], difference, seed, resamples, level)


def paired(on: Sequence[dict], off: Sequence[dict], key: str) -> list[tuple[list, list]]:
  """(on_unit, off_unit) pairs of the units (`by_unit(..., key)`) present on both sides of an
  axis, in the order of `on`: the input of `paired_ratio` / `paired_difference`."""
  other = {u[0].get(key): u for u in by_unit(off, key)}
  return [(u, other[u[0].get(key)]) for u in by_unit(on, key) if u[0].get(key) in other]


def bootstrap_counts(counts: Sequence[int], statistic: Callable[[np.ndarray], float], *,
                     seed: int = 0, resamples: int = RESAMPLES,
                     level: float = LEVEL) -> tuple[float, float, float]:
  """`bootstrap` over n = sum(counts) independent units that each fall in one category (a
  sampled output, a right or wrong answer), given only the count per category [C]: a
  resample's counts are Multinomial(n, counts / n), which is the distribution of the counts
  of n units drawn with replacement, so no list of n records is built (n = 100,000 costs
  one multinomial draw per resample).

  Args:
    counts: units per category [C].
    statistic: counts [C] (floats summing to n) -> float, e.g. a frequency c[0] / n or a
      total-variation distance to a reference law.

  Raises:
    ValueError: no units, or a level outside (0, 1).
  """
  _check(level)
  counts = np.asarray(counts, float)
  n = int(round(counts.sum()))
  if n <= 0:
    raise ValueError("bootstrap_counts: no units to resample")
  point = float(statistic(counts))
  if n == 1:
    return point, float("nan"), float("nan")
  draws = np.random.default_rng(seed).multinomial(n, counts / counts.sum(), size=resamples)
  low, high = _quantiles(np.array([statistic(d.astype(float)) for d in draws], float), level)
  return point, float(low), float(high)


def zero_count_bound(n: int, level: float = LEVEL) -> float:
  """The exact one-sided upper confidence bound at `level` on a probability that was seen 0
  times in n independent trials: the p with (1 - p)^n = 1 - level (about 3 / n at 95%).
  A bootstrap of 0 hits has zero width; this is the interval to quote instead.

  Raises:
    ValueError: n < 1, or a level outside (0, 1).
  """
  _check(level)
  if n < 1:
    raise ValueError(f"n={n}: a bound needs at least one trial")
  return float(1 - (1 - level) ** (1 / n))


def by_unit(records: Sequence[dict], key: str) -> list[list[dict]]:
  """Records grouped into units by `key` (e.g. the prompt id): requests sharing a prompt are
  not independent, so they are resampled together."""
  out: dict = {}
  for r in records:
    out.setdefault(r.get(key), []).append(r)
  return list(out.values())


def fmt(interval: tuple[float, float, float], digits: int = 2, scale: float = 1.0) -> str:
  """'1.71 [1.64, 1.79]'; the point alone where the interval is undefined (one unit).
  `scale` multiplies all three (100 prints a fraction as a percentage)."""
  point, low, high = (scale * v for v in interval)
  if np.isnan(point):
    return "-"
  if np.isnan(low):
    return f"{point:.{digits}f}"
  return f"{point:.{digits}f} [{low:.{digits}f}, {high:.{digits}f}]"
