"""The study intervals: the bootstrap of a mean agrees with the closed-form normal interval on
synthetic data, is reproducible from its seed, resamples whole units, and the paired ratio
cancels a per-prompt effect that an unpaired interval cannot."""

from __future__ import annotations

import numpy as np
import pytest

from experiments.runner import stats


def _mean(rows):
  return float(np.mean(rows))


def test_bootstrap_of_a_mean_matches_the_closed_form_interval():
  x = np.random.default_rng(7).normal(3.0, 2.0, size=400)
  point, low, high = stats.bootstrap(list(x), _mean, seed=1)
  half = 1.959964 * x.std(ddof=1) / np.sqrt(len(x))  # mean +- z * s / sqrt(n)
  assert point == pytest.approx(x.mean())
  assert low == pytest.approx(x.mean() - half, abs=0.12 * half)
  assert high == pytest.approx(x.mean() + half, abs=0.12 * half)
  assert stats.bootstrap(list(x), _mean, seed=1) == (point, low, high)  # seeded
  assert stats.bootstrap(list(x), _mean, seed=2) != (point, low, high)


def test_units_are_resampled_whole():
  """Ten prompts of 20 identical requests each: the interval is that of 10 units, not of 200
  (wider than the per-request one by about sqrt(20))."""
  rng = np.random.default_rng(3)
  prompts = rng.normal(0.0, 1.0, size=10)
  records = [{"item": i, "v": float(v)} for i, v in enumerate(prompts) for _ in range(20)]
  value = lambda rows: float(np.mean([r["v"] for r in rows]))
  _, lo_u, hi_u = stats.bootstrap(stats.by_unit(records, "item"), value)
  _, lo_r, hi_r = stats.bootstrap(records, value)
  assert (hi_u - lo_u) > 3 * (hi_r - lo_r)


def test_paired_ratio_cancels_the_prompt_effect():
  """'On' is 'off' times 1.1 on every prompt, while prompts differ 10-fold: the paired
  interval is tight around 1.1."""
  scale = np.random.default_rng(5).uniform(1.0, 10.0, size=30)
  pairs = [([{"v": 1.1 * s}], [{"v": s}]) for s in scale]
  value = lambda rows: float(np.mean([r["v"] for r in rows]))
  point, low, high = stats.paired_ratio(pairs, value)
  assert point == pytest.approx(1.1) and low == pytest.approx(1.1) and high == pytest.approx(1.1)
  assert stats.fmt((1.714, 1.64, 1.79)) == "1.71 [1.64, 1.79]"
  assert stats.fmt(stats.bootstrap([2.0], _mean)) == "2.00"  # one unit: no interval
  with pytest.raises(ValueError, match="no units"):
    stats.bootstrap([], _mean)
  with pytest.raises(ValueError, match="level=1.5"):
    stats.bootstrap([1.0, 2.0], _mean, level=1.5)
