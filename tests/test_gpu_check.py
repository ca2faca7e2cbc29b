"""The GPU check: its CPU dry run writes every group's lines and a report, never the shipped
files; the report writer says which device measured each figure and what was not measured."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))

import gpu_check  # noqa: E402
import _gpu_check_report as report  # noqa: E402
from infernix_jax.pallas import dispatch  # noqa: E402

SHIPPED = [ROOT / "docs/results/gpu_check.md", dispatch.TABLE_PATH]


def _line(group, label, kind="NVIDIA H100 80GB HBM3", platform="gpu", dry=False, **figures):
  return dict(device_kind=kind, platform=platform, jax="0.0", dry_run=dry, group=group,
              label=label, config={}, figures=figures, time="2026-12-07T05:00:00+00:00")


def _write(path, lines):
  path.write_text("".join(json.dumps(line) + "\n" for line in lines))


def test_report_names_the_device_and_what_was_not_measured(tmp_path):
  lines = [_line("host_device", "SmolLM2 1 lane synced per call", ms_per_step=1.25),
           _line("lanes", "SmolLM2 unrolled B=1 S=512", ms_per_step=2.0),
           _line("lanes", "SmolLM2 unrolled B=8 S=512", ms_per_step=5.0),
           dict(_line("gemm", "o M=8"), skipped="group budget spent")]
  lines[1]["config"] = dict(layout="unrolled", capacity=512, lanes=1)
  lines[2]["config"] = dict(layout="unrolled", capacity=512, lanes=8)
  text = report.render(lines)
  rows = {row.split(" | ")[0].lstrip("| "): row for row in text.splitlines()
          if row.startswith("| ") and not row.startswith("| measurement")}
  assert rows["SmolLM2 1 lane synced per call"] == (
      "| SmolLM2 1 lane synced per call | NVIDIA H100 80GB HBM3 | ms_per_step 1.25 |")
  assert "x2.50 of B=1" in rows["SmolLM2 unrolled B=8 S=512"]
  assert rows["o M=8"].endswith("| not measured (group budget spent) |")
  # Every planned measurement has a row; those without a line say so, with no device.
  planned = [label for labels in gpu_check.plan(False).values() for label in labels]
  assert set(planned) <= set(rows)
  assert rows["Qwen3-8B 1 lane synced per call"] == (
      "| Qwen3-8B 1 lane synced per call | - | not measured |")
  assert "DRY RUN" not in text


def test_report_writes_the_measured_device_table_entry(tmp_path):
  jsonl, out, table = tmp_path / "x.jsonl", tmp_path / "r.md", tmp_path / "t.json"
  lines = []
  for r, kernel in ((1, 0.5), (8, 0.2), (32, 0.3)):
    for sampling in ("greedy", "plain"):
      line = _line("dispatch", f"masked_sample R={r} {sampling}", kernel_ms=kernel,
                   reference_ms=0.4 if sampling == "greedy" else 0.35)
      line["config"] = dict(op="masked_sample", rows=r)
      lines.append(line)
  _write(jsonl, lines)
  assert report.main(jsonl, out, table) == 0
  loaded = dispatch.load_table(table)
  kind = "NVIDIA H100 80GB HBM3"
  # R = 8 and 32 beat the reference in both configurations, R = 1 in neither.
  assert [dispatch.choose("masked_sample", r, table=loaded, kind=kind) for r in (1, 8, 32, 64)
          ] == ["reference", "kernel", "kernel", "reference"]
  assert "NVIDIA H100 80GB HBM3" in out.read_text()


def test_report_refuses_to_write_dry_run_lines_to_the_shipped_files(tmp_path):
  jsonl = tmp_path / "x.jsonl"
  _write(jsonl, [_line("gemm", "o M=1", kind="cpu", platform="cpu", dry=True,
                       ms_per_product=0.1)])
  before = [p.read_bytes() if p.exists() else None for p in SHIPPED]
  with pytest.raises(SystemExit, match="dry-run"):
    report.main(jsonl, None, None)
  assert [p.read_bytes() if p.exists() else None for p in SHIPPED] == before


@pytest.mark.slow
def test_cpu_dry_run_writes_every_group(tmp_path):
  before = [p.read_bytes() if p.exists() else None for p in SHIPPED]
  env = dict(os.environ, OUT=str(tmp_path), PY=sys.executable, JAX_PLATFORMS="cpu")
  run = subprocess.run(["bash", str(ROOT / "scripts/gpu_check.sh"), "--cpu-dry-run"],
                       env=env, capture_output=True, text=True, timeout=900)
  assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
  lines = [json.loads(x) for x in (tmp_path / "gpu_check.jsonl").read_text().splitlines()]
  assert {line["device_kind"] for line in lines} == {"cpu"}
  assert all(line["dry_run"] for line in lines)
  for group, labels in gpu_check.plan(True).items():
    mine = [line for line in lines if line["group"] == group]
    assert {line["label"] for line in mine} >= set(labels), group
    assert any(line["figures"] for line in mine), f"{group}: nothing measured"
  assert {line["config"]["mode"] for line in lines if line["group"] == "cmdbuf"} == {
      "off", "default", "full"}
  table = dispatch.load_table(tmp_path / "dispatch_table.json")
  assert set(table.kernel_sizes) == {"cpu"}
  md = (tmp_path / "gpu_check.md").read_text()
  assert "CPU DRY RUN" in md and "| cpu |" in md
  assert [p.read_bytes() if p.exists() else None for p in SHIPPED] == before
