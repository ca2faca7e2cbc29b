"""Programs `Engine.warmup` compiles, and its seconds, per engine, each in a fresh process.

Every configuration runs in its own Python process with JAX's persistent compilation cache
off, so each program is compiled, never loaded. It builds the engine on the embedded SmolLM2
(capacity 2048, K = 4 where a drafter drafts), then counts JAX's backend compiles
(`runtime.compile_count`) around `engine.warmup(prompt_lengths=[60])`, and prints the
programs, the warm-up's wall seconds and how many programs each jitted function made.

  .venv/bin/python benchmarks/warmup_programs.py                 # the default configurations
  .venv/bin/python benchmarks/warmup_programs.py --config ngram+jump:1 --config none:1

A configuration is DRAFTER[+jump]:LANES; DRAFTER is a registered drafter name ("none": no
drafter). `--log` also prints JAX's line per compile (the function and its argument shapes).
`--narrow 0,1` sets the verified widths below K of host drafters (`_round.NARROW_WIDTHS`;
"" for K alone).

`--tradeoff 0,1,2,3 --tradeoff 0 ...` instead times the main job (`make run`'s prompt and
schema, greedy, 160 tokens) on one engine (SmolLM2, n-gram + jump-forward, K = 4, 1 lane)
under each choice of narrow widths, interleaved in one process (a first untimed run per choice compiles its shapes),
and prints each choice's median decode tokens/s over `--repeats` runs.
"""

from __future__ import annotations

import argparse
import collections
import dataclasses
import json
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_CONFIGS = ("ngram+jump:1", "ngram+jump:4", "none:1")
PROMPT_LENGTH = 60


def widths(text: str) -> tuple[int, ...]:
  """"0,1,2" -> (0, 1, 2); "" -> ()."""
  return tuple(int(w) for w in text.split(",") if w.strip())


def measure(config: str, *, capacity: int, k: int, log: bool, narrow: str | None) -> dict:
  """Builds the engine of `config` and warms it up in this process -> its record."""
  import jax

  from infernix_jax.runtime import _round, compile_count
  from infernix_jax.runtime.build import EngineSpec, build_engine

  if narrow is not None:
    _round.NARROW_WIDTHS = widths(narrow)
  if log:
    jax.config.update("jax_log_compiles", True)
  drafter, lanes = config.split(":")
  jump = drafter.endswith("+jump")
  name = drafter.removesuffix("+jump")
  options = {} if name == "none" else {"k": k}
  spec = EngineSpec(drafter=name, drafter_options=options, jump_forward=jump, lanes=int(lanes),
                    capacity=capacity, compile_cache="")
  engine = build_engine(spec).engine
  with compile_count.counting() as count:
    t0 = time.perf_counter()
    engine.warmup(prompt_lengths=[PROMPT_LENGTH])
    seconds = time.perf_counter() - t0
  return {"config": config, "narrow": list(_round.NARROW_WIDTHS),
          "programs": count.compiles, "seconds": round(seconds, 2),
          "compile_seconds": round(count.seconds, 2),
          "by_function": dict(collections.Counter(count.names).most_common())}


def tradeoff(choices: list[str], *, k: int, repeats: int) -> None:
  """Median tokens/s of the main job at 1 lane under each choice of narrow widths."""
  import statistics

  from infernix_jax.chat_template import frame_prompt
  from infernix_jax.cli.generate import DEMO_PROMPT, DEMO_SCHEMA
  from infernix_jax.constrain import OutputConstraint
  from infernix_jax.runtime import _round
  from infernix_jax.runtime.build import EngineSpec, build_engine, load_target
  from infernix_jax.runtime.types import GenerationRequest

  spec = EngineSpec(drafter="ngram", drafter_options={"k": k}, jump_forward=True, lanes=1)
  target = load_target(spec)
  ids = target.tokenizer.encode(frame_prompt(target.tokenizer, DEMO_PROMPT))
  max_tokens = 160  # the CLI's default, as `make run` runs it
  capacity = -(-(len(ids) + max_tokens + k + 1) // 64) * 64  # the CLI's capacity
  engine = build_engine(dataclasses.replace(spec, capacity=capacity), target=target).engine
  constraint = OutputConstraint.json_schema(DEMO_SCHEMA)

  def run() -> tuple[float, int, list[int]]:
    t0 = time.perf_counter()
    [result] = engine.generate([GenerationRequest(ids, max_tokens=max_tokens,
                                                  constraint=constraint)])
    return time.perf_counter() - t0, len(result.token_ids), list(result.token_ids)

  rates = {c: [] for c in choices}
  tokens = {}
  for choice in choices:  # a first run compiles every shape the timed ones reach
    _round.NARROW_WIDTHS = widths(choice)
    tokens[choice] = run()[2]
  assert len({tuple(t) for t in tokens.values()}) == 1, "tokens differ between choices"
  for _ in range(repeats):
    for choice in choices:
      _round.NARROW_WIDTHS = widths(choice)
      seconds, n, _ = run()
      rates[choice].append(n / seconds)
  for choice in choices:
    print(f"narrow widths {{{choice}}} + K: median {statistics.median(rates[choice]):6.2f} "
          f"tok/s over {repeats} runs  (min {min(rates[choice]):.2f}, max "
          f"{max(rates[choice]):.2f})")


def main() -> None:
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument("--config", action="append", help="DRAFTER[+jump]:LANES (repeat)")
  parser.add_argument("--capacity", type=int, default=2048, help="KV positions per lane")
  parser.add_argument("--k", type=int, default=4, help="drafts per round")
  parser.add_argument("--log", action="store_true", help="print JAX's line per compile")
  parser.add_argument("--narrow", help="verified widths below K of host drafters, e.g. 0,1")
  parser.add_argument("--tradeoff", action="append", help="time the main job under these "
                      "narrow widths (repeat: one choice each)")
  parser.add_argument("--repeats", type=int, default=5, help="timed runs per --tradeoff choice")
  parser.add_argument("--child", help=argparse.SUPPRESS)  # one configuration, in this process
  args = parser.parse_args()
  if args.tradeoff:
    tradeoff(args.tradeoff, k=args.k, repeats=args.repeats)
    return
  if args.child:
    print(json.dumps(measure(args.child, capacity=args.capacity, k=args.k, log=args.log,
                             narrow=args.narrow)))
    return
  env = dict(os.environ, INFERNIX_JAX_COMPILE_CACHE="")
  for config in args.config or DEFAULT_CONFIGS:
    cmd = [sys.executable, __file__, "--child", config, "--capacity", str(args.capacity),
           "--k", str(args.k)] + (["--log"] if args.log else []) + (
               ["--narrow", args.narrow] if args.narrow is not None else [])
    out = subprocess.run(cmd, env=env, cwd=ROOT, capture_output=True, text=True, check=False)
    if args.log:
      sys.stderr.write(out.stderr)
    if out.returncode:
      sys.stderr.write(out.stderr)
      raise SystemExit(f"{config}: the child process failed (exit {out.returncode})")
    record = json.loads(out.stdout.strip().splitlines()[-1])
    print(f"{record['config']:>16}  narrow {record['narrow']}  programs {record['programs']:3d}  warm-up "
          f"{record['seconds']:6.1f} s  (compiling {record['compile_seconds']:.1f} s)")
    for fn, n in record["by_function"].items():
      print(f"{'':18}{n:3d}  {fn}")
    sys.stdout.flush()


if __name__ == "__main__":
  main()
