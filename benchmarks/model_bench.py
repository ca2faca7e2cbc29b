"""SmolLM2-135M on this machine: load, prefill tok/s, decode ms/token, verify(P)/decode(1).

Peer: Hugging Face transformers (torch, same dequantized GGUF weights, f32) decoding with
its KV cache, measured in the same run (skipped with --no-peer or when torch is absent).

  .venv/bin/python benchmarks/model_bench.py [--prompt 128] [--steps 32] [--p 5 9]
      [--batch 1] [--dtypes float32 bfloat16] [--no-peer]
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from infernix_jax import models as im


def _time(fn, repeats):
  """Median wall seconds of fn() (which must block until its result is ready)."""
  times = []
  for _ in range(repeats):
    start = time.perf_counter()
    fn()
    times.append(time.perf_counter() - start)
  return statistics.median(times)


def bench_dtype(dtype: str, args) -> dict:
  start = time.perf_counter()
  cfg, model, _ = im.load_default(dtype=dtype)
  load_s = time.perf_counter() - start
  prefill_s, decode_s, verify_s = step_times(cfg, model, batch=args.batch, prompt=args.prompt,
                                             positions=args.p, steps=args.steps)
  return dict(dtype=dtype, load_s=load_s, prefill_tok_s=args.batch * args.prompt / prefill_s,
              decode_ms=1e3 * decode_s, verify_ms={p: 1e3 * t for p, t in verify_s.items()},
              model=model, cfg=cfg)


def step_times(cfg, model, *, batch: int, prompt: int, positions, steps: int
               ) -> tuple[float, float, dict[int, float]]:
  """(prefill s, decode(1) s, {P: verify(P) s}) of `model` on `batch` rows after a `prompt`
  token prefill: medians of `steps` interleaved calls at one fixed cache offset."""
  graphdef, state = nnx.split(model)
  b = batch
  capacity = prompt + max(positions) + 8
  ids = np.random.default_rng(0).integers(0, cfg.vocab_size, (b, prompt)).astype(np.int32)
  lengths = np.full((b,), prompt, np.int32)

  def run_prefill():
    cache = im.KVCache.init(cfg, b, capacity)
    logits, _, cache = im.prefill(graphdef, state, cache, ids, lengths)
    jax.block_until_ready(logits)
    return cache

  run_prefill()  # compile
  prefill_s = _time(run_prefill, 3)
  cache = run_prefill()
  token = jnp.ones((b,), jnp.int32)
  committed = np.asarray(cache.lengths)  # host copy: the cache (with its lengths) is donated

  def run(p):
    """One call at a fixed offset: decode(1) for p == 1, else verify(p)."""
    nonlocal cache
    cache = cache.with_lengths(committed)  # steady state: every call at the same offset
    if p == 1:
      logits, _, cache = im.decode(graphdef, state, cache, token)
    else:
      logits, _, cache = im.verify(graphdef, state, cache, jnp.ones((b, p), jnp.int32))
    jax.block_until_ready(logits)

  kinds = [1, *positions]
  for p in kinds:
    run(p)  # compile
  # Interleaved rounds: load drift on a shared machine hits every kind alike.
  times = {p: [] for p in kinds}
  for _ in range(steps):
    for p in kinds:
      start = time.perf_counter()
      run(p)
      times[p].append(time.perf_counter() - start)
  return (prefill_s, statistics.median(times[1]),
          {p: statistics.median(times[p]) for p in positions})


def bench_orbax(cfg, model) -> float:
  with tempfile.TemporaryDirectory() as tmp:
    im.save_checkpoint(f"{tmp}/ckpt", cfg, model)
    start = time.perf_counter()
    im.load_checkpoint(f"{tmp}/ckpt")
    return time.perf_counter() - start


def bench_peer(args) -> dict | None:
  try:
    import torch  # pylint: disable=import-outside-toplevel
    import transformers  # pylint: disable=import-outside-toplevel
  except ImportError:
    return None
  path = im.default_model_path()
  start = time.perf_counter()
  model = transformers.AutoModelForCausalLM.from_pretrained(
      path.parent, gguf_file=path.name, dtype=torch.float32).eval()
  load_s = time.perf_counter() - start
  shape = (args.batch, args.prompt)
  prompt = torch.tensor(np.random.default_rng(0).integers(0, 49152, shape))
  with torch.no_grad():
    out = model(prompt, use_cache=True)
    past = out.past_key_values
    token = torch.ones((args.batch, 1), dtype=torch.long)
    times = []
    for _ in range(args.steps):
      start = time.perf_counter()
      model(token, past_key_values=past, use_cache=True)  # noqa: deprecated name, still valid
      times.append(time.perf_counter() - start)
      past.crop(-1)  # drop the token just appended: steady state at one offset
  return dict(load_s=load_s, decode_ms=1e3 * statistics.median(times))


def main():
  parser = argparse.ArgumentParser(description=__doc__)
  parser.add_argument("--prompt", type=int, default=128, help="prefill tokens")
  parser.add_argument("--steps", type=int, default=32, help="timed decode/verify calls")
  parser.add_argument("--p", type=int, nargs="+", default=[5],
                      help="verified positions (K + 1), one or more")
  parser.add_argument("--batch", type=int, default=1, help="rows B")
  parser.add_argument("--dtypes", nargs="+", default=["float32", "bfloat16"])
  parser.add_argument("--no-peer", action="store_true", help="skip the transformers peer")
  args = parser.parse_args()
  print(f"jax {jax.__version__} on {jax.devices()[0].platform}, prompt={args.prompt}, "
        f"B={args.batch}, P={args.p}")
  results = [bench_dtype(dtype, args) for dtype in args.dtypes]
  orbax_s = bench_orbax(results[0]["cfg"], results[0]["model"])
  print(f"{'dtype':10s} {'load s':>7s} {'prefill tok/s':>14s} {'decode ms':>10s} "
        + " ".join(f"{f'verify({p}) ms':>13s} {f'/decode':>8s}" for p in args.p))
  for r in results:
    print(f"{r['dtype']:10s} {r['load_s']:7.2f} {r['prefill_tok_s']:14.0f} "
          f"{r['decode_ms']:10.1f} " + " ".join(
              f"{r['verify_ms'][p]:13.1f} {r['verify_ms'][p] / r['decode_ms']:8.2f}"
              for p in args.p))
  print(f"orbax reload of converted {results[0]['dtype']} params: {orbax_s:.2f} s "
        f"(GGUF load {results[0]['load_s']:.2f} s, x{results[0]['load_s'] / orbax_s:.1f})")
  peer = None if args.no_peer else bench_peer(args)
  if peer:
    print(f"peer transformers f32: load {peer['load_s']:.2f} s, decode "
          f"{peer['decode_ms']:.1f} ms/token; ours/peer decode time = "
          f"{results[0]['decode_ms'] / peer['decode_ms']:.2f}")


if __name__ == "__main__":
  main()
