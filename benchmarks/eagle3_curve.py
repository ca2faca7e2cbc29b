"""EAGLE-3 on the embedded SmolLM2: accepted length against corpus size (a learning curve)
and against the draft vocabulary's size, each head trained for the same number of steps.

Each point trains a head with configs/train_eagle3.py (overridden: steps, corpus fraction,
draft vocabulary; checkpoints and the exported head under runs/eagle3_curve/<point>, so
an interrupted run resumes), then drafts greedily (K = 4, T = 0, 4 lanes) on the
JSON-Schema-constrained validation prompts `drafter_bench.py` uses. drafter_bench.py
reports the points it finds in the results file.

  .venv/bin/python benchmarks/eagle3_curve.py [--steps 300] [--fractions 0.05,0.25,1]
      [--vocabs 2048,4096] [--heads NAME=DIR,...] [--json docs/results/eagle3_curve.json]
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))


def main(argv=None) -> int:
  ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  ap.add_argument("--steps", type=int, default=300)
  ap.add_argument("--fractions", default="0.05,0.25,1", help="corpus fractions (Vd 8192)")
  ap.add_argument("--vocabs", default="2048,4096", help="draft vocabularies (whole corpus)")
  ap.add_argument("--heads", default="",
                  help="NAME=DIR,...: heads trained elsewhere (e.g. the shipped one at other "
                       "steps), evaluated as points without training; their training_log.json "
                       "gives corpus, vocabulary and steps")
  ap.add_argument("--prompts", type=int, default=8)
  ap.add_argument("--max-tokens", type=int, default=64)
  ap.add_argument("--json", default=str(ROOT / "docs/results/eagle3_curve.json"))
  args = ap.parse_args(argv)
  from drafter_bench import validation_prompts

  from infernix_jax import constrain as ic
  from infernix_jax.runtime import compile_cache
  from infernix_jax.runtime.build import EngineSpec, build_engine
  from infernix_jax.train import corpus, eagle3
  from infernix_jax.train import evaluate as ev
  from configs import train_eagle3
  compile_cache.enable()
  loaded, model_id = corpus.load_target()
  compiler = ic.ConstraintCompiler(loaded.vocab)
  items = validation_prompts(compiler, args.prompts)
  base = train_eagle3.get_config()
  points = [(f"corpus{f}", float(f), base.draft_vocab) for f in args.fractions.split(",") if f]
  points += [(f"vocab{v}", 1.0, int(v)) for v in args.vocabs.split(",") if v]
  out = Path(args.json)
  results = json.loads(out.read_text()) if out.exists() else {"points": {}}
  def accepted(directory):
    spec = EngineSpec(drafter="eagle3", drafter_options={"k": 4, "weights": str(directory)},
                      jump_forward=False, lanes=4, capacity=1024)
    engine = build_engine(spec, target=loaded, compiler=compiler).engine
    return ev.acceptance(engine, loaded.tokenizer, items, max_tokens=args.max_tokens,
                         warm=False)

  def record(key, point):
    results["points"][key] = point
    results["meta"] = {"model": model_id, "prompts": [p.name for p in items],
                       "max_tokens": args.max_tokens, "k": 4, "lanes": 4}
    out.write_text(json.dumps(results, indent=1) + "\n")
    print(f"{key}: accepted length {point['accepted_length']:.3f} {point}", flush=True)

  for pair in [h for h in args.heads.split(",") if h]:
    key, directory = pair.split("=", 1)
    log = json.loads((Path(directory) / "training_log.json").read_text())
    acc = accepted(directory)
    last = log["history"]["loss"][-1]
    record(key, {"fraction": log["corpus"]["fraction"], "draft_vocab": log["draft_vocab"],
                 "steps": log["steps"], "corpus_tokens": log["corpus"]["tokens"],
                 "corpus_sequences": log["corpus"]["sequences"],
                 "accepted_length": round(acc.accepted_length, 4),
                 "per_position": [round(x, 4) for x in acc.per_position],
                 "rounds": acc.rounds, "final_loss": last["loss"],
                 "final_top1": last["top1"], "teacher_coverage": last["coverage"],
                 "seconds": log["seconds"]})
  for name, fraction, vocab in points:
    key = f"{name}-steps{args.steps}"
    if key in results["points"]:
      print(f"{key}: done before", flush=True)
      continue
    c = train_eagle3.get_config()
    c.steps, c.corpus_fraction, c.draft_vocab = args.steps, fraction, vocab
    c.checkpoint_every, c.eval_at_end = 50, False
    c.workdir = str(ROOT / f"runs/eagle3_curve/{key}")
    c.export = str(ROOT / f"runs/eagle3_curve/{key}/head")
    t0 = time.perf_counter()
    summary = eagle3.train(c)
    acc = accepted(c.export)
    last = summary["history"]["loss"][-1]
    record(key, {
        "fraction": fraction, "draft_vocab": vocab, "steps": args.steps,
        "corpus_tokens": summary["corpus"]["tokens"],
        "corpus_sequences": summary["corpus"]["sequences"],
        "accepted_length": round(acc.accepted_length, 4),
        "per_position": [round(x, 4) for x in acc.per_position], "rounds": acc.rounds,
        "final_loss": last["loss"], "final_top1": last["top1"],
        "teacher_coverage": last["coverage"], "seconds": round(time.perf_counter() - t0)})
  return 0


if __name__ == "__main__":
  sys.exit(main())
