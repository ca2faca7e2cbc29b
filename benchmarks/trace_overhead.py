"""What recording a generation trace costs: tokens/s of the main job with trace off and on.

One process, one engine (the embedded SmolLM2, the main job's prompt and JSON Schema, n-gram
+ jump-forward drafting): a warm pass of each mode first (the trace step compiles for every
verified width), then `--repeats` alternating off/on generations. Reports the median
tokens/s of each mode (tokens over the request's wall time, prefill included, as the CLI
prints it), the overhead, and the host seconds the trace step took; the traced and untraced
outputs must be the same tokens.

  .venv/bin/python benchmarks/trace_overhead.py [--repeats 5] [--drafter ngram] [--write]

`--write` writes docs/results/trace_overhead.md.
"""

from __future__ import annotations

import argparse
import datetime
import platform
import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def main() -> int:
  ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  ap.add_argument("--repeats", type=int, default=5, help="alternating off/on generations")
  ap.add_argument("--drafter", default="ngram")
  ap.add_argument("--k", type=int, default=4)
  ap.add_argument("--max-tokens", type=int, default=160)
  ap.add_argument("--write", action="store_true")
  args = ap.parse_args()

  import jax

  import infernix_jax as ij
  from infernix_jax.cli.generate import DEMO_PROMPT, DEMO_SCHEMA
  from infernix_jax.runtime import compile_count

  with compile_count.counting() as warm:
    llm = ij.LLM(drafter=args.drafter, k=args.k, capacity=1024)
    llm.engine.warmup(trace=True)  # the timed runs trace every other generation
  stats = llm.engine.host.stats

  def one(trace: bool):
    before = stats["trace_seconds"]
    c = llm.generate(DEMO_PROMPT, json_schema=DEMO_SCHEMA, max_tokens=args.max_tokens,
                     trace=trace)
    return c, stats["trace_seconds"] - before

  with compile_count.counting() as warm_pass:
    base, _ = one(False)
    traced, _ = one(True)
  warm += warm_pass
  if traced.token_ids != base.token_ids:
    print("error: the traced output differs from the untraced one", file=sys.stderr)
    return 1
  rows = {False: [], True: []}
  trace_s = []
  timed = compile_count.CompileCount()
  for _ in range(args.repeats):
    for mode in (False, True):
      with compile_count.counting() as compiles:
        c, seconds = one(mode)
      timed += compiles
      assert c.token_ids == base.token_ids
      rows[mode].append(c.stats["tokens_per_second"])
      if mode:
        trace_s.append(seconds / max(c.stats["rounds"], 1))
  off, on = statistics.median(rows[False]), statistics.median(rows[True])
  overhead = 1 - on / off
  per_round_ms = 1e3 * statistics.median(trace_s)
  command = "benchmarks/trace_overhead.py " + " ".join(sys.argv[1:])
  text = "\n".join([
      "# Trace overhead",
      "",
      "Tokens/s of the main job (the embedded SmolLM2-135M, its JSON Schema, "
      f"{llm.drafter.name} K = {llm.drafter.k}, greedy, {len(base.token_ids)} tokens in "
      f"{base.stats['rounds']} rounds) with `trace=True` and without, in one process on one "
      f"engine: {args.repeats} alternating generations per mode after a warm pass of each; "
      "tokens over the request's wall time (prefill included). Traced and untraced outputs "
      "are the same tokens.",
      "",
      "| trace | median tok/s | runs (tok/s) |",
      "|---|---|---|",
      f"| off | {off:.2f} | {', '.join(f'{x:.2f}' for x in rows[False])} |",
      f"| on | {on:.2f} | {', '.join(f'{x:.2f}' for x in rows[True])} |",
      "",
      f"Overhead: {overhead:.1%} of tokens/s. The trace step's host span is "
      f"{per_round_ms:.2f} ms per round (median), but most of it waits for the round's verify "
      "and Finish, which commit would wait for anyway. Untraced requests run no trace step.",
      "",
      f"XLA compilation: warm-up (`warmup(trace=True)` and the warm pass) {warm.compiles} "
      f"programs in {warm.seconds:.1f} s; timed generations {timed.compiles} programs in "
      f"{timed.seconds:.1f} s.",
      "",
      f"Machine: {platform.machine()}, {jax.devices()[0].platform} "
      f"({jax.device_count()} device), jax {jax.__version__}, {datetime.date.today()}.",
      f"Command: `.venv/bin/python {command.strip()}`",
      "",
  ])
  print(text)
  if args.write:
    out = ROOT / "docs/results/trace_overhead.md"
    out.write_text(text)
    print(f"wrote {out}", file=sys.stderr)
  return 0


if __name__ == "__main__":
  sys.exit(main())
