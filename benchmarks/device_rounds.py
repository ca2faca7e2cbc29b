"""Rounds without the host: tokens/s with `device_rounds` N against N = 1, in one run.

The embedded SmolLM2, unconstrained prompts (the main job's prompt, greedy), the stages
bridge. Each configuration (lanes x drafter) builds one engine per N, warms it up on the
timed requests, then alternates timed runs of the N engines (`--repeats` each) and reports
the median tokens/s, the rounds per dispatch, and whether every N gave the same tokens. A
script, not a study config: it compares engine options of one build inside one process.

  .venv/bin/python benchmarks/device_rounds.py [--rounds 1,8] [--configs 1:none,4:none]
      [--max-tokens 64] [--repeats 3] [--write]

`--write` writes docs/results/device_rounds.md.
"""

from __future__ import annotations

import argparse
import datetime
import os
import platform
import statistics
import sys
import time
from pathlib import Path

from _timing import machine

ROOT = Path(__file__).resolve().parents[1]
REPORT = ROOT / "docs/results/device_rounds.md"


def main() -> int:
  ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  ap.add_argument("--rounds", default="1,8", help="comma-separated N (the first: baseline)")
  ap.add_argument("--configs", default="1:none,4:none", help="comma-separated lanes:drafter")
  ap.add_argument("--max-tokens", type=int, default=64)
  ap.add_argument("--repeats", type=int, default=3)
  ap.add_argument("--write", action="store_true")
  args = ap.parse_args()

  import jax
  from infernix_jax.chat_template import frame_prompt
  from infernix_jax.cli.generate import DEMO_PROMPT
  from infernix_jax.runtime import GenerationRequest
  from infernix_jax.runtime.build import EngineSpec, build_engine, load_target

  ns = [int(x) for x in args.rounds.split(",")]
  start = datetime.datetime.now(datetime.timezone.utc)
  load0 = os.getloadavg()[0]
  target = load_target(EngineSpec())
  prompt = target.tokenizer.encode(frame_prompt(target.tokenizer, DEMO_PROMPT))
  rows = []
  for part in args.configs.split(","):
    lanes, _, drafter = part.partition(":")
    lanes, drafter = int(lanes), drafter or "none"
    engines = {n: build_engine(EngineSpec(drafter=drafter, lanes=lanes, capacity=1024,
                                          device_rounds=n), target=target).engine
               for n in ns}

    def requests():
      return [GenerationRequest(prompt, max_tokens=args.max_tokens) for _ in range(lanes)]

    tokens, rates, per_dispatch = {}, {n: [] for n in ns}, {}
    for n, eng in engines.items():
      eng.generate(requests())  # compiles every program of the timed runs
    for _ in range(args.repeats):
      for n, eng in engines.items():
        before = dict(eng.stats)
        t0 = time.perf_counter()
        results = eng.generate(requests())
        seconds = time.perf_counter() - t0
        count = sum(len(r.token_ids) for r in results)
        rates[n].append(count / seconds)
        tokens.setdefault(n, [r.token_ids for r in results])
        rounds = eng.stats["rounds"] - before.get("rounds", 0)
        loops = eng.stats["device_loops"] - before.get("device_loops", 0)
        per_dispatch[n] = rounds / max(loops, 1) if loops else 1.0
    base = statistics.median(rates[ns[0]])
    for n in ns:
      rate = statistics.median(rates[n])
      rows.append({"lanes": lanes, "drafter": drafter, "n": n, "tok_s": rate,
                   "ratio": rate / base, "per_dispatch": per_dispatch[n],
                   "same": tokens[n] == tokens[ns[0]]})
      print(rows[-1], flush=True)
  load1 = os.getloadavg()[0]
  lines = [
      "# Rounds without the host: N rounds per dispatch against one",
      "",
      f"Script: `benchmarks/device_rounds.py --rounds {args.rounds} --configs {args.configs} "
      f"--max-tokens {args.max_tokens} --repeats {args.repeats}`. {start:%Y-%m-%d %H:%M} UTC, "
      f"{machine()}, {platform.machine()}, {jax.devices()[0].platform}, jax {jax.__version__}; "
      f"load average {load0:.1f} at start, {load1:.1f} at end (the machine is shared: read "
      "the ratios, measured in the same run). Embedded SmolLM2-135M, the main job's prompt "
      "unconstrained, greedy, the stages bridge; median tokens/s of the timed runs.",
      "",
      "| lanes | drafter | N | tokens/s | vs N = 1 | rounds per dispatch | same tokens |",
      "|---:|---|---:|---:|---:|---:|---|",
  ]
  for r in rows:
    lines.append(f"| {r['lanes']} | {r['drafter']} | {r['n']} | {r['tok_s']:.1f} | "
                 f"{r['ratio']:.2f} | {r['per_dispatch']:.1f} | "
                 f"{'yes' if r['same'] else 'NO'} |")
  one = [r for r in rows if r["lanes"] == 1 and r["drafter"] == "none" and r["n"] != ns[0]]
  if one:
    best = max(one, key=lambda r: r["ratio"])
    lines += ["", f"Goal (unconstrained greedy, 1 lane, N rounds per dispatch >= 1.1x N = 1): "
              f"N = {best['n']} at {best['ratio']:.2f}x, "
              f"{'met' if best['ratio'] >= 1.1 else 'missed'}."]
  text = "\n".join(lines) + "\n"
  print(text)
  if args.write:
    REPORT.write_text(text)
    print(f"wrote {REPORT}")
  return 0 if all(r["same"] for r in rows) else 1


if __name__ == "__main__":
  sys.exit(main())
