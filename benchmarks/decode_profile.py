"""Where a decode step's time goes on the embedded SmolLM2 (batch 1), against the weight floor.

Measured in one run, medians of interleaved calls:
  floor        the model's weight bytes / the bandwidth of a jitted f32 GEMV over ~450 MB;
  decode       `models.decode` in the stacked layout (scanned layers) and the unrolled one;
  pieces       the layer matrices alone (no attention, norms or cache): scanned over stacked
               arrays, in a Python loop over per-layer arrays (separate q/k/v, gate/up), and
               with the fused projections; the LM head alone; attention + norms + RoPE +
               cache writes (unrolled decode minus its matrices and head);
  engine       one engine round with --drafter none, unconstrained (decode + Finish + host).

  .venv/bin/python benchmarks/decode_profile.py [--capacity 512] [--repeats 30] [--write]

`--write` writes docs/results/decode_profile.md. XLA_FLAGS set in the environment apply
to every measured variant (the report records them).
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

import numpy as np
from _timing import gemv_bandwidth, median_ms

ROOT = Path(__file__).resolve().parents[1]


def main() -> int:
  ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  ap.add_argument("--capacity", type=int, default=512)
  ap.add_argument("--repeats", type=int, default=30)
  ap.add_argument("--write", action="store_true")
  args = ap.parse_args()

  import jax
  import jax.numpy as jnp
  from flax import nnx
  from infernix_jax import constrain as ic
  from infernix_jax import models as im
  from infernix_jax.models import unrolled
  from infernix_jax.runtime import GenerationRequest, compile_cache, compile_count
  from infernix_jax.runtime.build import EngineSpec, Target, build_engine

  compile_cache.enable()
  cfg, model, source = im.load_default()
  stacked = nnx.split(model)
  fast_model = unrolled.unroll(nnx.merge(*stacked))
  fast = nnx.split(fast_model)
  weight_bytes = sum(x.nbytes for x in jax.tree.leaves(stacked[1]))
  bandwidth = gemv_bandwidth(args.repeats) / 1e9  # GB/s
  floor_ms = weight_bytes / bandwidth / 1e6
  r = {}

  def decode_fn(split):
    graphdef, state = split
    box = {"cache": im.KVCache.init(cfg, 1, args.capacity)}
    committed = np.full((1,), 100, np.int32)
    token = jnp.ones((1,), jnp.int32)

    def run():
      cache = box["cache"].with_lengths(committed)
      logits, _, box["cache"] = im.decode(graphdef, state, cache, token)
      logits.block_until_ready()
    return run

  layer_params = stacked[1]["layers"]
  stacked_layers = {k: v[...] for k, v in nnx.to_pure_dict(layer_params).items()}
  per_layer = [{k: v[i] for k, v in stacked_layers.items()} for i in range(cfg.num_layers)]
  per_layer = jax.tree.map(lambda a: a + 0, per_layer)  # own buffers, not views
  fused = [layer.params() for layer in fast_model.layers.layers]
  x1 = jnp.ones((1, 1, cfg.dim), jnp.float32)

  def matrices_separate(ps, x):
    for p in ps:
      h = x @ p["q"]
      kv = (x @ p["k"]).sum() + (x @ p["v"]).sum()
      x = x + h @ p["o"] + kv
      x = x + (jax.nn.silu(x @ p["gate"]) * (x @ p["up"])) @ p["down"]
    return x

  def matrices_scan(ps, x):
    def body(x, p):
      return matrices_separate([p], x), None
    return jax.lax.scan(body, x, ps)[0]

  def matrices_fused(ps, x):
    d, f = cfg.dim, cfg.ffn_dim
    for p in ps:
      qkv = x @ p["qkv"]
      x = x + qkv[..., :d] @ p["o"] + qkv[..., d:].sum()
      gu = x @ p["gate_up"]
      x = x + (jax.nn.silu(gu[..., :f]) * gu[..., f:]) @ p["down"]
    return x

  scan_j, sep_j, fused_j = (jax.jit(matrices_scan), jax.jit(matrices_separate),
                            jax.jit(matrices_fused))
  embed = fast_model.embed[...]
  head_j = jax.jit(lambda h, e: jnp.einsum("BD,VD->BV", h, e))
  h1 = jnp.ones((1, cfg.dim), jnp.float32)

  vocab = ic.Vocabulary.from_gguf(source)
  engine = build_engine(EngineSpec(drafter="none", lanes=1, capacity=args.capacity),
                        target=Target(cfg=cfg, model=fast_model, vocab=vocab)).engine
  prompt = list(range(10, 40))

  def engine_round():
    engine.generate([GenerationRequest(prompt, max_tokens=9)])

  kinds = {
      "decode, stacked layout": decode_fn(stacked),
      "decode, unrolled layout": decode_fn(fast),
      "layer matrices, scanned over stacked arrays": lambda: scan_j(stacked_layers,
                                                                    x1).block_until_ready(),
      "layer matrices, per-layer arrays, separate q/k/v and gate/up":
          lambda: sep_j(per_layer, x1).block_until_ready(),
      "layer matrices, per-layer arrays, fused qkv and gate_up":
          lambda: fused_j(fused, x1).block_until_ready(),
      "LM head (tied embedding)": lambda: head_j(h1, embed).block_until_ready(),
  }
  with compile_count.counting() as warm:
    for fn in kinds.values():
      fn()
    engine.warmup(prompt_lengths=[len(prompt)])
    engine_round()
  times = {name: [] for name in kinds}
  rounds = []
  with compile_count.counting() as timed:
    for _ in range(args.repeats):
      for name, fn in kinds.items():
        t0 = time.perf_counter()
        fn()
        times[name].append(time.perf_counter() - t0)
    for _ in range(max(3, args.repeats // 10)):
      engine.stats.clear()
      t0 = time.perf_counter()
      engine_round()
      rounds.append((time.perf_counter() - t0) / max(engine.stats["rounds"], 1))
  for name in kinds:
    r[name] = 1e3 * statistics.median(times[name])
  r["engine round, --drafter none (9 tokens incl. prefill, per round)"] = (
      1e3 * statistics.median(rounds))
  rest = (r["decode, unrolled layout"] - r["layer matrices, per-layer arrays, fused qkv and "
                                            "gate_up"] - r["LM head (tied embedding)"])
  lines = [
      "# Where a decode step goes: SmolLM2-135M, batch 1, f32, CPU",
      "",
      f"Script: `benchmarks/decode_profile.py --capacity {args.capacity} --repeats "
      f"{args.repeats}`. {datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M} UTC, "
      f"{platform.machine()}, {os.cpu_count()} CPUs, jax {jax.__version__}, XLA_FLAGS="
      f"`{os.environ.get('XLA_FLAGS', '')}`. Medians of {args.repeats} interleaved calls; "
      f"KV capacity {args.capacity}, 100 cached positions.",
      "",
      f"- Weight bytes {weight_bytes / 1e6:.0f} MB; GEMV bandwidth {bandwidth:.1f} GB/s; "
      f"**weight-streaming floor {floor_ms:.1f} ms/token**.",
      "",
      "| what | ms | / floor |",
      "|---|---:|---:|",
  ]
  for name, ms in r.items():
    lines.append(f"| {name} | {ms:.1f} | {ms / floor_ms:.2f} |")
  lines.append(f"| attention, norms, RoPE, cache writes (unrolled decode - fused matrices - "
               f"head) | {rest:.1f} | {rest / floor_ms:.2f} |")
  lines += ["", f"XLA compilation: warm-up {warm.compiles} programs in {warm.seconds:.1f} s; "
            f"timed calls {timed.compiles} programs in {timed.seconds:.1f} s."]
  text = "\n".join(lines) + "\n"
  print(text)
  if args.write:
    (ROOT / "docs/results/decode_profile.md").write_text(text)
  return 0


if __name__ == "__main__":
  sys.exit(main())
