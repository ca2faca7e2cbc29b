"""benchmarks/roofline.py end to end on the tiny model (--quick): every step shape and piece
timed against a positive roofline, ratios consistent, thunks counted, the goals table written."""

from __future__ import annotations

import importlib
import json
import math
import sys
from pathlib import Path

import pytest

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
