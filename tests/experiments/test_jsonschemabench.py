"""The jsonschemabench study's figures on synthetic records (no model, no data): coverage and
compliance with intervals over schemas, auto taking the resolved backend's records, efficiency
ratios paired by schema, pooled per-mask percentiles, and the summary's three tables beside
the published figures."""

from __future__ import annotations

import pytest

from experiments.studies.jsonschemabench import paper
from experiments.studies import jsonschemabench as jsb
from tests.experiments import _configs, _tables

_bracketed, _row = _tables.bracketed, _tables.row


def _schema(subset, backend, i, covered, valid=(2, 2), invalid=(2, 2)):
  return {"kind": "schema", "subset": subset, "backend": backend, "schema": f"s{i}.json",
          "covered": covered, "error": None if covered else "oneOf", "compile_s": 0.01,
          "valid": valid[0] if covered else 0, "valid_accepted": valid[1] if covered else 0,
          "invalid": invalid[0] if covered else 0,
          "invalid_rejected": invalid[1] if covered else 0, "narrowed": 0, "known_gap": 0,
          "budget": 0, "replay_failures": 0}


def _records():
  """Github_easy: 20 schemas; xgrammar covers 15 (one of them accepts an invalid instance),
  llguidance 18; auto resolves every schema to xgrammar. Efficiency: 6 schemas, TPOT on =
  1.5 x off for each; mask: 4 schemas of 10 tokens each."""
  recs = []
  for i in range(20):
    recs.append(_schema("Github_easy", "xgrammar", i, i < 15,
                        invalid=(2, 1) if i == 0 else (2, 2)))
    recs.append(_schema("Github_easy", "llguidance", i, i < 18))
    recs.append({"kind": "schema", "subset": "Github_easy", "backend": "auto",
                 "schema": f"s{i}.json", "resolved": "xgrammar"})
  for i in range(6):
    for backend, factor in (("off", 1.0), ("xgrammar", 1.5), ("llguidance", 1.5)):
      recs.append({"kind": "request", "subset": "Github_easy", "backend": backend,
                   "item": f"json/Github_easy/s{i}", "ttft_s": 0.1 * factor * (1 + i / 10),
                   "tpot_s": 0.02 * factor * (1 + i / 10), "compile_s": 0.0 if backend ==
                   "off" else 0.005, "error": None, "valid": True, "tokens": 20})
  for i in range(4):
    for backend in ("xgrammar", "llguidance"):
      recs.append({"kind": "mask", "subset": "Github_easy", "backend": backend,
                   "schema": f"s{i}.json", "tokens": 10, "refused": 0, "compile_s": 0.1,
                   "instances": 1, "mask_us": [float(10 * i + t) for t in range(10)]})
  return recs


def _config():
  c = _configs.load("jsonschemabench")
  c.grid.subset = ("Github_easy",)
  return c


def test_coverage_intervals_over_schemas():
  by = jsb.coverage_rows(_records())
  x = jsb.coverage_figures(by[("Github_easy", "xgrammar")])
  assert x["schemas"] == 20 and x["coverage"][0] == pytest.approx(0.75)
  assert x["coverage"][1] < 0.75 < x["coverage"][2]
  assert x["invalid_rejected"][0] == pytest.approx(29 / 30)
  assert x["valid_accepted"][0] == 1.0
  assert x["compliance"][0] == pytest.approx(14 / 15)  # one schema gets an instance wrong
  assert x["refused"] == {"oneOf": 5}
  assert jsb.coverage_figures(by[("Github_easy", "llguidance")])["coverage"][0] == 0.9


def test_auto_takes_the_resolved_backends_records():
  by = jsb.coverage_rows(_records())
  assert by[("Github_easy", "auto")] == by[("Github_easy", "xgrammar")]
  # Without the resolved backend's cell, auto has no rows (not invented figures).
  only_auto = [r for r in _records() if r.get("backend") == "auto"]
  assert ("Github_easy", "auto") not in jsb.coverage_rows(only_auto)


def _mixed_records(record_backend=True):
  """Github_easy as auto routes it now: llguidance refuses s1, s2 and s18-s19, xgrammar covers
  s0-s14, so auto takes llguidance for 16 schemas, xgrammar for s1 and s2, and is refused on
  s18 and s19 (recorded as the first candidate, llguidance). Efficiency: auto's requests take
  llguidance (s0-s3) or xgrammar (s4, s5) at the TPOT of that backend's own run of the schema
  (xgrammar 1.5 x off, llguidance 1.2 x off); with `record_backend` False they name no backend,
  as requests measured before they recorded it."""
  recs = []
  for i in range(20):
    llg = i not in (1, 2) and i < 18
    recs.append(_schema("Github_easy", "xgrammar", i, i < 15))
    recs.append(_schema("Github_easy", "llguidance", i, llg))
    recs.append({"kind": "schema", "subset": "Github_easy", "backend": "auto",
                 "schema": f"s{i}.json",
                 "resolved": "llguidance" if llg or i >= 15 else "xgrammar"})
  for i in range(6):
    took = "llguidance" if i < 4 else "xgrammar"
    for backend, factor in (("off", 1.0), ("xgrammar", 1.5), ("llguidance", 1.2),
                            ("auto", 1.5 if took == "xgrammar" else 1.2)):
      rec = {"kind": "request", "subset": "Github_easy", "backend": backend,
             "item": f"json/Github_easy/s{i}", "ttft_s": 0.1 * factor * (1 + i / 10),
             "tpot_s": 0.02 * factor * (1 + i / 10),
             "compile_s": 0.0 if backend == "off" else 0.005, "error": None, "valid": True,
             "tokens": 20}
      if backend != "off" and record_backend:
        rec["resolved"] = took if backend == "auto" else backend
      recs.append(rec)
  return recs


def test_auto_takes_per_schema_the_backend_that_compiled_it(tmp_path):
  recs = _mixed_records()
  by = jsb.coverage_rows(recs)
  auto = by[("Github_easy", "auto")]
  assert [r["backend"] for r in auto] == ["llguidance"] + ["xgrammar"] * 2 + ["llguidance"] * 17
  f = jsb.coverage_figures(auto)
  # The union of what the two backends compile: 18 of 20, neither backend alone reaches it.
  assert f["coverage"][0] == pytest.approx(0.9)
  assert jsb.coverage_figures(by[("Github_easy", "llguidance")])["coverage"][0] == 0.8
  assert f["took"] == {"llguidance": 16, "xgrammar": 2}
  assert f["refused"] == {"oneOf": 2}
  assert f["instances"] == 18 * 4
  assert "auto 90.0 [" in jsb.headline(recs, _config())
  text = jsb.summarize(recs, _config(), tmp_path)
  assert _bracketed(_row(text, "| Github_easy | auto | 20 |")[3])[0] == 90.0
  assert ("auto 90% strict (per schema the first backend that compiles it; schemas taken: "
          "llguidance 16, xgrammar 2; refused by every backend most, in the first backend's "
          "words: `oneOf`)") in text
  # Each auto request is timed against its own backend's run of the schema: one path, ratio 1.
  assert "auto runs each schema on the path of the backend that compiled it (llguidance 4, " \
         "xgrammar 2 requests), and its TPOT median is x1.00-1.00" in text
  assert "very path xgrammar takes" not in text and "do not record the backend" not in text


def test_auto_requests_without_their_backend_give_no_noise_estimate(tmp_path):
  text = jsb.summarize(_mixed_records(record_backend=False), _config(), tmp_path)
  assert "auto's efficiency rows: 6 of its requests do not record the backend" in text
  assert "Noise:" not in text


def test_efficiency_ratio_pairs_the_same_schemas():
  by = jsb.efficiency_rows(_records())
  f = jsb.efficiency_figures(by[("Github_easy", "xgrammar")], by[("Github_easy", "off")])
  assert f["requests"] == 6
  point, low, high = f["tpot_s_ratio"]
  assert point == pytest.approx(1.5) and low == pytest.approx(1.5) and high == pytest.approx(1.5)
  # An errored request leaves the pairs (both sides) rather than skewing the ratio.
  on = [dict(r, error="dead_end") if r["item"].endswith("s0") else r
        for r in by[("Github_easy", "xgrammar")]]
  assert jsb.efficiency_figures(on, by[("Github_easy", "off")])["requests"] == 5


def test_mask_percentiles_pool_tokens_and_resample_schemas():
  rows = jsb.mask_rows(_records())[("Github_easy", "xgrammar")]
  f = jsb.mask_figures(rows)
  assert f["tokens"] == 40 and f["mean"][0] == pytest.approx(19.5)
  assert f["p99"][0] == pytest.approx(38.61)
  assert f["p99"][1] <= f["p99"][0] <= f["p99"][2] and f["mean"][1] < f["mean"][2]
  assert jsb.mask_figures([])["schemas"] == 0


def test_summary_tables_beside_the_published_figures(tmp_path):
  text = jsb.summarize(_records(), _config(), tmp_path)
  cols = _row(text, "| Github_easy | xgrammar | 20 |")
  assert _bracketed(cols[3])[0] == 75.0
  assert _bracketed(cols[5])[0] == pytest.approx(96.7, abs=0.05)
  eff = _row(text, "| Github_easy | llguidance | 6 |")
  assert _bracketed(eff[7])[0] == 1.5
  mask = _row(text, "| all | llguidance | 4 | 40 |")
  assert _bracketed(mask[4])[0] == 19.5
  # The paper's rows, with the source named; a figure it lacks says so.
  assert "| Github_easy | GitHub Easy | Guidance | 0.90 | 0.86 | 0.96 |" in text
  assert "| Github_easy | Table 3 (HF Transformers) | XGrammar | 0.12 | 0.30 | 66.78 |" in text
  assert "| LLGuidance | 47 | 460 |" in text and paper.PAPER_URL in text
  assert paper.MASKBENCH_URL in text
  assert "## Findings" in text and "Efficiency, xgrammar on / off: TPOT x1.50-1.50" in text
  for name in ("coverage.png", "tpot_ratio.png", "mask_p99.png"):
    assert (tmp_path / name).stat().st_size > 0


def test_headline_and_interval():
  recs = _records()
  assert jsb.interval(recs, _config())[0] == pytest.approx(0.75)
  line = jsb.headline(recs, _config())
  assert line.startswith("strict coverage of the JSONSchemaBench schemas run: xgrammar "
                         "75.0 [") and "llguidance 90.0 [" in line
  assert jsb.headline([], _config()) == ""


def test_published_figures_that_are_absent_say_so():
  assert paper.cell(None) == "not found here"
  assert paper.EFFICIENCY_HF["GlaiveAI"]["XGrammar"] is None
  assert paper.DATASET["Github_trivial"] is None  # the paper left the subset out


def test_cells_and_skips():
  from experiments.runner import sweep

  cells = sweep.cells(_configs.load("jsonschemabench"))
  assert len(cells) == 3 * 4 * 4
  skipped = [c for c in cells if jsb.skip(c.config)]
  assert {(c.config.table, c.config.backend) for c in skipped} == {
      ("coverage", "off"), ("mask", "off"), ("mask", "auto")}
  with pytest.raises(ValueError, match="unknown variant 'x'"):
    _configs.load("jsonschemabench", "x")
