"""Engine benchmark on the embedded SmolLM2: tokens/s, accepted length, host time per round.

Per drafter, constrained (JSON Schema) vs unconstrained, masked q and jump-forward on/off,
both host bridges. The peer of every constrained row is the unconstrained run with the same
drafter in the same process (ratio printed). Run:

  .venv/bin/python benchmarks/engine_bench.py [--quick] [--json-out FILE]
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

DATA = Path(__file__).resolve().parents[1] / "../shared/data/jsonschemabench/data/Github_trivial"
SCHEMA_FILES = ("o10082", "o21079", "o13839")


def workloads():
  from infernix_jax.runtime.cli import DEMO_PROMPT, DEMO_SCHEMA
  items = [(DEMO_PROMPT, DEMO_SCHEMA)]
  for name in SCHEMA_FILES:
    path = DATA / f"{name}.json"
    if path.exists():
      text = path.read_text()
      items.append((f"Reply with JSON matching this schema: {text}", text))
  return items


def main() -> int:
  ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  ap.add_argument("--quick", action="store_true", help="fewer configurations and tokens")
  ap.add_argument("--max-tokens", type=int, default=64)
  ap.add_argument("--k", type=int, default=4)
  ap.add_argument("--json-out", default=None)
  ap.add_argument("--configs", default="", help="comma-separated config labels (default: all)")
  args = ap.parse_args()

  from infernix_jax import constrain as ic
  from infernix_jax import models as im
  from infernix_jax.runtime import Engine, GenerationRequest, drafters

  t0 = time.perf_counter()
  cfg, model, source = im.load_default()
  tok = im.load_tokenizer(source)
  vocab = ic.Vocabulary.from_gguf(source)
  print(f"# SmolLM2-135M loaded in {time.perf_counter() - t0:.1f}s", flush=True)
  items = workloads()
  prompts = [tok.encode(tok.apply_chat_template([{"role": "user", "content": p}]))
             for p, _ in items]
  specs = [ic.OutputConstraint.json_schema(s) for _, s in items]
  k = args.k
  # (label, drafter name, jump-forward, bridge, masked q): every registered drafter alone and
  # behind jump-forward, both masked-q settings for sampling ones, and the callback bridge.
  configs = []
  for name in drafters.names():
    entry = drafters.entry(name)
    for jump in ((False, True) if entry.drafts and name != "jump" else (False,)):
      label = f"{name}+jump" if jump else name
      configs.append((label, name, jump, "stages", True))
      if name == "dflash2":
        configs.append((label + " plain-q", name, jump, "stages", False))
  configs += [("none/callback", "none", False, "callback", True),
              ("ngram+jump/callback", "ngram", True, "callback", True)]
  if args.quick:
    configs = configs[:5]
  if args.configs:
    wanted = args.configs.split(",")
    configs = [c for c in configs if c[0] in wanted]
  rows = []
  for label, name, jump, bridge, masked_q in configs:
    drafter = drafters.create(name, k=k, jump_forward=jump, target=(cfg, model),
                              draft_model=(cfg, model))  # "draft": the target drafts itself
    eng = Engine(model, vocab, drafter, lanes=len(prompts), capacity=512, bridge=bridge,
                 masked_q=masked_q, cfg=cfg)
    eng.warmup()
    for warm in (None, specs[0]):  # compile both the free and the constrained round
      eng.generate([GenerationRequest(p, max_tokens=2, constraint=warm) for p in prompts])
    for constrained in (False, True):
      eng.stats.clear()
      eng.host.stats.clear()
      reqs = [GenerationRequest(p, max_tokens=args.max_tokens,
                                constraint=s if constrained else None)
              for p, s in zip(prompts, specs)]
      t = time.perf_counter()
      res = eng.generate(reqs)
      wall = time.perf_counter() - t
      tokens = sum(len(r.token_ids) for r in res)
      rounds = eng.stats["rounds"]
      hs = eng.host.stats
      host = hs["begin_seconds"] + hs["mask_seconds"] + hs["commit_seconds"]
      row = {
          "config": label, "constrained": constrained, "bridge": bridge,
          "tokens": tokens, "wall_s": wall, "tokens_per_s": tokens / wall,
          "accepted_length": sum(r.accepted + len(r.rounds) for r in res) /
                             max(sum(len(r.rounds) for r in res), 1),
          "rounds": rounds, "round_ms": 1e3 * eng.stats["round_seconds"] / max(rounds, 1),
          "host_mask_fraction": hs["mask_seconds"] / max(eng.stats["round_seconds"], 1e-9),
          "host_fraction": host / max(eng.stats["round_seconds"], 1e-9),
          "draft_wait_fraction": hs["draft_wait_seconds"] /
                                 max(eng.stats["round_seconds"], 1e-9),
          "jump_forward_tokens": sum(r.constraint.jump_forward_tokens for r in res
                                     if r.constraint),
          "completed": sum(r.finish_reason.value == "stop" for r in res),
          "errors": [r.error for r in res if r.error],
      }
      rows.append(row)
      print(json.dumps(row), flush=True)
  print("\n| config | constrained | tokens/s | ratio vs unconstrained | accepted length | "
        "round ms | host mask % of round | jump-forward drafts |")
  print("|---|---|---:|---:|---:|---:|---:|---:|")
  by = {(r["config"], r["constrained"]): r for r in rows}
  for r in rows:
    peer = by[(r["config"], False)]
    ratio = r["tokens_per_s"] / peer["tokens_per_s"]
    print(f"| {r['config']} | {'yes' if r['constrained'] else 'no'} | {r['tokens_per_s']:.1f} | "
          f"{ratio:.2f} | {r['accepted_length']:.2f} | {r['round_ms']:.0f} | "
          f"{100 * r['host_mask_fraction']:.1f} | {r['jump_forward_tokens']} |")
  if args.json_out:
    Path(args.json_out).write_text(json.dumps(rows, indent=1))
  return 0


if __name__ == "__main__":
  sys.exit(main())
