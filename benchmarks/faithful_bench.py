"""What sampling_law="exact-finite" costs against "local" on large label sets, per request.

The trie paper's scale (arXiv:2608.12574): a choice over K synthetic tool names (its
Appendix C.2 pools; `experiments/studies/trie/enum_sets.tool_names`), every tokenization of
every name in the language. One prompt per task asks for the tool; each request runs
through the engine (embedded SmolLM2, jump-forward drafts, one lane, trie backend) under:

  local greedy / exact-finite greedy          (the certified best-first argmax)
  local T=1    / exact-finite T=1, tolerance   (best first, certified TV <= tolerance)

and, for the smallest K only, exact-finite T=1 over the whole trie (tolerance 0). Every
request has its own prompt, so every exact-finite request pays its whole search (the
engine's law cache never hits). Timed after one untimed request of another prompt per
setting (compiles); the peer is local decoding in the same run.

  .venv/bin/python benchmarks/faithful_bench.py [--ks 100,1000] [--tasks 4] [--write]

`--write` writes docs/results/faithful/cost.md and cost.json (`--report-from cost.json`
rewrites the report from recorded runs). The TV bound column is the certified distance to μ*
of the law sampled; greedy rows have none (their argmax is exact).
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime
import json
import os
import platform
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

TASKS = ("Send a message to the team channel on Slack.",
         "List the open issues in the GitHub repository.",
         "Delete the old invoice in Stripe.",
         "Upload the document to Google Drive.",
         "Search for the customer's payment.",
         "Create a new project in Jira.")
WARMUP_TASK = "Fetch the latest report from Datadog."  # the untimed pass (never a timed prompt)
GOAL = 2.0  # exact-finite may cost at most this many times local, per request


def parse_args(argv=None):
  ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  ap.add_argument("--ks", default="100,1000", help="label-set sizes")
  ap.add_argument("--tasks", type=int, default=4, help="prompts per K (<= %d)" % len(TASKS))
  ap.add_argument("--tolerance", type=float, default=0.01)
  ap.add_argument("--write", action="store_true")
  ap.add_argument("--note", default="", help="a sentence on the run's conditions for the "
                  "report (e.g. other jobs on the cores)")
  ap.add_argument("--report-from", default="",
                  help="rewrite the report from this cost.json (its runs), no measuring")
  args = ap.parse_args(argv)
  args.ks = [int(k) for k in args.ks.split(",")]
  if not 1 <= args.tasks <= len(TASKS):
    ap.error(f"--tasks={args.tasks} must be in [1, {len(TASKS)}]")
  return args


def settings(k: int, smallest: bool, tolerance: float):
  """(label, sampling_law, temperature, law_tolerance) of each measured setting."""
  out = [("local greedy", "local", 0.0, 0.0), ("exact-finite greedy", "exact-finite", 0.0, 0.0),
         ("local T=1", "local", 1.0, 0.0),
         (f"exact-finite T=1, tolerance {tolerance:g}", "exact-finite", 1.0, tolerance)]
  if smallest:
    out.append(("exact-finite T=1, whole trie", "exact-finite", 1.0, 0.0))
  return out


def run(llm, names, k, tasks, setting) -> list[dict]:
  """One row per task: its seconds, answer, law cost and XLA compilations (`xla_compiles`,
  `xla_compile_s`)."""
  from infernix_jax.constrain import ConstraintError
  from infernix_jax.runtime import compile_count
  label, law, temperature, tolerance = setting
  rows = []
  for i, task in enumerate(tasks):
    prompt = f"Pick the tool for this task: {task}\nAnswer with the tool name only."
    prep = llm.prepare(prompt, choice=names, sampling_law=law, temperature=temperature,
                       seed=i, max_tokens=24, law_tolerance=tolerance)
    request = dataclasses.replace(prep.request, backend="trie")
    with compile_count.counting() as compiles:
      t0 = time.perf_counter()
      try:
        res = llm.engine.generate([request])[0]
      except ConstraintError as e:  # the whole trie past its node budget
        res = e
      seconds = time.perf_counter() - t0
    if isinstance(res, ConstraintError):
      rows.append({"k": k, "setting": label, "task": i, "seconds": seconds,
                   "text": "", "error": str(res), "valid": False, "law_seconds": 0.0,
                   "law_forwards": 0, "law_tokens": 0, "law_trie_nodes": 0, "law_stop": "",
                   "law_tv_bound": 0.0, **compiles.record()})
      continue
    r = res.constraint
    rows.append({"k": k, "setting": label, "task": i, "seconds": seconds, "text": res.text,
                 "error": res.error, "valid": res.text in names, **compiles.record(),
                 "law_seconds": r.law_seconds, "law_forwards": r.law_forwards,
                 "law_tokens": r.law_tokens, "law_trie_nodes": r.law_trie_nodes,
                 "law_stop": r.law_stop, "law_tv_bound": r.law_tv_bound})
  return rows


def report(results: list[dict], args, env: dict) -> str:
  lines = ["# Cost of exact-finite against local on large label sets", "",
           f"Written by `benchmarks/faithful_bench.py --write` on {env['date']} (git "
           f"{env['git']}; {env['machine']}). Embedded SmolLM2-135M-Instruct, one lane, "
           "jump-forward drafts (K = 4), trie backend; a choice over K synthetic tool names "
           "(the trie paper's Appendix C.2 pools), every tokenization of every name counted. "
           f"{args.tasks} prompts per K, each its own request (no law-cache hits), timed after "
           "an untimed request of another prompt. Seconds are medians per request; the ratio "
           "is against local at the same temperature."
           + (f" Load average at start: {env['load']:.1f}." if "load" in env else "")
           + (f" {args.note}" if args.note else ""), "",
           "| K | setting | s/request | x local | law forwards | law tokens | trie nodes | "
           "stopped | TV bound | valid |", "|---:|---|---:|---:|---:|---:|---:|---|---:|---:|"]
  by = {}
  for r in results:
    by.setdefault((r["k"], r["setting"]), []).append(r)
  verdicts = []
  for (k, setting), rs in by.items():
    s = statistics.median(r["seconds"] for r in rs)
    peer = "local greedy" if "greedy" in setting else "local T=1"
    base = statistics.median(r["seconds"] for r in by[(k, peer)])
    errors = [r["error"] for r in rs if r["error"]]
    stops = sorted({r["law_stop"] for r in rs if r["law_stop"]})
    lines.append(
        f"| {k} | {setting} | {s:.2f} | {s / base:.1f} | "
        f"{statistics.median(r['law_forwards'] for r in rs):.0f} | "
        f"{statistics.median(r['law_tokens'] for r in rs):.0f} | "
        f"{statistics.median(r['law_trie_nodes'] for r in rs):.0f} | "
        f"{', '.join(stops) or '-'} | "
        f"{'-' if 'greedy' in setting else format(max(r['law_tv_bound'] for r in rs), '.4f')} | "
        f"{sum(r['valid'] for r in rs)}/{len(rs)}" + (f" (refused: {errors[0][:150]})"
                                                       if errors else "")
        + " |")
    if setting.startswith("exact-finite") and k == max(args.ks):
      verdicts.append((setting, s / base))
  lines += ["", f"Goal: exact-finite at most {GOAL:g}x local per request at K = 1,000. "
            f"At K = {max(args.ks)}: "
            + "; ".join(f"{name}: {ratio:.1f}x local" for name, ratio in verdicts) + ". "
            + ("Met." if verdicts and all(ratio <= GOAL for _, ratio in verdicts) else
               "Not met on this CPU: the search scores every prefix it expands with a full "
               "forward, compute-bound here (a 64-node tree-attention call costs many decode "
               "steps), while a GPU scores such a call in about the time of one decode step."),
            ""]
  return "\n".join(lines)


def main(argv=None) -> int:
  args = parse_args(argv)
  if args.report_from:
    saved = json.loads(Path(args.report_from).read_text())
    args.ks = sorted({r["k"] for r in saved["results"]})
    args.tasks = len({r["task"] for r in saved["results"]})
    return _publish(report(saved["results"], args, saved["env"]), saved, args)
  import subprocess

  from experiments.studies.trie.enum_sets import tool_names
  from infernix_jax import LLM
  from infernix_jax.runtime import compile_count
  with compile_count.counting() as warm:
    llm = LLM(None, drafter="jump", k=4, lanes=1, capacity=512, layout="unrolled")
    llm.engine.warmup(laws=True)
  tasks = TASKS[:args.tasks]
  results = []
  for k in args.ks:
    names = tool_names(k)
    for setting in settings(k, k == min(args.ks), args.tolerance):
      run(llm, names, k, (WARMUP_TASK,), setting)  # compiles; its law is never reused
      rows = run(llm, names, k, tasks, setting)
      results += rows
      print(k, setting[0], f"{statistics.median(r['seconds'] for r in rows):.2f} s/request",
            flush=True)
  git = subprocess.run(["git", "rev-parse", "--short=10", "HEAD"], capture_output=True,
                       text=True, cwd=ROOT).stdout.strip()
  env = {"date": datetime.date.today().isoformat(), "git": git,
         "machine": f"{platform.machine()}, {os.cpu_count()} CPUs", "load": os.getloadavg()[0],
         **warm.record("warmup_")}
  return _publish(report(results, args, env), {"env": env, "results": results}, args)


def _publish(text: str, raw: dict, args) -> int:
  print(text)
  if args.write:
    out = ROOT / "docs/results/faithful"
    (out / "cost.md").write_text(text)
    (out / "cost.json").write_text(json.dumps(raw, indent=1) + "\n")
  return 0


if __name__ == "__main__":
  sys.exit(main())
