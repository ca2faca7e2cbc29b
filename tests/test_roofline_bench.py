"""benchmarks/roofline.py end to end on the tiny model (--quick): every step shape and piece
timed against a positive roofline, ratios consistent, thunks counted, the goals table written;
--only lanes replaces the lanes section of an existing report and keeps the rest."""

from __future__ import annotations

import importlib
import json
import math
import sys
from pathlib import Path

import pytest

from infernix_jax.models import cpu_kernels
from infernix_jax.testing import exact_oracle

ROOT = Path(__file__).resolve().parents[1]
pytestmark = pytest.mark.slow  # compiles the engine's verify and finish steps per shape


def _roofline_module():
  """benchmarks/roofline.py as a module (its folder on the path: it imports its siblings)."""
  folder = str(ROOT / "benchmarks")
  if folder not in sys.path:
    sys.path.insert(0, folder)
  return importlib.import_module("roofline")


def test_quick_run_reports_every_shape_piece_and_goal(tmp_path, capsys):
  roofline = _roofline_module()
  cfg, _ = exact_oracle.tiny_model()
  out = tmp_path / "roofline.json"
  assert roofline.main(["--quick", "--repeats", "2", "--capacity", "512", "--json", str(out)],
                       cfg=cfg) == 0
  result = json.loads(out.read_text())
  assert result["complete"] and not result["skipped"]
  den = result["denominators"]
  assert den["bandwidth"] > 0 and den["dense_rate"] > 0

  names = {s.name for s in roofline.QUICK_SHAPES}
  assert {r["name"] for r in result["steps"]} == names
  assert {r["kind"] for r in result["steps"]} == {"decode", "verify", "batched verify"}
  for row in result["steps"]:
    assert row["lanes"] * row["positions"] == row["m"]
    for suffix in ("", "_masked"):
      assert row[f"ms{suffix}"] > 0 and row[f"roofline_ms{suffix}"] > 0
      assert math.isclose(row[f"ratio{suffix}"], row[f"ms{suffix}"] / row[f"roofline_ms{suffix}"])
    for count in row["thunks"].values():
      assert isinstance(count, int) and count > 0

  assert {r["capacity"] for r in result["capacities"]} == {4096}
  pieces = result["pieces"]
  assert {r["m"] for r in pieces} == set(roofline.QUICK_PIECE_M)
  assert any(r["name"].startswith("mask unpack + acceptance") for r in pieces)
  batched = {r["name"].split(", ")[-1] for r in pieces
             if "lanes x 1)" in r["name"] and "XLA" not in r["name"]}
  assert batched == {f"{lanes} lanes x 1)" for lanes in roofline.BATCHED_ATTENTION_LANES}
  if "CPU kernels" in result["kernels"]:  # timed beside their peer, XLA's own ops
    assert {r["name"] for r in result["xla_steps"]} == {"decode(1)", "verify(5)"}
    assert all(r["ms"] > 0 for r in result["xla_steps"])
    peers = [r for r in pieces if r["name"].endswith("XLA ops")]
    assert len(peers) == len(roofline.QUICK_PIECE_M) + len(roofline.BATCHED_ATTENTION_LANES)
  else:
    assert result["kernels"] == "XLA's own ops" and not result["xla_steps"]
  for row in pieces:
    assert row["ms"] > 0 and row["roofline_ms"] > 0
    assert math.isclose(row["ratio"], row["ms"] / row["roofline_ms"])

  goals = {g["goal"]: g for g in result["goals"]}
  assert len(goals) == 4
  assert all(g["met"] is not None and g["value"] > 0 for g in goals.values())
  assert all(g["reason"] for g in goals.values() if g["met"] is False)

  text = capsys.readouterr().out
  assert "## Goals" in text and "| goal | measured | limit | status |" in text
  assert "decode(1) at KV capacity 4096 / 512" in text


def _report_without_lanes(cfg) -> dict:
  """A report's JSON as `run` writes it, with made-up figures and no lanes section."""
  return {"command": "benchmarks/roofline.py --write", "date": "2026-01-01", "machine": "m",
          "device": "cpu: cpu", "jax": "0", "model": cfg.name or "custom", "dtype": cfg.dtype,
          "capacity": 512, "context": 150, "repeats": 3, "temperature": 0.0,
          "pallas_impl": "reference", "steps_source": "s", "kernels": "k",
          "denominators": {"bandwidth": 1e10, "dense_rate": 1e11, "bandwidth_how": "b",
                           "dense_how": "d"},
          "weights": {"weight_bytes": 1e6, "floor_ms": 0.1}, "steps": [], "capacities": [],
          "xla_steps": [], "pieces": [], "skipped": [], "complete": True,
          "goals": [{"goal": "a goal", "value": 1.0, "limit": 1.3, "met": True, "reason": ""}]}


def test_only_lanes_replaces_that_section_and_keeps_the_others(tmp_path, monkeypatch):
  roofline = _roofline_module()
  cfg, _ = exact_oracle.tiny_model()
  page, data = tmp_path / "docs/roofline.md", tmp_path / "docs/roofline.json"
  monkeypatch.setattr(roofline, "ROOT", tmp_path)
  monkeypatch.setattr(roofline, "REPORT_MD", page)
  monkeypatch.setattr(roofline, "REPORT_JSON", data)
  args = ["--only", "lanes", "--write", "--quick", "--lanes", "1", "2", "--repeats", "1",
          "--capacity", "512"]
  with pytest.raises(SystemExit):  # no report to put the section into
    roofline.main(args, cfg=cfg)
  data.parent.mkdir()
  data.write_text(json.dumps({**_report_without_lanes(cfg), "model": "another"}))
  with pytest.raises(SystemExit):  # a report of another model
    roofline.main(args, cfg=cfg)
  base = _report_without_lanes(cfg)
  data.write_text(json.dumps(base))

  assert roofline.main(args, cfg=cfg) == 0
  result = json.loads(data.read_text())
  lanes = result.pop("lanes")
  assert result == base  # every other section as it was
  kernels = cpu_kernels.available()
  ops = ("CPU kernels", "XLA ops") if kernels else ("XLA ops",)
  assert sorted((r["layout"], r["ops"], r["lanes"]) for r in lanes["rows"]) == sorted(
      (layout, o, b) for layout in ("stacked", "unrolled") for o in ops for b in (1, 2))
  for row in lanes["rows"]:
    assert row["ms"] > 0 and row["roofline_ms"] > 0 and row["span"] == 512
    if row["ops"] == "XLA ops":  # traced with the kernels off, the stacked layout included
      assert row["kernel_calls"] == 0
  assert lanes["load_before"] and lanes["load_after"] and not lanes["skipped"]
  text = page.read_text()
  assert "## Goals" in text and "| a goal |" in text
  assert "## Lanes: decode(B) / decode(1)" in text
  assert "| unrolled | XLA ops | 0 | 512 |" in text and "| roofline |" in text


def test_entry_thunks_count_runtime_work_only():
  roofline = _roofline_module()
  report = sys.modules["_roofline_report"]
  hlo = "\n".join([
      "HloModule m", "", "%fused (p: f32[4]) -> f32[4] {", "  %p = f32[4]{0} parameter(0)",
      "  ROOT %n = f32[4]{0} negate(%p)", "}", "",
      "ENTRY %main (a: f32[4], b: s32[]) -> (f32[4], s32[]) {",
      "  %a = f32[4]{0} parameter(0)", "  %b = s32[] parameter(1)",
      "  %c = f32[] constant(1)", "  %f = f32[4]{0} fusion(%a), kind=kLoop, calls=%fused",
      "  %w = (s32[], (f32[4]{0}, f32[4096]{0})) while(%t), condition=%c1, body=%b1",
      "  %g = s32[] get-tuple-element(%w), index=0",
      "  %bc = f32[2,2]{1,0} bitcast(%f)", "  %cc = f32[4096]{0} custom-call(%f)",
      "  ROOT %t = (f32[4]{0}, s32[]) tuple(%f, %g)", "}"])
  assert report.entry_thunks(hlo) == 3  # fusion, while, custom-call
  assert report.sized_ops(hlo, 4096) == {"while": 1, "custom-call": 1}
  with pytest.raises(ValueError, match="ENTRY"):
    report.entry_thunks("HloModule m")
  assert roofline.roofline_ms(2e9, 1e9, {"bandwidth": 1e9, "dense_rate": 1e12}) == (2e3, "memory")
