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


def test_paired_difference_matches_the_closed_form_interval_of_paired_means():
  """Per-prompt differences d_i = on_i - off_i: the paired bootstrap of mean(on) - mean(off)
  is the bootstrap of mean(d), whose interval is mean(d) +- z * s_d / sqrt(n); the prompt
  effect (shared by both sides, 10x the effect's spread) cancels."""
  rng = np.random.default_rng(11)
  prompt = rng.normal(0.0, 10.0, size=300)
  effect = rng.normal(0.5, 1.0, size=300)
  pairs = [([{"v": p + e}], [{"v": p}]) for p, e in zip(prompt, effect)]
  value = lambda rows: float(np.mean([r["v"] for r in rows]))
  point, low, high = stats.paired_difference(pairs, value, seed=4)
  half = 1.959964 * effect.std(ddof=1) / np.sqrt(len(effect))
  assert point == pytest.approx(effect.mean())
  assert low == pytest.approx(effect.mean() - half, abs=0.12 * half)
  assert high == pytest.approx(effect.mean() + half, abs=0.12 * half)
  assert stats.paired_difference(pairs, value, seed=4) == (point, low, high)
  with pytest.raises(ValueError, match="no pairs"):
    stats.paired_difference([], value)


def test_paired_matches_units_by_key():
  on = [{"item": "a", "v": 1}, {"item": "b", "v": 2}, {"item": "a", "v": 3}, {"item": "c"}]
  off = [{"item": "b", "v": 5}, {"item": "a", "v": 6}]
  pairs = stats.paired(on, off, "item")
  assert [(len(a), len(b)) for a, b in pairs] == [(2, 1), (1, 1)]
  assert all({r["item"] for r in a} == {r["item"] for r in b} for a, b in pairs)


def test_bootstrap_counts_is_the_bootstrap_of_the_units_it_counts():
  """A proportion of n 0/1 units: resampling the counts gives the interval of resampling the
  units (within Monte Carlo error), and both the closed-form p +- z sqrt(p(1-p)/n)."""
  n, hits = 400, 120
  units = [1.0] * hits + [0.0] * (n - hits)
  p = hits / n
  half = 1.959964 * np.sqrt(p * (1 - p) / n)
  point, low, high = stats.bootstrap_counts([hits, n - hits], lambda k: k[0] / k.sum())
  _, low_u, high_u = stats.bootstrap(units, _mean)
  assert point == pytest.approx(p)
  assert low == pytest.approx(p - half, abs=0.1 * half)
  assert high == pytest.approx(p + half, abs=0.1 * half)
  assert low == pytest.approx(low_u, abs=0.1 * half) and high == pytest.approx(high_u,
                                                                              abs=0.1 * half)
  assert stats.bootstrap_counts([hits, n - hits], lambda k: k[0] / k.sum()) == (point, low, high)
  assert np.isnan(stats.bootstrap_counts([1, 0], lambda k: k[0])[1])  # one unit
  with pytest.raises(ValueError, match="no units"):
    stats.bootstrap_counts([0, 0], lambda k: k[0])


def test_bootstrap_each_gives_every_component_the_scalar_interval():
  """A vector statistic's components get the intervals of bootstrapping each alone (same
  seed, same draws); a component that is NaN in some draws keeps the others."""
  rng = np.random.default_rng(2)
  records = [{"a": float(x), "b": float(y)} for x, y in rng.normal(size=(50, 2))]
  both = stats.bootstrap_each(records, lambda rs: [np.mean([r["a"] for r in rs]),
                                                   np.mean([r["b"] for r in rs])], seed=3)
  alone = stats.bootstrap(records, lambda rs: float(np.mean([r["b"] for r in rs])), seed=3)
  assert both[1] == pytest.approx(alone)
  nan_some = stats.bootstrap_each(
      [1.0, 2.0, 3.0], lambda rs: [np.mean(rs), np.nan if 3.0 not in rs else 1.0])
  assert nan_some[1] == (1.0, 1.0, 1.0) and nan_some[0][1] < 2.0 < nan_some[0][2]


def test_zero_count_bound_and_fmt():
  bound = stats.zero_count_bound(1000)
  assert (1 - bound) ** 1000 == pytest.approx(0.05)  # P(0 events | p = bound) = 5%
  assert bound == pytest.approx(3 / 1000, rel=0.01)
  with pytest.raises(ValueError, match="n=0"):
    stats.zero_count_bound(0)
  assert stats.fmt((0.195, 0.14, 0.25), 1, scale=100) == "19.5 [14.0, 25.0]"
  assert stats.fmt((float("nan"),) * 3) == "-"


def test_bootstrap_ratio_is_the_bootstrap_of_a_ratio_of_sums():
  """Per-unit sums in, the same interval out as the generic bootstrap of sum(a) / sum(b) over
  the units' records with the same seed (the same draws); a denominator of 0 in some units
  and in a whole resample is handled, and bad input is refused."""
  rng = np.random.default_rng(5)
  units = [[{"a": float(a), "b": float(b)} for a, b in zip(rng.integers(0, 5, k),
                                                           rng.integers(0, 3, k))]
           for k in rng.integers(1, 4, size=60)]
  ratio = lambda rows: sum(r["a"] for r in rows) / sum(r["b"] for r in rows)  # noqa: E731
  num = [sum(r["a"] for r in u) for u in units]
  den = [sum(r["b"] for r in u) for u in units]
  assert 0 in den
  got = stats.bootstrap_ratio(num, den, seed=4, resamples=500)
  want = stats.bootstrap(units, ratio, seed=4, resamples=500)
  np.testing.assert_allclose(got, want, rtol=1e-12)
  point, low, high = stats.bootstrap_ratio([1.0, 0.0], [0.0, 0.0], resamples=50)
  assert np.isnan(point) and np.isnan(low) and np.isnan(high)
  assert stats.bootstrap_ratio([2.0], [4.0])[0] == 0.5
  with pytest.raises(ValueError, match="no units"):
    stats.bootstrap_ratio([], [])
  with pytest.raises(ValueError, match="one value per unit"):
    stats.bootstrap_ratio([1.0, 2.0], [1.0])


def _accepted_sums(rng, n, scale):
  """Per prompt: rounds and accepted drafts of two cells on the same prompt, where the prompt
  sets a shared rate (10x spread) and cell a accepts `scale` times as many drafts."""
  rate = rng.uniform(0.05, 0.9, size=n)
  rounds_b = rng.integers(8, 40, size=n).astype(float)
  rounds_a = rng.integers(8, 40, size=n).astype(float)
  acc_b = rng.binomial(4 * rounds_b.astype(int), rate / 2).astype(float)
  acc_a = rng.binomial(4 * rounds_a.astype(int), np.minimum(scale * rate / 2, 1)).astype(float)
  return acc_a + rounds_a, rounds_a, acc_b + rounds_b, rounds_b


def test_paired_of_sums_is_the_paired_bootstrap_of_two_ratio_figures():
  """Accepted length (accepted + rounds) / rounds of two cells over the same prompts: the
  ratio and difference with their paired intervals equal a direct numpy bootstrap that draws
  whole prompts (both cells' sums at once) from `default_rng(seed).integers(0, n, (R, n))`,
  and the generic `paired_ratio` over the prompts' records (the same draws)."""
  rng = np.random.default_rng(21)
  a_num, a_den, b_num, b_den = _accepted_sums(rng, 50, 1.3)
  ratio = stats.paired_ratio_of_sums(a_num, a_den, b_num, b_den, seed=3, resamples=800)
  diff = stats.paired_difference_of_sums(a_num, a_den, b_num, b_den, seed=3, resamples=800)
  rows = np.random.default_rng(3).integers(0, 50, size=(800, 50))
  fa = a_num[rows].sum(1) / a_den[rows].sum(1)
  fb = b_num[rows].sum(1) / b_den[rows].sum(1)
  point_a, point_b = a_num.sum() / a_den.sum(), b_num.sum() / b_den.sum()
  np.testing.assert_allclose(ratio, (point_a / point_b, *np.percentile(fa / fb, [2.5, 97.5])),
                             rtol=1e-9)
  np.testing.assert_allclose(diff, (point_a - point_b, *np.percentile(fa - fb, [2.5, 97.5])),
                             rtol=1e-9)
  pairs = [([{"n": a, "d": b}], [{"n": c, "d": d}])
           for a, b, c, d in zip(a_num, a_den, b_num, b_den)]
  figure = lambda rs: sum(r["n"] for r in rs) / sum(r["d"] for r in rs)  # noqa: E731
  np.testing.assert_allclose(ratio, stats.paired_ratio(pairs, figure, seed=3, resamples=800),
                             rtol=1e-9)
  # Paired: the prompts' shared rate cancels, so the ratio's interval is narrower than the
  # one the two cells' unpaired intervals allow.
  _, lo_a, hi_a = stats.bootstrap_ratio(a_num, a_den, seed=3)
  _, lo_b, hi_b = stats.bootstrap_ratio(b_num, b_den, seed=4)
  assert ratio[2] - ratio[1] < 0.6 * (hi_a / lo_b - lo_a / hi_b)
  assert np.isnan(stats.paired_ratio_of_sums([3.0], [2.0], [2.0], [2.0])[1])  # one pair
  with pytest.raises(ValueError, match="no pairs"):
    stats.paired_ratio_of_sums([], [], [], [])
  with pytest.raises(ValueError, match="one value per pair"):
    stats.paired_difference_of_sums([1.0, 2.0], [1.0, 1.0], [1.0], [1.0])
