"""JSONSchemaBench ("Generating Structured Outputs from Language Models: Benchmark and
Studies", arXiv:2501.10868) and its MaskBench on this engine (study "jsonschemabench").

One cell = one (table, subset, backend):

  coverage    share of a seeded sample of the subset's schemas the backend compiles strictly,
              and compliance on their MaskBench instances (valid accepted, invalid rejected)
  efficiency  grammar compile time, TTFT and TPOT through the engine on the target model,
              constraint on (per backend) and off, as ratios to the unconstrained run
  mask        the time of one token mask over the tokens of the valid instances (MaskBench's
              TBM), with a big vocabulary

Backends: "xgrammar" (our exact checker, then xgrammar), "llguidance", "auto" (the engine's
default resolution) and, for efficiency, "off". Modules: `measure` (the measurements), `paper`
(the published figures), `report` (the summary's tables, plots and sentences).
"""

from __future__ import annotations

import collections
import math
from pathlib import Path
from typing import Iterator

import numpy as np

from experiments.runner import stats

ROOT = Path(__file__).resolve().parents[3]
TABLES = ("coverage", "efficiency", "mask")
NAN3 = (math.nan, math.nan, math.nan)


def _data(c) -> Path:
  return (ROOT / c.data_dir).resolve()


def units(c) -> int:
  """Schemas (coverage, mask) or requests (efficiency) of the cell."""
  from infernix_jax.testing import schema_bench as sb

  if c.table == "efficiency":
    return max(1, c.efficiency_schemas)
  n = c.coverage_schemas if c.table == "coverage" else c.mask_schemas
  return max(1, len(sb.sample_files(_data(c), c.subset, n, c.seed)))


def run_cell(c, ctx) -> Iterator[dict]:
  from experiments.studies.jsonschemabench import measure

  if c.table not in TABLES:
    raise ValueError(f"config.table={c.table!r}: known {', '.join(TABLES)}")
  data = _data(c)
  if not (data / "jsonschemabench" / "data" / c.subset).is_dir():
    from experiments.workloads import WorkloadUnavailable

    raise WorkloadUnavailable(f"{data / 'jsonschemabench/data' / c.subset} is absent (the "
                              "shared data folder ../shared/data)")
  yield from getattr(measure, {"coverage": "coverage", "efficiency": "efficiency",
                               "mask": "masks"}[c.table])(c, data, ctx)


def group(c) -> tuple:
  """Engine cells run back to back (one engine), then the rest by table and subset."""
  return (c.table != "efficiency", c.table, c.subset)


def skip(c) -> str | None:
  if c.backend == "off" and c.table != "efficiency":
    return "no constraint: only the efficiency table has an unconstrained baseline"
  if c.backend == "auto" and c.table == "mask":
    return "auto takes per schema the first backend that compiles it (llguidance, else " \
           "xgrammar): its masks are those backends' rows"
  return None


# --- figures ---------------------------------------------------------------------------------


def _agrees(row) -> float:
  """1.0 where every instance of a schema got the right verdict (the paper's compliance is
  per schema), else 0.0."""
  return float(row["valid_accepted"] == row["valid"]
               and row["invalid_rejected"] == row["invalid"])


def coverage_rows(records) -> dict:
  """(subset, backend) -> schema records; auto's rows are the resolved backend's records of
  the same schemas (absent where that backend's cell has not run)."""
  by = collections.defaultdict(list)
  for r in records:
    if r.get("kind") == "schema" and "resolved" not in r:
      by[(r["subset"], r["backend"])].append(r)
  index = {(r["subset"], r["backend"], r["schema"]): r for rs in by.values() for r in rs}
  for r in records:
    if r.get("kind") == "schema" and "resolved" in r:
      hit = index.get((r["subset"], r["resolved"], r["schema"]))
      if hit is not None:
        by[(r["subset"], "auto")].append(hit)
  return dict(by)


def coverage_figures(rows) -> dict:
  """Coverage, instance-level valid-accepted and invalid-rejected shares and schema-level
  compliance, each (point, low, high) with a 95% bootstrap interval over schemas."""
  covered = [r for r in rows if r["covered"]]
  out = {"schemas": len(rows), "coverage": stats.bootstrap_counts(
      [sum(r["covered"] for r in rows), sum(not r["covered"] for r in rows)],
      lambda k: k[0] / k.sum()) if rows else NAN3}
  for name, need in (("valid_accepted", "valid"), ("invalid_rejected", "invalid")):
    units = [r for r in covered if r[need]]
    out[name] = (stats.bootstrap_ratio([r[name] for r in units], [r[need] for r in units])
                 if units else NAN3)
  judged = [r for r in covered if r["valid"] + r["invalid"]]
  out["compliance"] = (stats.bootstrap_ratio([_agrees(r) for r in judged], [1.0] * len(judged))
                       if judged else NAN3)
  out["instances"] = sum(r["valid"] + r["invalid"] for r in covered)
  for key in ("narrowed", "known_gap", "budget", "replay_failures"):
    out[key] = sum(r[key] for r in covered)
  out["refused"] = collections.Counter(r["error"] for r in rows if not r["covered"])
  out["took"] = collections.Counter(r["backend"] for r in covered)  # auto: who compiled each
  return out


def _median(key: str):
  def value(rows):
    xs = [r[key] for r in rows if not math.isnan(r[key])]
    return float(np.median(xs)) if xs else math.nan
  return value


def efficiency_rows(records) -> dict:
  """(subset, backend) -> request records."""
  by = collections.defaultdict(list)
  for r in records:
    if r.get("kind") == "request":
      by[(r["subset"], r["backend"])].append(r)
  return dict(by)


def efficiency_figures(on, off) -> dict:
  """Median GCT, TTFT and TPOT of a backend's requests, and TTFT / TPOT ratios to the
  unconstrained run on the same schemas (medians, paired bootstrap over schemas), over the
  schemas that both sides ran without error."""
  ok = lambda rs: [r for r in rs if not r.get("error") and not math.isnan(r["ttft_s"])]  # noqa: E731
  pairs = stats.paired(ok(on), ok(off), "item")
  mine = [a[0] for a, _ in pairs] if off else ok(on)
  out = {"requests": len(mine)}
  for key in ("compile_s", "ttft_s", "tpot_s"):
    out[key] = stats.bootstrap(mine, _median(key)) if mine else NAN3
    if pairs:
      out[f"{key}_ratio"] = stats.paired_ratio(pairs, _median(key)) if key != "compile_s" \
          else NAN3
  done = [r for r in mine if r["valid"] is not None]
  out["valid"] = (sum(bool(r["valid"]) for r in done), len(done))
  return out


def auto_paths(auto: list[dict], by: dict, subset: str) -> dict:
  """Where auto's efficiency requests went: `took` (backend that compiled them -> requests;
  "" for requests that do not record it) and `path_tpot`, auto's TPOT median over the TPOT
  median of the same schemas run with the backend each auto request took (two timings of one
  path: its distance from 1 is the run's noise; NaN without such pairs).

  Args:
    auto: auto's request records of `subset`.
    by: `efficiency_rows` of every request.
  """
  ok = lambda r: not r.get("error") and not math.isnan(r["tpot_s"])  # noqa: E731
  index = {(b, r["item"]): r for (s, b), rs in by.items() if s == subset and b != "auto"
           for r in rs if ok(r)}
  pairs = [(a, index[(a["resolved"], a["item"])]) for a in auto
           if ok(a) and (a.get("resolved"), a["item"]) in index]
  path = (float(np.median([a["tpot_s"] for a, _ in pairs])
                / np.median([b["tpot_s"] for _, b in pairs])) if pairs else math.nan)
  return {"took": collections.Counter(r.get("resolved", "") for r in auto), "path_tpot": path}


def mask_rows(records) -> dict:
  by = collections.defaultdict(list)
  for r in records:
    if r.get("kind") == "mask" and r["mask_us"]:
      by[(r["subset"], r["backend"])].append(r)
  return dict(by)


def _pooled(q: float | None):
  """Statistic over mask records: the mean (q None) or the q-th percentile of all tokens'
  mask times pooled."""
  def value(rows):
    xs = np.concatenate([np.asarray(r["mask_us"], float) for r in rows])
    return float(xs.mean() if q is None else np.percentile(xs, q))
  return value


def mask_figures(rows) -> dict:
  """Mean, p50 and p99 mask microseconds over the pooled tokens, and the median compile
  seconds, each with a 95% bootstrap interval over schemas."""
  if not rows:
    return {"schemas": 0, "tokens": 0, "mean": NAN3, "p50": NAN3, "p99": NAN3, "compile": NAN3}
  return {"schemas": len(rows), "tokens": sum(r["tokens"] for r in rows),
          "refused": sum(r["refused"] for r in rows),
          "mean": stats.bootstrap(rows, _pooled(None)),
          "p50": stats.bootstrap(rows, _pooled(50)),
          "p99": stats.bootstrap(rows, _pooled(99)),
          "compile": stats.bootstrap(rows, _median("compile_s"))}


def interval(records, c) -> tuple[float, float, float]:
  """The study's target figure: xgrammar's coverage over every subset's schemas pooled."""
  rows = [r for (_, b), rs in coverage_rows(records).items() if b == "xgrammar" for r in rs]
  return coverage_figures(rows)["coverage"] if rows else NAN3


def headline(records, c) -> str:
  """Coverage of our xgrammar path, of llguidance and of auto (per schema the first backend
  that compiles it), all sampled schemas pooled."""
  by = coverage_rows(records)
  parts = []
  for backend in ("xgrammar", "llguidance", "auto"):
    rows = [r for (_, b), rs in by.items() if b == backend for r in rs]
    if rows:
      parts.append(f"{backend} {stats.fmt(coverage_figures(rows)['coverage'], 1, 100)}%")
  if not parts:
    return ""
  return (f"strict coverage of the JSONSchemaBench schemas run: {', '.join(parts)} "
          "(95% over schemas)")


def summarize(records, c, out: Path) -> str:
  from experiments.studies.jsonschemabench import report

  return report.summary(records, c, out)
