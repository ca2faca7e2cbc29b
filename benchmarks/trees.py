"""Draft trees against chains, and suffix decoding against n-gram + jump-forward, on the
embedded SmolLM2 (one run, the same prompts on every side).

Part 1, trees vs chains at an equal verify budget: each drafter (n-gram, suffix, the trained
MTP head and block drafter) proposes a chain of K = 7 drafts or a tree of 7 nodes (8 verified positions
either way, the anchor included), with jump-forward, on the JSON Schema and tool-call
validation prompts of the distillation mix, JSON-constrained.
Part 2, the suffix workload: 50 requests over 5 JSONSchemaBench schemas (10 documents per
schema asked one after another, so later documents see the earlier outputs of their schema),
suffix decoding (its tree, K = 7 nodes) against n-gram + jump-forward chains (K = 4, and
K = 7 greedy), and ordinary decoding for scale.

Every configuration runs on a fresh engine (one lane, capacity 1024) after `warmup()` and
with every constraint compiled beforehand, greedy and at T = 0.7; accepted length is
`infernix_jax.runtime.accepted_length` ((accepted drafts + rounds) / rounds), tokens/s is
output tokens over the measured wall time.

  .venv/bin/python benchmarks/trees.py [--quick] [--write]

`--write` writes docs/results/trees.md and docs/results/trees.json (`--report-from FILE`
rewrites the page from such a JSON).
"""

from __future__ import annotations

import argparse
import datetime
import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

K = 7  # chain drafts = tree nodes: 8 verified positions with the anchor
TOPICS = ("a small bakery", "a city library", "a rock band", "a mountain hike",
          "a software release", "a hospital ward", "a chess club", "a weather station",
          "a used car", "a school trip")
# label -> (drafter, options, jump-forward)
PART1 = {
    "ngram chain": ("ngram", {"k": K}, True),
    "ngram tree": ("ngram", {"k": K, "tree": True}, True),
    "suffix chain": ("suffix", {"k": K, "tree": False}, True),
    "suffix tree": ("suffix", {"k": K}, True),
    "mtp chain": ("mtp", {"k": K}, True),
    "mtp tree": ("mtp", {"k": K, "tree": True}, True),
    "dflash chain": ("dflash", {"k": K}, True),
    "dflash tree": ("dflash", {"k": K, "tree": True}, True),
}
# label -> (drafter, options, jump-forward, temperatures it runs at)
PART2 = {
    "none": ("none", {}, False, (0.0,)),  # ordinary decoding's speed is the same sampled
    "ngram+jump K=4": ("ngram", {"k": 4}, True, (0.0, 0.7)),
    "ngram+jump K=7": ("ngram", {"k": K}, True, (0.0,)),
    "suffix tree": ("suffix", {"k": K}, True, (0.0, 0.7)),
}


def parse_args(argv=None):
  ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  ap.add_argument("--prompts", type=int, default=8, help="part 1 validation prompts")
  ap.add_argument("--schemas", type=int, default=5, help="part 2 schemas")
  ap.add_argument("--documents", type=int, default=10, help="part 2 documents per schema")
  ap.add_argument("--max-tokens", type=int, default=64)
  ap.add_argument("--temperatures", default="0,0.7")
  ap.add_argument("--quick", action="store_true", help="2 prompts, 2 schemas x 3, 24 tokens")
  ap.add_argument("--write", action="store_true", help="write docs/results/trees.{md,json}")
  ap.add_argument("--json", default="", help="also write the results here")
  ap.add_argument("--report-from", default="",
                  help="rewrite docs/results/trees.md from a results JSON of this script")
  args = ap.parse_args(argv)
  args.temperatures = [float(t) for t in args.temperatures.split(",")]
  if args.quick:
    args.prompts, args.schemas, args.documents, args.max_tokens = 2, 2, 3, 24
  return args


def part1_requests(loaded, compiler, n, max_tokens, temperature):
  """The validation prompts (json + tool), JSON-constrained, as GenerationRequests."""
  from drafter_bench import validation_prompts
  from infernix_jax.train import evaluate as ev
  items = validation_prompts(compiler, n)
  return lambda: ev.requests_for(loaded.tokenizer, items, constrained=True,
                                 temperature=temperature, max_tokens=max_tokens)


def part2_requests(loaded, schemas, documents, max_tokens, temperature):
  """Per schema in order, `documents` requests for records about different topics."""
  from infernix_jax import constrain as ic
  from infernix_jax.runtime.types import GenerationRequest, SamplingOptions
  from experiments import workloads
  items = workloads.load("jsonschema:Github_easy", schemas, seed=0)

  def build():
    out = []
    for item in items:
      schema = item.constraint[1]
      for i in range(documents):
        text = (f"{item.prompt}\nWrite record {i + 1} of {documents}: a realistic document "
                f"about {TOPICS[i % len(TOPICS)]}.")
        ids = loaded.tokenizer.encode(loaded.tokenizer.apply_chat_template(
            [{"role": "user", "content": text}]))
        out.append(GenerationRequest(ids, max_tokens=max_tokens,
                                     constraint=ic.OutputConstraint.json_schema(schema),
                                     sampling=SamplingOptions(temperature=temperature,
                                                              seed=i)))
    return out
  return build, [item.id for item in items]


def measure(loaded, compiler, label, config, requests) -> dict:
  """One configuration on a fresh engine: warmup, constraints compiled, then timed (with the
  XLA compilations of both parts: `warmup_xla_*`, `xla_*`)."""
  from infernix_jax.runtime import accepted_length, compile_count
  from infernix_jax.runtime.build import EngineSpec, build_engine
  name, options, jump = config
  spec = EngineSpec(drafter=name, drafter_options=options, jump_forward=jump, lanes=1,
                    capacity=1024)
  with compile_count.counting() as warm:
    engine = build_engine(spec, target=loaded, compiler=compiler).engine
    batch = requests()
    engine.warmup(prompt_lengths=[len(r.prompt_ids) for r in batch])
  for r in batch:
    compiler.compile(r.constraint)
  with compile_count.counting() as timed:
    start = time.perf_counter()
    results = engine.generate(batch)
    wall = time.perf_counter() - start
  tokens = sum(len(r.token_ids) for r in results)
  rounds = sum(len(r.rounds) for r in results)
  accepted = sum(r.accepted for r in results)
  pruned = sum(r.constraint.pruned_nodes for r in results if r.constraint is not None)
  errors = [r.error for r in results if r.error]
  row = {"config": label, "tokens": tokens, "rounds": rounds, "seconds": round(wall, 2),
         "accepted_length": round(accepted_length(accepted, rounds), 4),
         "tokens_per_second": round(tokens / wall, 2),
         "drafted": sum(r.drafted for r in results), "accepted": accepted,
         "pruned_nodes": pruned, "errors": len(errors), **timed.record(),
         **warm.record("warmup_")}
  print(f"{label:>16}: accepted length {row['accepted_length']:.3f}, "
        f"{row['tokens_per_second']:.1f} tok/s, {tokens} tokens, pruned {pruned}"
        + (f", {len(errors)} errors ({errors[0]})" if errors else ""), flush=True)
  return row


def main(argv=None) -> int:
  args = parse_args(argv)
  if args.report_from:
    from _trees_report import write_report
    write_report(json.loads(Path(args.report_from).read_text()), ROOT / "docs/results/trees.md")
    return 0
  import _timing
  from infernix_jax import constrain as ic
  from infernix_jax.runtime import compile_cache
  from infernix_jax.train import corpus

  compile_cache.enable()
  start = time.perf_counter()
  loaded, model_id = corpus.load_target()
  compiler = ic.ConstraintCompiler(loaded.vocab)
  rows = []
  schemas = []
  # One untimed configuration first: what the first engine of a process pays once (host
  # code paths, the tokenizer, the grammar compiler) stays out of every measured row.
  measure(loaded, compiler, "(untimed warm-up)", PART1["ngram tree"],
          part1_requests(loaded, compiler, 1, 8, 0.0))
  for t in args.temperatures:
    print(f"# part 1: trees vs chains, T={t}", flush=True)
    reqs = part1_requests(loaded, compiler, args.prompts, args.max_tokens, t)
    for label, config in PART1.items():
      rows.append({"part": 1, "temperature": t, **measure(loaded, compiler, label, config,
                                                           reqs)})
    print(f"# part 2: suffix workload, T={t}", flush=True)
    reqs, schemas = part2_requests(loaded, args.schemas, args.documents, args.max_tokens, t)
    for label, (*config, temps) in PART2.items():
      if t in temps:
        rows.append({"part": 2, "temperature": t, **measure(loaded, compiler, label, config,
                                                             reqs)})
  meta = {"date": datetime.datetime.now().strftime("%Y-%m-%d %H:%M"),
          "machine": _timing.machine(), "model": model_id, "k": K,
          "max_tokens": args.max_tokens, "prompts": args.prompts, "schemas": schemas,
          "documents": args.documents, "quick": args.quick,
          "seconds": round(time.perf_counter() - start)}
  results = {"meta": meta, "rows": rows}
  if args.json:
    Path(args.json).write_text(json.dumps(results, indent=1) + "\n")
  if args.write:
    from _trees_report import write_report
    (ROOT / "docs/results/trees.json").write_text(json.dumps(results, indent=1) + "\n")
    write_report(results, ROOT / "docs/results/trees.md")
    print("wrote docs/results/trees.md", flush=True)
  return 0


if __name__ == "__main__":
  sys.exit(main())
