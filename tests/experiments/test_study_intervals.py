"""Every study's summary carries 95% intervals: on synthetic records (no model, milliseconds)
the intervals appear as 'x [lo, hi]', bracket their point, and a paired effect is computed
from the two sides of the same prompt (or item)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from experiments.runner import plots, stats
from experiments.studies import classification, decode, exactness, faithful
from experiments.studies import faithful_acceptance, faithful_classification, trie
from tests.experiments import _configs, _tables

_bracketed, _row = _tables.bracketed, _tables.row


# --- plots ---------------------------------------------------------------------------------
def test_plots_draw_asymmetric_intervals(tmp_path):
  yerr = plots._yerr([1.0, 2.0], [(0.5, 1.25), (float("nan"), float("nan"))])
  assert yerr == [[0.5, 0.0], [0.25, 0.0]]  # below, above; no bar without an interval
  assert plots._yerr([1.0], None) is None
  with pytest.raises(ValueError, match="1 intervals for 2 values"):
    plots._yerr([1.0, 2.0], [(0.0, 1.0)])
  name = plots.grouped_bars(tmp_path / "b.png", ["g1", "g2"], {"s": [1.0, 2.0]},
                            intervals={"s": [(0.8, 1.5), (1.9, 2.1)]}, title="t", ylabel="y")
  assert (tmp_path / name).stat().st_size > 0
  name = plots.lines(tmp_path / "l.png", [1, 2], {"a": [0.5, 0.2], "b": [0.4, float("nan")]},
                     intervals={"a": [(0.4, 0.6), (0.1, 0.3)]}, title="t", xlabel="x",
                     ylabel="y", dodge=0.05)
  assert (tmp_path / name).stat().st_size > 0


# --- decode --------------------------------------------------------------------------------
def _decode_records():
  """Two cells, constraint on and off, over 6 prompts of 2 requests each: prompts differ in
  rounds and accepted drafts, and the constraint adds one accepted draft to every round."""
  records = []
  for on in (False, True):
    cell = f"constrained={on},drafter.name=ngram"
    ov = {"constrained": on, "drafter.name": "ngram"}
    records.append({"cell": cell, "kind": "cell", "status": "ok", "overrides": ov})
    for p in range(6):
      for s in range(2):
        per_round = [[4, (p + s) % 3 + (1 if on else 0)]] * (3 + p)
        accepted = sum(a for _, a in per_round)
        records.append({
            "cell": cell, "overrides": ov, "kind": "request", "item": f"p{p}",
            "workload": "regex:dates", "rounds": len(per_round), "accepted": accepted,
            "drafted": 4 * len(per_round), "per_round": per_round, "valid": True,
            "finish_reason": "stop", "jump_forward_tokens": 0, "prompt_tokens": 40,
            "tokens": accepted + len(per_round)})
    records.append({"cell": cell, "overrides": ov, "kind": "measurement", "tokens": 100,
                    "wall_s": 20.0, "rounds": 60, "round_ms": 300.0, "tokens_per_s": 5.0,
                    "host_share": 0.01})
  return records


def test_decode_summary_gives_accepted_length_and_positions_intervals(tmp_path):
  c = _configs.load("acceptance")
  records = _decode_records()
  text = decode.summarize(records, c, tmp_path)
  cols = _row(text, "| ngram constrained |")
  point, _, _ = _bracketed(cols[2])
  rows = [r for r in records
          if r.get("kind") == "request" and r["cell"].startswith("constrained=True")]
  assert point == pytest.approx(decode.accepted_length(rows), abs=0.005)
  # per position: every drafted position has an interval around the table's point
  k = decode.config_k(c.drafter)
  for (p, low, high), table in zip(decode._per_position_intervals(rows, k),
                                   decode._per_position(rows, k)):
    assert p == pytest.approx(table) and low <= p <= high
  assert "interval over prompts" in text
  for name in ("accepted_length.png", "acceptance_by_position.png"):
    assert (tmp_path / name).stat().st_size > 0
  # The target figure of a cell grown to a width, and the index's headline, are this interval.
  assert decode.interval(rows, c)[0] == pytest.approx(point, abs=0.005)
  assert decode.headline(records, c).startswith(f"longest accepted length {cols[2]} tokens per "
                                                "round, ngram constrained (of 2 cells")
  # Projected speedups: a host drafter on a weight-bound H200 step keeps its accepted length.
  proj = _row(text.split("### Speedup projected")[1], "| ngram constrained |")
  h200_8b = _bracketed(proj[3])
  assert h200_8b[0] == pytest.approx(point, rel=0.02) and h200_8b[1] <= h200_8b[0] <= h200_8b[2]
  # The reading names the best constrained cell and the constraint's paired effect, with the
  # intervals of the table and of the effect row.
  reading = text.split("### What it shows")[1].split("###")[0]
  assert f"under the constraint at T=0: ngram constrained {cols[2]}" in reading
  effect = _row(text.split("### Effect of one axis")[1], "| constraint on vs off |")
  assert f"Constraint on vs off: accepted length on / off {effect[4]} over 1 pairs" in reading
  assert "What it does not show" in reading


def test_decode_axis_effect_pairs_the_same_prompt():
  """With the constraint on, prompt p gains the same drafts in every request of it: pairing
  by prompt gives the pooled ratio; pairing unrelated prompts would not."""
  records = _decode_records()
  cells = list(dict.fromkeys(r["cell"] for r in records if r.get("kind") == "cell"))
  ov = {r["cell"]: r["overrides"] for r in records if r.get("kind") == "cell"}
  by_cell = {c: [r for r in records if r.get("kind") == "request" and r["cell"] == c]
             for c in cells}
  (row,) = decode._effects(cells, ov, by_cell)
  point, low, high = _bracketed(row[4])
  on, off = by_cell[cells[1]], by_cell[cells[0]]
  assert point == pytest.approx(decode.accepted_length(on) / decode.accepted_length(off),
                                abs=0.005)
  for a, b in stats.paired(on, off, "item"):
    assert {r["item"] for r in a} == {r["item"] for r in b}
  assert high - low < 1.0


# --- classification ------------------------------------------------------------------------
def _cls(item, mode, correct, valid=True, dataset="trec"):
  return {"kind": "request", "item": item, "dataset": dataset, "mode": mode,
          "correct": correct, "valid": valid}


def test_classification_accuracy_intervals_and_paired_gain(tmp_path):
  c = _configs.load("classification")
  # 40 items; PE right on items 0-3, trie right on 0-11; one extra trie item (only on that
  # side) is right and must not enter the paired gain.
  records = [_cls(f"i{i}", "pe", i < 4, valid=i < 8) for i in range(40)]
  records += [_cls(f"i{i}", "trie", i < 12) for i in range(40)] + [_cls("extra", "trie", True)]
  text = classification.summarize(records, c, tmp_path)
  cols = _row(text, "| trec |")
  assert _bracketed(cols[2])[0] == 10.0  # PE accuracy 4 / 40
  assert _bracketed(cols[3])[0] == 20.0  # PE validity 8 / 40
  assert _bracketed(cols[4])[0] == pytest.approx(100 * 13 / 41, abs=0.05)
  gain = _bracketed(cols[6])
  assert gain[0] == 20.0  # (12 - 4) / 40 over the paired items only
  assert gain[1] > 0  # every pair gains or ties: the paired interval stays above 0
  assert (tmp_path / "classification_accuracy.png").stat().st_size > 0


# --- faithful_classification ---------------------------------------------------------------
def _law(correct, seconds):
  return {"text": "x", "error": None, "valid": True, "predicted": "x" if correct else "y",
          "correct": correct, "seconds": seconds, "tokens": 3, "law_seconds": 0.0,
          "law_forwards": 2, "law_tokens": 20, "law_trie_nodes": 5, "law_stop": "greedy"}


def test_faithful_classification_pairs_both_laws_of_an_item(tmp_path):
  c = _configs.load("faithful_classification")
  rng = np.random.default_rng(0)
  base = rng.uniform(1.0, 8.0, size=30)  # items differ 8-fold in cost
  records = [{"kind": "request", "item": f"i{i}", "dataset": "trec", "gold": "x",
              "local": _law(i < 10, float(b)), "exact-finite": _law(i < 15, float(3 * b))}
             for i, b in enumerate(base)]
  text = faithful_classification.summarize(records, c, tmp_path)
  cols = _row(text, "| trec |")
  assert _bracketed(cols[2])[0] == pytest.approx(33.3, abs=0.05)
  assert _bracketed(cols[3])[0] == 50.0
  gain = _bracketed(cols[4])
  assert gain[0] == pytest.approx(16.7, abs=0.05) and gain[1] > 0  # gains only, paired
  # exact-finite costs 3x local on every item: the paired ratio of medians is 3 whatever
  # the draw, though items' costs differ 8-fold
  assert cols[9] == "3.0 [3.0, 3.0]"
  _bracketed(cols[7]), _bracketed(cols[8])


# --- faithful_acceptance -------------------------------------------------------------------
def _fa_request(law, prompt, seed, rounds, accepted):
  return {"cell": "constraint=dyck,drafter=ngram,temperature=1.0", "kind": "request",
          "law": law, "prompt": prompt, "seed": seed, "text": "()", "finish": "stop",
          "rounds": rounds, "drafted": 4 * rounds, "accepted": accepted,
          "tokens": rounds + accepted,
          "overrides": {"constraint": "dyck", "drafter": "ngram", "temperature": 1.0}}


def test_faithful_acceptance_ratio_is_paired_over_prompts(tmp_path):
  """Exact-finite doubles every request's accepted length ((2a + 10 + 10) / 10 = 2 (a + 10) /
  10) while prompts differ: the paired ratio is exactly 2 in every draw."""
  c = _configs.load("faithful_acceptance")
  records = []
  for p in range(6):
    for s in range(3):
      a = 2 * p + s
      records += [_fa_request("local", p, s, 10, a), _fa_request("exact-finite", p, s, 10,
                                                                 2 * a + 10)]
  (row,) = faithful_acceptance.cells(records, c)
  assert row["ratio_ci"] == pytest.approx((2.0, 2.0, 2.0))
  assert len(row["pairs"]) == 6 and all(len(a) == len(b) == 3 for a, b in row["pairs"])
  for law in faithful_acceptance.LAWS:
    point, low, high = row["laws"][law]["accepted_length_ci"]
    assert point == pytest.approx(row["laws"][law]["accepted_length"]) and low < point < high
  text = faithful_acceptance.summarize(records, c, tmp_path)
  cols = _row(text, "| dyck | ngram |")
  for col in (4, 5, 7, 8):
    _bracketed(cols[col])
  assert cols[6] == "2.00 [2.00, 2.00]"
  assert "ratio is 2.00 [2.00, 2.00]" in text


# --- exactness -----------------------------------------------------------------------------
def test_exactness_tv_interval_from_whole_or_top_records():
  n = 10_000
  law = {(1,): 0.5, (2,): 0.3, (3,): 0.2}
  counts = {(1,): 5100, (2,): 2900, (3,): 1950, (9,): 50}  # (9,) lies outside the law
  tv = 0.5 * (0.01 + 0.01 + 0.005 + 0.005)
  whole = {"samples": n, "tv": tv, "law": [[list(k), p] for k, p in law.items()],
           "counts": [[list(k), v] for k, v in counts.items()], "top": []}
  top = {"samples": n, "tv": tv, "top": [{"output": list(k), "expected": p,
                                          "observed": counts[k] / n} for k, p in law.items()]}
  a, b = exactness.tv_interval(whole), exactness.tv_interval(top)
  # the same law and counts (categories in another order: equal up to Monte Carlo error)
  assert a == pytest.approx(b, abs=1e-3) and a[0] == pytest.approx(tv) and a[1] < tv < a[2]
  partial = dict(top, top=top["top"][:2])  # 80% of the law's mass: no interval
  point, low, _ = exactness.tv_interval(partial)
  assert point == tv and math.isnan(low)
  assert stats.fmt(exactness.tv_interval(partial), 4) == f"{tv:.4f}"
  low, high = exactness.frequency_interval(0.51, n)
  assert low < 0.51 < high


# --- faithful ------------------------------------------------------------------------------
def test_faithful_engine_tv_and_accepted_length_intervals(tmp_path):
  c = _configs.load("faithful")
  star = {"()": 0.6, "(())": 0.3, "()()": 0.1}
  rng = np.random.default_rng(1)
  cell = "grammar=g"
  reqs = []
  for law, probs in (("local", [0.3, 0.5, 0.2]), ("onestep", [0.35, 0.45, 0.2]),
                     ("exact-finite", [0.6, 0.3, 0.1])):
    for i, t in enumerate(rng.choice(list(star), size=200, p=probs)):
      reqs.append({"cell": cell, "kind": "request", "law": law, "seed": i, "text": str(t),
                   "finish": "stop", "rounds": 3 + i % 2, "accepted": 1, "drafted": 4,
                   "tokens": 4})

  def run(law):
    rs = [r for r in reqs if r["law"] == law]
    texts = [r["text"] for r in rs]
    emp = {k: texts.count(k) / len(texts) for k in star}
    return {"samples": 200, "complete": 200, "seconds_per_request": 0.1,
            "tv_to_star": faithful._tv(emp, star),
            "accepted_length": decode.accepted_length(rs)}

  meas = {"cell": cell, "kind": "measurement", "overrides": {}, "nodes": 10, "members": 5,
          "strings": 3, "trie_seconds": 0.1, "law_cost": {"seconds": 1.0}, "tv_exact": 0.3,
          "tv_onestep": 0.25, "noise_floor": 0.03,
          "runs": {law: run(law) for law in faithful.LAWS},
          "star": [[k, p] for k, p in star.items()],
          "top": [{"text": k, "star": p, "local": 0.3} for k, p in star.items()]}
  text = faithful.summarize(reqs + [meas], c, tmp_path)
  data = next(l for l in text.splitlines() if l.startswith("|") and "0.300" in l)
  cols = [x.strip() for x in data.strip("|").split("|")]
  for col, law in zip((7, 8, 9), faithful.LAWS):
    point, _, _ = _bracketed(cols[col])
    assert point == pytest.approx(meas["runs"][law]["tv_to_star"], abs=5e-4)
  # Accepted length: (accepted + rounds) / rounds = (200 + 700) / 700 per law, not output
  # tokens / rounds (800 / 700): the requests' rounds alternate 3 and 4, one draft accepted.
  for col in (14, 15):
    point, low, high = _bracketed(cols[col])
    assert point == pytest.approx(900 / 700, abs=5e-3) and low <= point <= high
  assert "carry one over completed samples" in text
  # an older record without the whole μ*: the engine TV is the point alone
  old = {k: v for k, v in meas.items() if k != "star"}
  ci = faithful.law_intervals(reqs, old)
  assert math.isnan(ci["local"]["tv"][1]) and not math.isnan(ci["local"]["accepted_length"][1])


# --- trie ----------------------------------------------------------------------------------
def test_trie_bounds_the_proposition_1_walks():
  c = _configs.load("trie")
  d = {("v", f"s{i}", 10, "trie-vs-xgrammar", "mismatches"): 0 for i in range(3)}
  text = "\n".join(trie.intervals(d, c))
  walks = c.equivalence_walks
  assert f"below {100 * stats.zero_count_bound(walks):.2f}% per row" in text
  assert f"all {3 * walks:,} walks" in text
  d[("v", "s0", 10, "trie-vs-xgrammar", "mismatches")] = 1  # a mismatch: no bound is claimed
  assert "Proposition 1" not in "\n".join(trie.intervals(d, c))


def test_trie_compile_repeats_give_the_median_an_interval():
  c = _configs.load("trie")
  key = (c.main_vocab, "tools", 1000, "trie", "compile_warm_s")
  repeats = {key: [0.010, 0.012, 0.011, 0.013, 0.020]}
  text = "\n".join(trie.intervals({key: 0.012}, c, repeats))
  row = _row(text, f"| {c.main_vocab} | tools | 1,000 | trie |")
  point, low, high = _bracketed(row[6])
  assert point == pytest.approx(12.0) and 10.0 <= low <= point <= high <= 20.0
  assert "records keep only that aggregate" not in text
  assert "runs from now on keep each compile repeat" in "\n".join(trie.intervals({key: 0.012}, c))
