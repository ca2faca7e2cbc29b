"""Intervals for study figures: a seeded percentile bootstrap over independent units (requests,
or prompts where requests share a prompt), and its paired form for axis effects.

A unit is whatever the resampling draws whole: a list of request records, one per unit. The
statistic is computed on the concatenation of the drawn units, so ratio figures (accepted
length = tokens / rounds over all requests of a cell) are resampled as ratios, not as means
of per-request ratios.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

LEVEL = 0.95
RESAMPLES = 2000


def _interval(groups: list, value: Callable[[list], float], seed: int, resamples: int,
              level: float) -> tuple[float, float, float]:
  """(value(groups), low, high): the percentile interval of `value` over `resamples` draws of
  len(groups) groups with replacement (NaN bounds for one group)."""
  if not 0 < level < 1:
    raise ValueError(f"level={level}: must lie in (0, 1)")
  point = float(value(groups))
  if len(groups) == 1:
    return point, float("nan"), float("nan")
  draws = np.random.default_rng(seed).integers(0, len(groups), size=(resamples, len(groups)))
  values = np.array([value([groups[i] for i in row]) for row in draws], float)
  tail = (1 - level) / 2
  low, high = np.quantile(values, [tail, 1 - tail])
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


def by_unit(records: Sequence[dict], key: str) -> list[list[dict]]:
  """Records grouped into units by `key` (e.g. the prompt id): requests sharing a prompt are
  not independent, so they are resampled together."""
  out: dict = {}
  for r in records:
    out.setdefault(r.get(key), []).append(r)
  return list(out.values())


def fmt(interval: tuple[float, float, float], digits: int = 2) -> str:
  """'1.71 [1.64, 1.79]'; the point alone where the interval is undefined (one unit)."""
  point, low, high = interval
  if np.isnan(low):
    return f"{point:.{digits}f}"
  return f"{point:.{digits}f} [{low:.{digits}f}, {high:.{digits}f}]"
