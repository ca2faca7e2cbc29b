"""Trained drafters on the embedded SmolLM2: accepted length, per-position acceptance and
tokens/s on the validation prompts, against n-gram, jump-forward and untrained heads.

Prompts: the validation split of the distillation mix (JSON Schema and BFCL tool-call
prompts, disjoint from training by schema and question), each run JSON-Schema-constrained
and unconstrained. Settings: K in --ks, target temperature in --temperatures (dflash2
samples its drafts at 0.7 from its top-16), masked q on and off for the sampled drafter.

  - acceptance: every configuration at every (K, T, constrained), 4 lanes;
  - speed: at K = 4, T = 0, one lane, every configuration and ordinary decoding, each timed
    after an untimed pass over the same prompts (greedy rounds repeat exactly, so every
    shape is compiled), all in this one run.

  .venv/bin/python benchmarks/drafter_bench.py [--quick] [--write]

`--write` writes docs/results/drafters.md and docs/results/drafters.json.
"""

from __future__ import annotations

import argparse
import datetime
import json
import platform
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

SPARSE_TEMPERATURE = 0.7
SPARSE = {"temperature": SPARSE_TEMPERATURE}  # dflash2's top-16 sampling temperature
# label -> (registry name, jump-forward, drafter options besides K)
CONFIGS = {
    "ngram": ("ngram", False, {}),
    "ngram+jump": ("ngram", True, {}),
    "mtp": ("mtp", False, {}),
    "mtp+jump": ("mtp", True, {}),
    "dflash": ("dflash", False, {}),
    "dflash+jump": ("dflash", True, {}),
    "dflash2": ("dflash2", False, SPARSE),
    "dflash2+jump": ("dflash2", True, SPARSE),
    "mtp untrained": ("mtp", False, {"weights": "random"}),
    "dflash untrained": ("dflash", False, {"weights": "random"}),
    "eagle3": ("eagle3", False, {}),
    "eagle3+jump": ("eagle3", True, {}),
    "eagle3 sampled": ("eagle3", False, {"sampling": True, **SPARSE}),
    "eagle3 tree": ("eagle3", False, {"tree": True}),
}
DRAFT_VOCABS = (2048, 4096, 8192, 16384)  # EAGLE-3 heads whose proposal cost is measured
SPEED_EXTRA = {"none": ("none", False, {}), "jump": ("jump", True, {})}


def parse_args(argv=None):
  ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  ap.add_argument("--prompts", type=int, default=8, help="validation prompts (json + tool)")
  ap.add_argument("--max-tokens", type=int, default=64)
  ap.add_argument("--ks", default="2,4,8")
  ap.add_argument("--temperatures", default="0,0.7")
  ap.add_argument("--configs", default=",".join(CONFIGS), help="labels to run")
  ap.add_argument("--speed-configs", default="",
                  help="labels of the 1-lane timed runs besides none and jump (default: "
                       "--configs without the untrained heads)")
  ap.add_argument("--curve", default=str(ROOT / "docs/results/eagle3_curve.json"),
                  help="eagle3_curve.py's results, reported as the learning curve")
  ap.add_argument("--lanes", type=int, default=4, help="lanes of the acceptance runs")
  ap.add_argument("--no-speed", action="store_true", help="skip the 1-lane timed runs")
  ap.add_argument("--quick", action="store_true", help="2 prompts, 16 tokens, K=4, T=0")
  ap.add_argument("--acceptance-ks", default="",
                  help="K values for the untrained heads and ngram alone (default: --ks)")
  ap.add_argument("--json", default="", help="also write the raw results to this file")
  ap.add_argument("--merge", default="", help="comma-separated raw results of earlier runs "
                  "(parts of the matrix) to report with this run's; for a repeated setting "
                  "this run's row wins, then the later file's")
  ap.add_argument("--no-acceptance", action="store_true", help="only the timed runs")
  ap.add_argument("--report-from", default="",
                  help="rewrite docs/results/drafters.md from this raw results file, no runs")
  ap.add_argument("--write", action="store_true")
  args = ap.parse_args(argv)
  if args.quick:
    args.prompts, args.max_tokens, args.ks, args.temperatures = 2, 16, "4", "0"
  args.ks = [int(k) for k in args.ks.split(",")]
  args.acceptance_ks = ([int(k) for k in args.acceptance_ks.split(",")]
                        if args.acceptance_ks else args.ks)
  args.temperatures = [float(t) for t in args.temperatures.split(",")]
  args.configs = args.configs.split(",")
  args.speed_configs = (args.speed_configs.split(",") if args.speed_configs else
                        [c for c in args.configs if "untrained" not in c])
  unknown = [c for c in args.configs + args.speed_configs if c not in CONFIGS]
  if unknown:
    ap.error(f"--configs: unknown {unknown}; known: {', '.join(CONFIGS)}")
  return args


def validation_prompts(compiler, n: int):
  """The first n constrained validation prompts (json, then tool) that compile."""
  from infernix_jax import constrain as ic
  from infernix_jax.train import corpus, prompts
  out = []
  mix = prompts.prompt_mix({"json": 4 * n, "tool": 4 * n}, "validation",
                           unconstrained_share=0)
  for fam, want in (("json", n - n // 4), ("tool", n // 4)):
    taken = 0
    for p in mix:
      if p.family != fam or taken == want:
        continue
      try:
        compiler.compile(corpus.constraint_of(p))
      except ic.ConstraintError:
        continue
      out.append(p)
      taken += 1
  return out


def make_engine(target, label, k, *, lanes, masked_q=True):
  from infernix_jax.runtime import drafters
  from infernix_jax.runtime.build import EngineSpec, build_engine
  loaded, compiler = target
  name, jump, options = {**CONFIGS, **SPEED_EXTRA}[label]
  if "k" in drafters.fields(name):
    options = {"k": k, **options}
  spec = EngineSpec(drafter=name, drafter_options=options, jump_forward=jump, lanes=lanes,
                    capacity=1024, masked_q=masked_q)
  return build_engine(spec, target=loaded, compiler=compiler).engine


def drafting_costs(target, k: int, repeats: int = 20) -> dict:
  """Milliseconds of one proposal of each trained network at batch 1 (as shipped, over its
  draft vocabulary, and over the full one) and of its K head products alone (the shared
  target head, [1, D] x [D, Vm]), beside one target verify of
  K + 1 positions: how much of drafting the full-vocabulary head costs on this machine; and
  of an EAGLE-3 proposal at each draft vocabulary of DRAFT_VOCABS and the full one (untrained
  heads: the cost does not depend on the weights)."""
  import jax
  import jax.numpy as jnp
  from _timing import median_ms
  from flax import nnx

  from infernix_jax import models as im
  from infernix_jax.models import drafters as md
  from infernix_jax.models.drafters import weights as dw
  from infernix_jax.models.kv_cache import KVCache
  from infernix_jax.models.drafters.weights import head_for
  cfg, model = target[0].cfg, target[0].model
  head = md.TargetHead.from_model(model)
  out = {}
  ctx = md.DraftContext(tokens=jnp.ones((1, 1), jnp.int32),
                        hidden=jnp.ones((1, 1, cfg.dim), jnp.float32),
                        counts=jnp.ones((1,), jnp.int32))
  drafter_of = {"mtp": md.MTPDrafter, "block": md.DFlashDrafter}  # network kind -> drafter
  for kind in dw.KINDS:
    net = dw.load(dw.shipped_path(kind), kind, cfg, model.embed[...])
    # As shipped (over the draft vocabulary it was trained on, if any) and over all of Vm.
    for suffix, over in (("", head_for(model, net)), ("_full", head)):
      d = drafter_of[kind].create(net, over, k)
      state = d.init_state(1, 512)

      def propose(d=d, state=state):
        ids, _, _ = d.propose(jax.tree.map(jnp.copy, state), ctx)
        ids.block_until_ready()
      out[f"{kind}_propose_ms{suffix}"] = round(median_ms(propose, repeats), 3)
  from infernix_jax.models.drafters import eagle3 as e3
  feats = md.DraftContext(tokens=ctx.tokens, counts=ctx.counts,
                          hidden=jnp.ones((1, 1, 3 * cfg.dim), jnp.float32))
  keys = jax.random.split(jax.random.key(0), 1)
  for vd in (*DRAFT_VOCABS, cfg.vocab_size):
    net = e3.Eagle3Net(cfg, e3.default_taps(cfg.num_layers), vd, rngs=nnx.Rngs(0))
    d = e3.Eagle3Drafter.create(net, model.embed[...], k)
    state = d.init_state(1, 512)

    def propose(d=d, state=state):
      ids, _, _ = d.propose(jax.tree.map(jnp.copy, state), feats, keys)
      ids.block_until_ready()
    out[f"eagle3_propose_ms_vd{vd}"] = round(median_ms(propose, repeats), 3)
  h = jnp.ones((k, cfg.dim), jnp.float32)
  logits = jax.jit(lambda h: head.logits(h[:, None]).argmax(-1))
  one = jax.jit(lambda h: head.logits(h).argmax(-1))
  out["head_k_rows_ms"] = round(median_ms(lambda: logits(h).block_until_ready(), repeats), 3)
  out["head_one_row_ms"] = round(median_ms(lambda: one(h[:1]).block_until_ready(), repeats), 3)
  graphdef, state = nnx.split(model)
  cache = KVCache.init(cfg, batch=1, capacity=512).with_lengths(jnp.full((1,), 200, jnp.int32))
  toks = jnp.ones((1, k + 1), jnp.int32)
  box = [cache]  # verify donates the cache and hands it back (lengths unchanged)

  def verify():
    logits, _, box[0] = im.verify(graphdef, state, box[0], toks)
    logits.block_until_ready()
  out["verify_ms"] = round(median_ms(verify, repeats), 3)
  return out


def main(argv=None) -> int:
  args = parse_args(argv)
  if args.report_from:
    from _drafter_report import write_report
    write_report(json.loads(Path(args.report_from).read_text()),
                 ROOT / "docs/results/drafters.md")
    return 0
  import jax

  from infernix_jax.models.drafters import weights as dw
  from infernix_jax.runtime import compile_cache, compile_count
  from infernix_jax.runtime.drafters import eagle3 as eagle3_drafter
  from infernix_jax.train import corpus
  from infernix_jax.train import evaluate as ev

  compile_cache.enable()
  start = time.perf_counter()
  from infernix_jax import constrain as ic
  loaded, model_id = corpus.load_target()
  tok, compiler = loaded.tokenizer, ic.ConstraintCompiler(loaded.vocab)
  target = (loaded, compiler)
  items = validation_prompts(compiler, args.prompts)
  print(f"# {model_id}; {len(items)} validation prompts; K {args.ks}; T {args.temperatures}",
        flush=True)

  def run(engine, *, constrained, temperature, warm=False):
    acc = ev.acceptance(engine, tok, items, constrained=constrained, temperature=temperature,
                        max_tokens=args.max_tokens, warm=warm)
    return {"accepted_length": round(acc.accepted_length, 4),
            "per_position": [round(x, 4) for x in acc.per_position],
            "tokens": acc.tokens, "rounds": acc.rounds, "errors": acc.errors,
            "tokens_per_second": round(acc.tokens_per_second, 2)}

  rows = []
  # Reference rows and the jump-forward variants of the trained drafters run at
  # --acceptance-ks only (K = 4 by default in the recorded run); the rest at every K.
  side = {"ngram", "mtp untrained", "dflash untrained", "mtp+jump", "dflash+jump",
          "dflash2+jump", "eagle3+jump", "eagle3 tree"}
  for label in ([] if args.no_acceptance else args.configs):
    for k in (args.acceptance_ks if label in side else args.ks):
      engine = make_engine(target, label, k, lanes=args.lanes)
      for temperature in args.temperatures:
        for constrained in (True, False):
          r = run(engine, constrained=constrained, temperature=temperature)
          rows.append({"config": label, "k": k, "temperature": temperature,
                       "constrained": constrained, "masked_q": True, **r})
          print(f"{label:>18} K={k} T={temperature} {'json' if constrained else 'free'}: "
                f"accepted length {r['accepted_length']:.3f} {r['per_position']}", flush=True)
      if engine.drafter.sampling:  # sampled q: the same runs without masked q
        engine = make_engine(target, label, k, lanes=args.lanes, masked_q=False)
        for temperature in args.temperatures:
          r = run(engine, constrained=True, temperature=temperature)
          rows.append({"config": label, "k": k, "temperature": temperature,
                       "constrained": True, "masked_q": False, **r})
          print(f"{label:>18} K={k} T={temperature} json, masked q off: "
                f"accepted length {r['accepted_length']:.3f}", flush=True)
  speed, costs = [], {}
  if not args.no_speed:
    costs = drafting_costs(target, 4 if 4 in args.ks else args.ks[0])
    print(f"# drafting costs: {costs}", flush=True)
    k = 4 if 4 in args.ks else args.ks[0]
    for label in ["none", "jump"] + args.speed_configs:
      with compile_count.counting() as built:
        engine = make_engine(target, label, k, lanes=1)
        engine.warmup()
      for constrained in (True, False):
        # Greedy rounds repeat exactly: an untimed pass meets what the timed pass will meet.
        with compile_count.counting() as warm:
          run(engine, constrained=constrained, temperature=0.0)
        with compile_count.counting() as timed:
          r = run(engine, constrained=constrained, temperature=0.0)
        warm = built + warm if constrained else warm  # the engine's warm-up in its first row
        speed.append({"config": label, "k": k, "constrained": constrained, **r,
                      **timed.record(), **warm.record("warmup_")})
        print(f"{label:>18} 1 lane {'json' if constrained else 'free'}: "
              f"{r['tokens_per_second']:.1f} tok/s, accepted length {r['accepted_length']:.3f}",
              flush=True)
  meta = {"date": datetime.datetime.now().strftime("%Y-%m-%d %H:%M"),
          "machine": f"{platform.machine()}, {len(jax.devices())} {jax.devices()[0].platform} "
                     f"device(s)",
          "model": model_id, "prompts": [p.name for p in items], "max_tokens": args.max_tokens,
          "lanes": args.lanes, "sparse_temperature": SPARSE_TEMPERATURE,
          "seconds": round(time.perf_counter() - start),
          "shipped": {kind: dw.summary(dw.shipped_path(kind)) | {
              "megabytes": round(dw.shipped_path(kind).stat().st_size / 1e6, 1)}
                      if dw.shipped_path(kind).exists() else None for kind in dw.KINDS}}
  head = eagle3_drafter.shipped_dir()
  if (head / "training_log.json").exists():
    log = json.loads((head / "training_log.json").read_text())
    meta["shipped"]["eagle3"] = {k: v for k, v in log.items() if k != "history"} | {
        "final_eval": (log["history"]["evals"] or [None])[-1],
        "megabytes": round(sum(p.stat().st_size for p in head.iterdir()) / 1e6, 1)}
  curve = json.loads(Path(args.curve).read_text()) if Path(args.curve).exists() else None
  results = {"meta": meta, "acceptance": rows, "speed": speed, "costs": costs, "curve": curve}
  if args.json:
    Path(args.json).write_text(json.dumps(results, indent=1) + "\n")
  key = lambda r: (r["config"], r["k"], r.get("temperature"), r["constrained"],  # noqa: E731
                   r.get("masked_q"))
  for part in reversed([p for p in args.merge.split(",") if p]):  # later parts win
    earlier = json.loads(Path(part).read_text())
    for field in ("acceptance", "speed"):
      have = {key(r) for r in results[field]}
      results[field] = [r for r in earlier[field] if key(r) not in have] + results[field]
    results["costs"] = results["costs"] or earlier.get("costs", {})
    results["meta"]["seconds"] += earlier["meta"]["seconds"]
  if args.write:
    from _drafter_report import write_report
    (ROOT / "docs/results/drafters.json").write_text(json.dumps(results, indent=1) + "\n")
    write_report(results, ROOT / "docs/results/drafters.md")
    print("wrote docs/results/drafters.md", flush=True)
  return 0


if __name__ == "__main__":
  sys.exit(main())
