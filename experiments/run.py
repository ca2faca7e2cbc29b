"""Runs a study from its config: every cell of its grid, resumable, one JSON line per result.

  python -m experiments.run --config=configs/<study>.py[:variant] [--config.FIELD=VALUE ...]
      [--grid FIELD=V1,V2 ...] [--only FIELD=V1,V2 ...] [--results_dir=results] [--shard=i/n]
      [--run_dir=DIR] [--noresume] [--resume_across_versions] [--publish]

Writes results/<study>/<timestamp>/ (config.json, environment.json, runs.jsonl, summary.md,
plots). A config's optional `plugins` (module names) are imported first: they register the
drafters or backends its cells name. A failed cell is recorded with its error and the sweep
goes on; a rerun of the same config skips the cells already done, unless another code version
ran them (refused, naming both versions, without `--resume_across_versions`; each cell's closing
line names its version). `--grid FIELD=V1,V2` adds or replaces a grid axis over any field of
the config. `--only FIELD=V1,V2` runs only the cells with those values on that grid axis, in a
run directory of the whole config; with `--noresume` it runs done cells again in a fresh
directory, which `experiments.report` merges after the earlier ones (a cell run again supersedes
its earlier run). `--publish` also writes the summary and plots to the config's `publish_dir`
(tracked reports are never overwritten otherwise).
"""

from __future__ import annotations

import sys
import time
import traceback
from pathlib import Path

from absl import app, flags

from infernix_jax._extras import missing

try:
  from ml_collections import config_flags
except ImportError as e:
  raise missing("ml_collections", "study", "the study runner") from e

from experiments import report as report_lib
from experiments import studies, workloads
from experiments.runner import environment, store, sweep

_CONFIG = config_flags.DEFINE_config_file("config", None, "study config file (get_config)")
_RESULTS = flags.DEFINE_string("results_dir", "results", "where run directories go")
_SHARD = flags.DEFINE_string("shard", "", "i/n: run every n-th cell from i (default: the "
                             "SLURM job array's task i of n, else jax.process_index()/"
                             "jax.process_count(), 0/1 on one host)")
_RUN_DIR = flags.DEFINE_string("run_dir", "", "an explicit run directory (resumed if it holds "
                               "the same config)")
_RESUME = flags.DEFINE_bool("resume", True, "reuse the newest run directory of the same config")
_ACROSS = flags.DEFINE_bool("resume_across_versions", False, "resume a run directory whose "
                            "done cells another code version ran (git revision, uncommitted "
                            "code changes or package versions differ); each cell records its "
                            "version")
_GRID = flags.DEFINE_multi_string("grid", [], "FIELD=V1,V2,...: a grid axis over that field of "
                                  "the config (added, or replacing the config's own axis); "
                                  "values take the field's type; a list literal "
                                  "FIELD='[(\"a\", \"b\"), (\"c\",)]' for tuple fields")
_ONLY = flags.DEFINE_multi_string("only", [], "FIELD=V1,V2,...: run only the cells with one "
                                  "of these values on that grid axis (the config and its "
                                  "cell ids stay the whole sweep's)")
_PUBLISH = flags.DEFINE_bool("publish", False, "also write summary.md and plots to the "
                             "config's publish_dir")


def run(config, *, results_dir: str = "results", shard: str = "", run_dir: str = "",
        resume: bool = True, publish: bool = False, resume_across_versions: bool = False,
        only=(), stream=None) -> Path:
  """Runs the study of `config` and returns its run directory.

  Args:
    only: `FIELD=V1,V2` specs (`sweep.select`): run only the cells they select.

  Raises:
    ValueError: a bad config, grid, `only` spec or shard, a plug-in module that does not
      import, or a run directory to resume that another code version ran (before any cell
      runs).
  """
  from infernix_jax.errors import ParameterError
  from infernix_jax.progress import Progress
  from infernix_jax.runtime import compile_cache
  from infernix_jax.runtime.build import load_plugins

  stream = stream or sys.stderr
  try:  # a config's plug-ins register drafters or backends before its cells name them
    load_plugins(tuple(config.get("plugins", ())))
  except ParameterError as e:
    raise ValueError(f"config.plugins: {e.message}") from None
  study = studies.get(config.study)
  all_cells = sweep.cells(config)
  i, n = sweep.parse_shard(shard) if shard else sweep.default_shard()
  mine = sweep.shard(sweep.select(all_cells, config, only), i, n)
  rd = store.RunDir.open(Path(results_dir), config.study, config.to_dict(),
                         environment.collect(), (i, n), resume=resume, run_dir=run_dir,
                         across_versions=resume_across_versions)
  todo = [c for c in mine if c.id not in rd.done]
  if hasattr(study, "group"):  # consecutive cells share what the study builds per group
    todo.sort(key=lambda c: tuple(map(str, study.group(c.config))))
  print(f"# {config.study}: {len(all_cells)} cells, shard {i}/{n}: {len(mine)}, "
        f"{len(mine) - len(todo)} done before -> {rd.path}", file=stream, flush=True)
  sizes = [max(1, int(study.units(c.config))) for c in todo]
  bar = Progress(sum(sizes), f"{config.study}", stream=stream)
  ctx = studies.Context()
  done_units = 0
  failed = 0
  try:
    for cell, size in zip(todo, sizes):
      t0 = time.perf_counter()
      seen = 0

      def close(status: str, **extra) -> None:  # the cell's closing line
        rd.append(cell.id, {"kind": "cell", "status": status, "overrides": cell.overrides,
                            "seconds": time.perf_counter() - t0, "version": rd.version, **extra})

      why = study.skip(cell.config) if hasattr(study, "skip") else None
      if why:  # a cell the grid spells but that repeats another (recorded, not run)
        close("ok", skipped=why, seconds=0.0)
        done_units += size
        continue
      try:
        records = sized_records(study, cell.config, ctx)
        while True:
          try:
            record = next(records)
          except StopIteration as stopped:  # the cell is done; how its size was reached
            sample = stopped.value
            break
          if record.get("kind") == "progress":  # one work unit done; not a result to store
            seen = min(seen + 1, size - 1)
            bar.update(done_units + seen, cell=cell.id, item=record.get("item", ""))
            continue
          rd.append(cell.id, {"overrides": cell.overrides, **record})
          if record.get("kind") == "request":
            seen = min(seen + 1, size - 1)
            bar.update(done_units + seen, cell=cell.id)
        close("ok", **({"sample": sample} if sample else {}))
      except workloads.WorkloadUnavailable as e:  # data absent: skipped with its message
        close("unavailable", error=str(e))
        print(f"\ncell {cell.id} skipped: {e}", file=stream, flush=True)
      except Exception as e:  # recorded with its error; the sweep goes on
        failed += 1
        close("error", error=f"{type(e).__name__}: {e}",
              traceback=traceback.format_exc(limit=8))
        print(f"\ncell {cell.id} failed: {type(e).__name__}: {e}", file=stream, flush=True)
      done_units += size
      bar.update(done_units, cell=cell.id)
      compile_cache.release_if_crowded()  # long sweeps compile many engines
  finally:
    bar.close()
    rd.close()
  report_lib.build([rd.path], out_dir=rd.path,
                   publish_dir=config.get("publish_dir", "") if publish else "")
  print(f"# {len(todo) - failed} cells ran, {failed} failed; summary: "
        f"{rd.path / 'summary.md'}", file=stream, flush=True)
  return rd.path


MIN_UNITS = 8  # a percentile bootstrap over fewer units is too coarse to stop on


def sized_records(study, c, ctx):
  """The records of one cell: `study.run_cell(c, ctx)`'s, and where the config asks for a
  target interval width (`c.target_width` > 0) further batches `run_cell(c, ctx, batch=b)`
  (b = 1, 2, ...: new units, disjoint from the batches before) until the study's 95% interval
  of its target figure (`study.interval(records, c)`) is that narrow over at least
  min(`c.max_units`, MIN_UNITS) requests, `c.max_units` requests have run, or a batch brings
  none (the source is exhausted). Records then carry their batch.

  Returns (as the generator's value): None for a fixed size, else {"target_width", "width",
  "point", "units", "batches", "stopped": "reached" | "cap" | "exhausted"}.

  Raises:
    ValueError: a negative width, a target width without a positive `max_units` cap, or a
      study that has no interval to target (named).
  """
  import math

  target = float(c.get("target_width", 0) or 0)
  if target == 0:
    yield from study.run_cell(c, ctx)
    return None
  cap = int(c.get("max_units", 0) or 0)
  if target < 0 or cap <= 0:
    raise ValueError(f"config.target_width={target}, config.max_units={cap}: a target "
                     "interval width is positive and needs a positive cap on the requests "
                     "per cell")
  if not hasattr(study, "interval"):
    raise ValueError(f"config.target_width={target}: the {c.study!r} study has no target "
                     "figure to size cells by; set target_width=0 and a fixed size")
  kept, units, batch = [], 0, 0
  while True:
    fresh = 0
    for record in study.run_cell(c, ctx, **({"batch": batch} if batch else {})):
      if record.get("kind") == "progress":
        yield record
        continue
      fresh += record.get("kind") == "request"
      kept.append(record)
      yield {**record, "batch": batch}
    units += fresh
    point, low, high = study.interval(kept, c)
    width = high - low if not (math.isnan(low) or math.isnan(high)) else math.inf
    stopped = ("reached" if width <= target and units >= min(cap, MIN_UNITS)
               else "exhausted" if not fresh else "cap" if units >= cap else None)
    if stopped:
      return {"target_width": target, "width": width, "point": point, "units": units,
              "batches": batch + 1, "stopped": stopped}
    batch += 1


def bad_override(argv: list[str]) -> str | None:
  """The message for the first `--config.PATH=VALUE` in `argv` whose PATH the config lacks
  (None if all resolve, or if the config itself does not load: the flag parser reports that),
  naming the flag, the missing key, the fields where it was looked up and the grid's axes.
  ml_collections' own error there is a bare `AttributeError: "'temperature'"`."""
  import importlib.util

  files = [a.split("=", 1)[1] for a in argv if a.startswith("--config=")]
  if not files:
    return None
  path, _, variant = files[-1].partition(":")
  try:
    spec = importlib.util.spec_from_file_location("_study_config", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    config = module.get_config(variant) if variant else module.get_config()
  except Exception:  # the flag parser gives the config file's own error
    return None
  for arg in argv:
    if not arg.startswith("--config.") or "=" not in arg:
      continue
    keys = arg[len("--config."):].split("=", 1)[0].split(".")
    node = config
    for depth, key in enumerate(keys):
      if not hasattr(node, "keys") or key not in node:
        where = "config" + "".join(f".{k}" for k in keys[:depth])
        here = ", ".join(sorted(node.keys())) if hasattr(node, "keys") else "(not a group)"
        top = ", ".join(sorted(k for k in config.keys() if k not in ("grid", "grids")))
        try:
          axes = ", ".join(path for path, _ in sweep.axes(config)) or "none"
        except ValueError:
          axes = "unreadable"
        return (f"--config.{'.'.join(keys)}: {where} has no field {key!r}"
                + (f" (its fields: {here})" if depth and keys[0] not in ("grid", "grids")
                   else "")
                + f". The config's fields: {top}; its grid's axes: {axes}. Overrides change "
                  "fields the config declares (--config.FIELD=VALUE for every cell, "
                  "--config.grid.AXIS=(...) for a declared axis); --grid FIELD=V1,V2 adds an "
                  "axis over any field")
      node = node[key]
  return None


def main(argv) -> int:
  if len(argv) > 1:
    raise app.UsageError(f"unexpected arguments {argv[1:]}")
  if _CONFIG.value is None:
    raise app.UsageError("--config=configs/<study>.py is required")
  try:
    config = sweep.with_axes(_CONFIG.value, _GRID.value)
    run(config, results_dir=_RESULTS.value, shard=_SHARD.value, run_dir=_RUN_DIR.value,
        resume=_RESUME.value, publish=_PUBLISH.value,
        resume_across_versions=_ACROSS.value, only=_ONLY.value)
  except ValueError as e:
    print(f"error: {e}", file=sys.stderr)
    return 2
  return 0


if __name__ == "__main__":
  problem = bad_override(sys.argv[1:])
  if problem:
    print(f"error: {problem}", file=sys.stderr)
    sys.exit(2)
  app.run(main)
