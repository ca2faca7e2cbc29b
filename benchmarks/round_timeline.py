"""Timeline of constrained rounds on the `stages` bridge: host time per round, split into the
part hidden behind device work and the part the device waited for.

Each configuration (lanes x drafter x constraint backend) runs the same constrained
generations twice on the embedded SmolLM2 with a `Timeline`:
  overlapped -- the engine as it runs (device steps dispatch asynchronously, the host
                 computes lookahead masks while the target's verify runs);
  serial     -- every device step is waited for before the next host step (no overlap),
                 which also gives each device step's own time.
Over all rounds: the host's spans (begin, propose, draft wait, lookahead, upload, commit) and
the device's busy time, the serial run's `dispatch:*` spans (the same rounds: the two runs
produce identical tokens, checked). The device waited for `rounds (overlapped) - device busy
(serial)`: what no device work covered (host steps, launches, reads); host time minus that ran
hidden behind the device. Ordinary decoding dispatches the next round's forward phase before
the host's commit (`_bridges.Prefetch`), so its commit is host time the device does not wait
for.

Workload: the main job's demo schema plus JSONSchemaBench schemas of the shared data chosen
for their slow masks (docs/results/backend_order.md: the slowest per mask for xgrammar).

  .venv/bin/python benchmarks/round_timeline.py [--configs 1:none,1:ngram,4:none,4:ngram]
      [--backends llguidance,xgrammar] [--max-tokens 32] [--write]

`--write` writes docs/results/round_timeline.md.
"""

from __future__ import annotations

import argparse
import collections
import datetime
import os
import platform
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT / "../shared/data/jsonschemabench/data"
# the slow tail (backend_order.md: max ms per mask for xgrammar 2594 / 312 / 294) and one
# ordinary schema
SCHEMA_FILES = ("Github_easy/o9861.json", "Github_medium/o28201.json",
                "Github_trivial/o48167.json", "Github_trivial/o10082.json")
HOST_SPANS = ("begin", "propose", "draft wait", "lookahead", "upload", "commit")


def workloads(lanes: int):
  """(prompt, schema) pairs for `lanes` lanes: the main job's demo, then the schemas present,
  repeated in order."""
  from infernix_jax.cli.generate import DEMO_PROMPT, DEMO_SCHEMA
  items = [(DEMO_PROMPT, DEMO_SCHEMA)]
  for name in SCHEMA_FILES:
    path = DATA / name
    if path.exists():
      text = path.read_text()
      items.append((f"Reply with JSON matching this schema: {text}", text))
  if lanes == 1:  # one lane: the slowest schema (the demo's masks are cheap everywhere)
    items = items[1:] or items
  return [items[i % len(items)] for i in range(lanes)]


def per_round(timeline) -> list[dict]:
  """{name: seconds} per round; "<name>@" the span's first start."""
  rounds = collections.defaultdict(dict)
  for r, name, start, end in timeline.spans:
    row = rounds[r]
    row.setdefault("_t0", start)
    row[name] = row.get(name, 0.0) + end - start
    row.setdefault(f"{name}@", start)
    row["_t1"] = end
  out = []
  for r in sorted(rounds):
    row = rounds[r]
    row["round"] = row["_t1"] - row["_t0"]
    out.append(row)
  return out


def device_busy(row: dict) -> float:
  """A serial round's device time: its `dispatch:*` spans (each waited for)."""
  return sum(v for k, v in row.items() if k.startswith("dispatch:") and not k.endswith("@"))


def host_time(row: dict) -> float:
  return sum(row.get(name, 0.0) for name in HOST_SPANS)


def measure(lanes: int, drafter: str, backend: str, args) -> dict:
  """One configuration's overlapped and serial runs -> its summary row."""
  from infernix_jax import constrain as ic
  from infernix_jax.runtime import GenerationRequest, Timeline, compile_count
  from infernix_jax.runtime.build import EngineSpec, build_engine

  built = build_engine(EngineSpec(layout=args.layout, drafter=drafter,
                                  drafter_options={"k": args.k} if drafter != "none" else {},
                                  lanes=lanes, capacity=1024, backend=backend))
  engine, tok = built.engine, built.tokenizer
  items = workloads(lanes)
  prompts = [tok.encode(tok.apply_chat_template([{"role": "user", "content": p}],
                                                add_generation_prompt=True))
             for p, _ in items]
  specs = [ic.OutputConstraint.json_schema(s) for _, s in items]

  def requests():
    return [GenerationRequest(p, max_tokens=args.max_tokens, constraint=s)
            for p, s in zip(prompts, specs)]

  with compile_count.counting():
    engine.warmup()
    engine.generate(requests())  # grammars compiled, every shape of the timed runs built
  rows = {"overlapped": [], "serial": []}
  tokens, walls = {}, collections.defaultdict(list)
  for _ in range(args.repeats):
    for kind in rows:
      timeline = Timeline(serial=kind == "serial")
      engine.timeline = timeline
      t0 = time.perf_counter()
      results = engine.generate(requests())
      walls[kind].append(time.perf_counter() - t0)
      engine.timeline = None
      rows[kind].append(per_round(timeline))
      tokens.setdefault(kind, [r.token_ids for r in results])
  # The same engine without this round's overlap (no prefetched forward, lanes on one thread):
  # the "before" of the same sitting.
  prefetch, threads = engine._prefetch, engine.host.lane_threads
  engine._prefetch, engine.host.lane_threads = None, 0
  before = []
  for _ in range(args.repeats):
    t0 = time.perf_counter()
    results = engine.generate(requests())
    before.append(time.perf_counter() - t0)
    same_before = [r.token_ids for r in results] == tokens["overlapped"]
  engine._prefetch, engine.host.lane_threads = prefetch, threads
  # Totals over the runs (a prefetched forward moves device work from one round into the
  # round before it, so rounds are not paired one by one).
  n_rounds = sum(len(run) for run in rows["overlapped"])
  total = sum(r["round"] for run in rows["overlapped"] for r in run)
  busy = sum(device_busy(r) for run in rows["serial"] for r in run)
  host = sum(host_time(r) for run in rows["overlapped"] for r in run)
  waited = max(0.0, total - busy)
  n_tokens = sum(map(len, tokens["overlapped"]))
  return {
      "lanes": lanes, "drafter": drafter, "backend": backend, "rounds": n_rounds // args.repeats,
      "tokens": n_tokens, "same": tokens["overlapped"] == tokens["serial"],
      "round_ms": 1e3 * total / n_rounds, "busy_ms": 1e3 * busy / n_rounds,
      "host_ms": 1e3 * host / n_rounds, "hidden_ms": 1e3 * max(0.0, host - waited) / n_rounds,
      "waited_ms": 1e3 * waited / n_rounds, "waited_frac": waited / max(total, 1e-12),
      "lookahead_ms": 1e3 * statistics.fmean(r.get("lookahead", 0.0)
                                             for run in rows["overlapped"] for r in run),
      "commit_ms": 1e3 * statistics.fmean(r.get("commit", 0.0)
                                          for run in rows["overlapped"] for r in run),
      "begin_ms": 1e3 * statistics.fmean(r.get("begin", 0.0) + r.get("propose", 0.0)
                                         for run in rows["overlapped"] for r in run),
      "wall_overlapped": statistics.median(walls["overlapped"]),
      "wall_before": statistics.median(before), "same_before": same_before,
      "wall_serial": statistics.median(walls["serial"]),
  }


def main() -> int:
  ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  ap.add_argument("--configs", default="1:none,1:ngram,4:none,4:ngram",
                  help="comma-separated lanes:drafter")
  ap.add_argument("--backends", default="llguidance,xgrammar")
  ap.add_argument("--max-tokens", type=int, default=32)
  ap.add_argument("--k", type=int, default=4)
  ap.add_argument("--layout", default="unrolled")
  ap.add_argument("--repeats", type=int, default=1, help="overlapped/serial run pairs")
  ap.add_argument("--write", action="store_true")
  args = ap.parse_args()

  import jax
  configs = []
  for part in args.configs.split(","):
    lanes, _, drafter = part.partition(":")
    configs.append((int(lanes), drafter or "none"))
  out = []
  t_start = datetime.datetime.now(datetime.timezone.utc)
  load0 = os.getloadavg()[0]
  for backend in args.backends.split(","):
    for lanes, drafter in configs:
      row = measure(lanes, drafter, backend, args)
      print(row, flush=True)
      out.append(row)
  load1 = os.getloadavg()[0]
  schemas = ", ".join(f"`{s}`" for s in SCHEMA_FILES if (DATA / s).exists())
  lines = [
      "# Round timeline on the stages bridge: host time hidden and host time the device "
      "waited for",
      "",
      f"Script: `benchmarks/round_timeline.py --configs {args.configs} --backends "
      f"{args.backends} --max-tokens {args.max_tokens} --k {args.k} --layout {args.layout} "
      f"--repeats {args.repeats}`. {t_start:%Y-%m-%d %H:%M} UTC, {platform.machine()}, "
      f"{os.cpu_count()} CPUs, {jax.devices()[0].platform}, jax {jax.__version__}; load "
      f"average {load0:.1f} at start, {load1:.1f} at end. Embedded SmolLM2-135M, JSON Schema "
      f"constrained: the main job's schema (4 lanes) and {schemas} (1 lane: the first; "
      "n-gram drafters with jump-forward).",
      "",
      "Per round (totals over the runs / rounds): the overlapped rounds' wall time; device "
      "busy, the same rounds' device steps in the serial run; host, the overlapped rounds' "
      "host spans (begin, propose, draft wait, lookahead, upload, commit); waited, rounds "
      "minus device busy (time no device work covered); hidden, host minus waited. Wall: "
      "median seconds of the generation; no overlap: the same engine with the next forward "
      "not prefetched and every lane's grammar work on one thread (what the engine did "
      "before), in the same sitting.",
      "",
      "| lanes | drafter | backend | rounds | round ms | device busy ms | host ms | lookahead "
      "ms | commit ms | begin + propose ms | hidden ms | waited ms | waited / round | wall s "
      "| wall s, no overlap | speedup | same tokens |",
      "|---:|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|",
  ]
  for r in out:
    lines.append(
        f"| {r['lanes']} | {r['drafter']} | {r['backend']} | {r['rounds']} | "
        f"{r['round_ms']:.1f} | {r['busy_ms']:.1f} | {r['host_ms']:.1f} | "
        f"{r['lookahead_ms']:.1f} | {r['commit_ms']:.1f} | {r['begin_ms']:.1f} | "
        f"{r['hidden_ms']:.1f} | {r['waited_ms']:.1f} | {100 * r['waited_frac']:.0f}% | "
        f"{r['wall_overlapped']:.2f} | {r['wall_before']:.2f} | "
        f"{r['wall_before'] / r['wall_overlapped']:.2f} | "
        f"{'yes' if r['same'] and r['same_before'] else 'NO'} |")
  lines += ["", "Goal: the device waits for at most 10% of a round, at 1 and 4 lanes, both "
            "backends. " + "; ".join(
                f"{r['lanes']} lane(s) {r['drafter']} {r['backend']}: "
                f"{'met' if r['waited_frac'] <= 0.10 else 'missed'}" for r in out) + "."]
  text = "\n".join(lines) + "\n"
  print(text)
  if args.write:
    path = ROOT / "docs/results/round_timeline.md"
    path.write_text(text)
    print(f"wrote {path}")
  return 0 if all(r["same"] and r["same_before"] for r in out) else 1


if __name__ == "__main__":
  sys.exit(main())
