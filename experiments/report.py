"""Rebuilds a study's summary.md and plots from one or more run directories (shards merged).

  python -m experiments.report DIR [DIR ...] [--out=DIR] [--publish]
  python -m experiments.report --index      # docs/results/README.md, the index of results

The directories must hold the same config (the shards of one sweep, or runs of some of its
cells again: `experiments.run --only`); each cell's records come from the last directory, in
the order given, that closed it successfully (run directories are named by their start time, so
a shell glob lists them oldest first and a cell run again supersedes its earlier run). The
summary goes to --out (default: the first directory); --publish also writes it to the config's
publish_dir.
"""

from __future__ import annotations

import collections
import json
import re
import shutil
import sys
from pathlib import Path

from absl import app, flags

from infernix_jax._extras import missing

try:
  import ml_collections
except ImportError as e:
  raise missing("ml_collections", "study", "the study runner") from e

from experiments import studies
from experiments.runner import store, sweep



def merge(run_dirs: list[Path]) -> tuple[dict, list[dict], list[dict]]:
  """(config dict, records of successful cells in sweep order, records closing cells that
  failed or whose data was absent). A cell closed successfully in several directories takes
  the records of the last of them (a cell run again supersedes its earlier run).

  Raises:
    ValueError: a directory without a config, or directories with different configs.
  """
  configs, kept, failures, taken = [], [], [], set()
  for d in reversed(run_dirs):  # the last directory that closed a cell gives its records
    path = Path(d) / store.CONFIG
    if not path.exists():
      raise ValueError(f"{d}: no {store.CONFIG}; not a run directory")
    configs.append(json.loads(path.read_text()))
    records = store.read_records(Path(d))
    ok = store.closed_ok(records) - taken
    kept += [r for r in records if r["cell"] in ok]
    failures += [r for r in records if r.get("kind") == "cell"
                 and r.get("status") in ("error", "unavailable")
                 and r["cell"] not in taken | store.closed_ok(records)]
    taken |= ok
  configs.reverse()
  if any(store.canonical(c) != store.canonical(configs[0]) for c in configs[1:]):
    raise ValueError("the run directories hold different configs: merge shards of one sweep")
  failures = [f for f in failures if f["cell"] not in taken]
  order = {c.id: c.index for c in sweep.cells(ml_collections.ConfigDict(configs[0]))}
  kept.sort(key=lambda r: order.get(r["cell"], len(order)))  # sweep order, whatever the shards
  return configs[0], kept, failures


def _header(config: dict, run_dirs, records, failures) -> str:
  env = json.loads((Path(run_dirs[0]) / store.ENVIRONMENT).read_text()) \
      if (Path(run_dirs[0]) / store.ENVIRONMENT).exists() else {}
  cells = sorted({r["cell"] for r in records if r.get("kind") == "cell"})
  total = len(sweep.cells(ml_collections.ConfigDict(config)))
  git = env.get("git", {})
  dev = env.get("device", {})
  pk = env.get("packages", {})
  lines = [f"# Study: {config.get('title') or config['study']}", "",
           *([f"**Question.** {config['question']}", ""] if config.get("question") else []),
           f"Written by `python -m experiments.report` from {len(run_dirs)} run "
           f"director{'y' if len(run_dirs) == 1 else 'ies'}; {len(cells)} of {total} cells done, "
           f"{len(failures)} failed. The resolved config is each run's config.json.", "",
           f"Environment: git {git.get('revision', '?')[:10]}{' (dirty)' if git.get('dirty') else ''}; "
           f"{dev.get('platform', '?')} ({dev.get('kind', '?')}) x{dev.get('count', '?')}, "
           f"{env.get('host', {}).get('cpus', '?')} CPUs; jax {pk.get('jax')}, "
           f"xgrammar {pk.get('xgrammar')}, llguidance {pk.get('llguidance')}.", ""]
  versions = collections.Counter(r.get("version") or "unrecorded" for r in records
                                 if r.get("kind") == "cell")
  if len(versions) > 1:  # a resume across versions, or shards run by different code
    lines += [f"**Cells from {len(versions)} code versions**: "
              + ", ".join(f"{v} ({n} cells)" for v, n in versions.most_common())
              + "; each cell's closing line in runs.jsonl names its version.", ""]
  sized = [r["sample"] for r in records if r.get("kind") == "cell" and r.get("sample")]
  if sized:  # cells sized by a target interval width
    why = collections.Counter(s["stopped"] for s in sized)
    lines += [f"Cell sizes: grown in batches until the 95% interval of the study's target "
              f"figure was {sized[0]['target_width']:g} wide or {config.get('max_units')} "
              f"requests had run (the batch that reaches the cap runs whole: "
              f"{min(s['units'] for s in sized)}-{max(s['units'] for s in sized)} requests a "
              f"cell here): {why['reached']} cells reached the width, {why['cap']} hit the "
              f"cap, {why['exhausted']} ran out of prompts (widest left "
              f"{max(s['width'] for s in sized):.3g}; each cell's closing line records its "
              "width, requests and batches).", ""]
  lines += _remaining(config, run_dirs, set(cells))
  if failures:
    lines += ["## Cells not done", "", "| cell | status | error |", "|---|---|---|"]
    lines += [f"| {f['cell']} | {f['status']} | {f['error'][:200].replace('|', '/')} |"
              for f in failures]
    lines.append("")
  return "\n".join(lines)


def shard_count(run_dirs) -> int:
  """n of the `-shard<i>of<n>` run directories merged (1 when none is a shard)."""
  counts = {int(m.group(1)) for d in run_dirs
            if (m := re.search(r"-shard\d+of(\d+)$", Path(d).name))}
  if len(counts) > 1:
    raise ValueError(f"the run directories are shards of {sorted(counts)} ways of splitting "
                     "the sweep; merge the shards of one split")
  return counts.pop() if counts else 1


def _remaining(config: dict, run_dirs, done: set) -> list[str]:
  """Lines listing the shards whose cells are not all done, with the command that runs each
  (empty when every cell is done)."""
  all_cells = sweep.cells(ml_collections.ConfigDict(config))
  if len(done) >= len(all_cells):
    return []
  n = shard_count(run_dirs)
  rows = []
  for i in range(n):
    left = [c for c in sweep.shard(all_cells, i, n) if c.id not in done]
    if left:
      rows.append(f"| {i}/{n} | {len(left)} | `--shard={i}/{n}` |")
  return ["## Cells still to run", "",
          f"{len(all_cells) - len(done)} of {len(all_cells)} cells have not run. Each shard "
          "below resumes where it stopped when the study's command is run again with its "
          "`--shard` (the run directories of a shard are found by config and shard under "
          "`--results_dir`: copy committed shard directories to `results/<study>/` first); "
          "merge every shard's directory with `python -m experiments.report DIR ... "
          "--publish`.", "",
          "| shard | cells left | flag |", "|---|---:|---|", *rows, ""]


def build(run_dirs, *, out_dir=None, publish_dir: str = "") -> Path:
  """Writes summary.md (+ plots) for the merged run directories; returns its path."""
  run_dirs = [Path(d) for d in run_dirs]
  config_dict, records, failures = merge(run_dirs)
  config = ml_collections.ConfigDict(config_dict)
  out = Path(out_dir or run_dirs[0])
  out.mkdir(parents=True, exist_ok=True)
  study = studies.get(config.study)
  body = study.summarize(records, config, out)
  summary = out / "summary.md"
  summary.write_text(_header(config_dict, run_dirs, records, failures) + "\n" + body.rstrip()
                     + "\n")
  if publish_dir:
    dest = Path(publish_dir)
    dest.mkdir(parents=True, exist_ok=True)
    for f in [summary, *sorted(out.glob("*.png"))]:
      shutil.copyfile(f, dest / f.name)
    if (out / "traces").is_dir():  # a study's trace pages, linked from its summary
      shutil.copytree(out / "traces", dest / "traces", dirs_exist_ok=True)
  return summary


def main(argv) -> int:
  if flags.FLAGS.index:
    if len(argv) > 1:
      raise app.UsageError("--index takes no run directories")
    from experiments.runner import index

    try:
      print(index.build())
    except ValueError as e:
      print(f"error: {e}", file=sys.stderr)
      return 2
    return 0
  if len(argv) < 2:
    raise app.UsageError("give one or more run directories (or --index)")
  try:
    dirs = [Path(a) for a in argv[1:]]
    config = json.loads((dirs[0] / store.CONFIG).read_text()) \
        if (dirs[0] / store.CONFIG).exists() else {}
    path = build(dirs, out_dir=flags.FLAGS.out or None,
                 publish_dir=config.get("publish_dir", "") if flags.FLAGS.publish else "")
  except ValueError as e:
    print(f"error: {e}", file=sys.stderr)
    return 2
  print(path)
  return 0


if __name__ == "__main__":
  flags.DEFINE_string("out", "", "where summary.md and plots go (default: the first DIR)")
  flags.DEFINE_bool("publish", False, "also write them to the config's publish_dir")
  flags.DEFINE_bool("index", False, "write docs/results/README.md: every published study with "
                    "its question, headline figure, plots, command, date and revision")
  app.run(main)
