"""The progress bar (counts, ETA, log lines vs one redrawn terminal line) and the long scripts
that report through it."""

from __future__ import annotations

import io
import re
import subprocess
import sys
import types
from pathlib import Path

import pytest

from infernix_jax import progress
from infernix_jax.progress import Progress

ROOT = Path(__file__).resolve().parents[1]
BENCH = ROOT / "../shared/data/jsonschemabench/data/Github_trivial"


class _Tty(io.StringIO):
  def isatty(self):
    return True


def test_log_lines_carry_count_percent_and_eta(monkeypatch):
  # A clock that starts at 3 s, as `perf_counter` does on a machine booted 3 s ago (it counts
  # from an arbitrary origin, often boot), below `every_s`: the first line must still print.
  ticks = iter([3.0, 3.5, 4.0, 4.5])
  monkeypatch.setattr(progress, "time", types.SimpleNamespace(perf_counter=lambda: next(ticks)))
  out = io.StringIO()
  bar = Progress(4, "items", stream=out, every_s=3600)
  for _ in range(4):
    bar.advance(subset="a")
  bar.close()
  lines = out.getvalue().splitlines()
  assert len(lines) == 2  # the first update, then nothing until the last (every_s is an hour)
  assert lines[0].startswith("items  25% 1/4 subset=a") and lines[0].endswith("ETA ?")
  assert lines[1] == "items 100% 4/4 subset=a 2 it/s ETA 0m00s"  # 3 more items in 1.5 s
  assert bar.done == 4


def test_write_keeps_the_terminal_bar_on_one_line(capsys):
  tty = _Tty()
  bar = Progress(2, "items", stream=tty)
  bar.advance()
  bar.write("| row |")
  bar.advance()
  bar.close()
  assert capsys.readouterr().out == "| row |\n"
  drawn = tty.getvalue()
  assert "\n" not in drawn[:-1]  # redrawn in place, one newline at close
  assert drawn.count("items  50% 1/2") == 2  # drawn, erased for the row, drawn again
  assert "\r\033[K" in drawn and "items 100% 2/2" in drawn


@pytest.mark.skipif(not BENCH.is_dir(), reason="shared data (jsonschemabench) not present")
@pytest.mark.parametrize("backend", ["xgrammar", "llguidance"])
def test_schema_coverage_smoke_run_reports_progress(backend, tmp_path):
  out = tmp_path / "coverage.md"
  run = subprocess.run(
      [sys.executable, "benchmarks/schema_coverage.py", "--backend", backend, "--limit", "2",
       "--subsets", "Github_trivial", "--no-suite", "--out", str(out)],
      cwd=ROOT, capture_output=True, text=True, timeout=300)
  assert run.returncode == 0, run.stderr[-2000:]
  bars = [l for l in run.stderr.splitlines() if l.startswith("JSONSchemaBench schemas")]
  assert bars and re.search(r" 100% 2/2 subset=Github_trivial .* ETA 0m00s$", bars[-1]), bars
  assert "| Github_trivial | 2 |" in run.stdout and out.exists()
