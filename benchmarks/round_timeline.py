"""Timeline of constrained rounds on the `stages` bridge: how much host mask work overlap hides.

The same constrained generations run twice on the embedded SmolLM2 with a `Timeline`:
  overlapped -- the engine as it runs (device steps dispatch asynchronously, the host
                 computes lookahead masks while the target's verify runs);
  serial     -- every device step is waited for before the next host step (no overlap),
                 which also gives each device step's own time.
Per round it reports the spans (begin, propose, verify, draft wait, lookahead, upload, finish,
commit) and the hidden host work: the part of the lookahead that ran while the verify was
still running (overlapped verify start + serial verify time - lookahead start, clamped to
[0, lookahead]), plus the round-time saving, serial minus overlapped.

  .venv/bin/python benchmarks/round_timeline.py [--lanes 1] [--max-tokens 48] [--write]

`--write` writes docs/results/round_timeline.md.
"""

from __future__ import annotations

import argparse
import collections
import datetime
import platform
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT / "../shared/data/jsonschemabench/data/Github_trivial"
SCHEMA_FILES = ("o10082", "o21079", "o13839")


def workloads(lanes: int):
  """(prompt, schema) pairs for `lanes` lanes: the main job's demo + three JSONSchemaBench
  Github_trivial schemas (those present), repeated in order."""
  from infernix_jax.cli.generate import DEMO_PROMPT, DEMO_SCHEMA
  items = [(DEMO_PROMPT, DEMO_SCHEMA)]
  for name in SCHEMA_FILES:
    path = DATA / f"{name}.json"
    if path.exists():
      text = path.read_text()
      items.append((f"Reply with JSON matching this schema: {text}", text))
  return [items[i % len(items)] for i in range(lanes)]


def per_round(timeline) -> list[dict]:
  """{name: seconds} per round; "verify start" and "lookahead start" as offsets in the round."""
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


def run(engine, requests_fn, timeline):
  """(results, wall seconds, XLA compilations) of one timed run."""
  from infernix_jax.runtime import compile_count
  engine.timeline = timeline
  with compile_count.counting() as compiles:
    t0 = time.perf_counter()
    results = engine.generate(requests_fn())
    wall = time.perf_counter() - t0
  engine.timeline = None
  return results, wall, compiles


def main() -> int:
  ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  ap.add_argument("--lanes", type=int, default=1)
  ap.add_argument("--max-tokens", type=int, default=48)
  ap.add_argument("--k", type=int, default=4)
  ap.add_argument("--drafter", default="ngram")
  ap.add_argument("--layout", default="unrolled")
  ap.add_argument("--repeats", type=int, default=2, help="alternating overlapped/serial runs")
  ap.add_argument("--write", action="store_true")
  args = ap.parse_args()

  import jax
  from infernix_jax import constrain as ic
  from infernix_jax.runtime import GenerationRequest, Timeline, compile_count
  from infernix_jax.runtime.build import EngineSpec, build_engine

  built = build_engine(EngineSpec(layout=args.layout, drafter=args.drafter,
                                  drafter_options={"k": args.k}, jump_forward=True,
                                  lanes=args.lanes, capacity=1024))
  engine, tok = built.engine, built.tokenizer
  items = workloads(args.lanes)
  prompts = [tok.encode(tok.apply_chat_template([{"role": "user", "content": p}],
                                                add_generation_prompt=True))
             for p, _ in items]
  specs = [ic.OutputConstraint.json_schema(s) for _, s in items]

  def requests(max_tokens=args.max_tokens):
    return [GenerationRequest(p, max_tokens=max_tokens, constraint=s)
            for p, s in zip(prompts, specs)]

  with compile_count.counting() as warm:
    engine.warmup()  # compile every shape the timed runs use
    engine.generate(requests(args.max_tokens))
  timed = compile_count.CompileCount()
  kinds = {"overlapped": [], "serial": []}
  walls = {"overlapped": [], "serial": []}
  tokens = {}
  for _ in range(args.repeats):
    for kind in kinds:
      timeline = Timeline(serial=kind == "serial")
      results, wall, compiles = run(engine, requests, timeline)
      timed += compiles
      kinds[kind].extend(per_round(timeline))
      walls[kind].append(wall)
      tokens[kind] = [r.token_ids for r in results]
  same = tokens["overlapped"] == tokens["serial"]

  def med(kind, name):
    values = [r.get(name, 0.0) for r in kinds[kind]]
    return 1e3 * statistics.median(values) if values else 0.0

  names = ["begin", "dispatch:verify", "draft wait", "lookahead", "upload", "dispatch:finish",
           "wait:commit", "commit", "round"]
  lines = [
      "# Round timeline on the stages bridge: host mask work hidden behind the verify",
      "",
      f"Script: `benchmarks/round_timeline.py --lanes {args.lanes} --max-tokens "
      f"{args.max_tokens} --drafter {args.drafter} --k {args.k} --layout {args.layout}` "
      f"(jump-forward on). {datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M} UTC, "
      f"{platform.machine()}, {jax.devices()[0].platform}, jax {jax.__version__}. Embedded "
      f"SmolLM2-135M, JSON Schema constrained (main job + JSONSchemaBench Github_trivial), "
      f"{len(kinds['overlapped'])} overlapped and {len(kinds['serial'])} serial rounds.",
      "",
      "Median ms per round and span. In the serial run every device step is waited for, so "
      "its `dispatch:*` spans are the steps' device times; in the overlapped run they are only "
      "the launch.",
      "",
      "| span | overlapped ms | serial ms |",
      "|---|---:|---:|",
  ]
  for name in names:
    lines.append(f"| {name} | {med('overlapped', name):.2f} | {med('serial', name):.2f} |")
  verify_ms = med("serial", "dispatch:verify")
  hidden = []
  for row in kinds["overlapped"]:
    if "lookahead" not in row:
      continue
    verify_end = row["dispatch:verify@"] + verify_ms / 1e3
    overlap = min(max(verify_end - row["lookahead@"], 0.0), row["lookahead"])
    hidden.append((overlap, row["lookahead"]))
  hidden_ms = 1e3 * sum(h for h, _ in hidden) / max(len(hidden), 1)
  look_ms = 1e3 * sum(l for _, l in hidden) / max(len(hidden), 1)
  saving = med("serial", "round") - med("overlapped", "round")
  lines += [
      "",
      f"- Lookahead (host mask work) per round: mean **{look_ms:.2f} ms**; of it "
      f"**{hidden_ms:.2f} ms ({100 * hidden_ms / max(look_ms, 1e-9):.0f}%)** ran while the "
      f"target's verify was still running (median serial verify {verify_ms:.2f} ms).",
      f"- Median round: overlapped {med('overlapped', 'round'):.2f} ms, serial "
      f"{med('serial', 'round'):.2f} ms (difference {saving:.2f} ms: overlap of every host "
      f"step with device work, not only the masks).",
      f"- Tokens per run: {sum(map(len, tokens['overlapped']))}; overlapped and serial runs "
      f"produced {'identical' if same else 'DIFFERENT'} tokens.",
      f"- Wall per run: overlapped {statistics.median(walls['overlapped']):.2f} s, serial "
      f"{statistics.median(walls['serial']):.2f} s.",
      f"- XLA compilation: warm-up {warm.compiles} programs in {warm.seconds:.1f} s; timed "
      f"runs {timed.compiles} programs in {timed.seconds:.1f} s.",
  ]
  text = "\n".join(lines) + "\n"
  print(text)
  if args.write:
    out = ROOT / "docs/results/round_timeline.md"
    out.write_text(text)
    print(f"wrote {out}")
  return 0 if same else 1


if __name__ == "__main__":
  sys.exit(main())
