"""Benchmark: fused masked sampling vs an unfused baseline, same run, same inputs.

Ours: ``ip.masked_sample`` (the Pallas kernel on GPU, the jnp reference elsewhere). Peer
(unfused): unpack the packed mask to bool [R, V], ``where(legal, logits, -inf)``, then
``jax.random.categorical`` (for the truncated config: ``lax.top_k(50)`` then top-p inside
those 50). Prints one table row per (config, R) with the ratio peer / ours; on GPU also the
achieved bandwidth (logits + mask bytes / time) as a fraction of the HBM peak.

  python benchmarks/kernels_bench.py [--rows 8,32,128] [--dtype bfloat16] [--json out.json]
  python benchmarks/kernels_bench.py --sweep 64,128,256 --warps 4,8   # kernel tiling sweep
  python benchmarks/kernels_bench.py --spec 4                          # + spec_accept, K = 4

The tiling sweep times ``masked_sample_kernel`` per (block_words, num_warps) against the
default tiling (plain config); ``--spec K`` times ``spec_accept`` (dense q, all drafts legal)
against the jnp reference run on the same device, in the same run.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time

import jax
import jax.numpy as jnp
import numpy as np

from infernix_jax import pallas as ip

HBM_PEAK_BYTES_PER_S = {"H200": 4.8e12, "H100": 3.35e12, "A100": 2.0e12, "L4": 0.3e12}


def unfused_sample(logits, mask, key, temperature, top_k, top_p, vocab_size):
  """The peer: bool mask, where, categorical (optionally top-k then top-p)."""
  r, vm = logits.shape
  lanes = jnp.arange(32, dtype=jnp.int32)
  bits = (jax.lax.shift_right_logical(mask[:, :, None], lanes[None, None, :]) & 1) == 1
  legal = bits.reshape(r, -1)[:, :vocab_size]
  legal = jnp.pad(legal, ((0, 0), (0, vm - vocab_size)))
  z = jnp.where(legal, logits.astype(jnp.float32), -jnp.inf) / temperature
  if top_k:
    vals, ids = jax.lax.top_k(z, top_k)
    probs = jax.nn.softmax(vals, axis=-1)
    before = jnp.cumsum(probs, axis=-1) - probs
    vals = jnp.where(before < top_p, vals, -jnp.inf)
    pick = jax.random.categorical(key, vals, axis=-1)
    return jnp.take_along_axis(ids, pick[:, None], -1)[:, 0]
  return jax.random.categorical(key, z, axis=-1)


def _time(fn, repeats):
  jax.block_until_ready(fn())                        # compile + warm up
  times = []
  for _ in range(repeats):
    t = time.perf_counter()
    jax.block_until_ready(fn())
    times.append(time.perf_counter() - t)
  return statistics.median(times)


def peak_bandwidth():
  kind = jax.devices()[0].device_kind
  for name, peak in HBM_PEAK_BYTES_PER_S.items():
    if name in kind:
      return kind, peak
  return kind, None


def run(rows_list, vocab, width, dtype, repeats, impl):
  rng = np.random.default_rng(0)
  on_gpu = jax.default_backend() == "gpu"
  kind, peak = peak_bandwidth()
  results = []
  configs = {"plain T=1": dict(temperature=1.0, top_k=0, top_p=1.0),
             "top-k 50 + top-p 0.9": dict(temperature=0.8, top_k=50, top_p=0.9)}
  for name, cfg in configs.items():
    for r in rows_list:
      logits = jnp.asarray(rng.normal(size=(r, width)).astype(np.float32) * 3, dtype)
      words = -(-vocab // 32)
      mask = jnp.asarray(rng.integers(-2**31, 2**31, size=(r, words), dtype=np.int64)
                         .astype(np.int32))
      mask = mask.at[:, -1].set(mask[:, -1] & ((1 << (vocab % 32 or 32)) - 1)
                                if vocab % 32 else mask[:, -1])
      enabled = jnp.ones((r,), bool)
      params = ip.SamplingParams.create(r, **cfg)
      seed = jnp.arange(r, dtype=jnp.uint32)
      position = jnp.zeros((r,), jnp.int32)
      ours = jax.jit(lambda lg, m: ip.masked_sample(lg, m, enabled, params, seed, position,
                                                    vocab_size=vocab, impl=impl))
      peer = jax.jit(lambda lg, m: unfused_sample(lg, m, jax.random.key(0), cfg["temperature"],
                                                  cfg["top_k"], cfg["top_p"], vocab))
      t_ours = _time(lambda: ours(logits, mask), repeats)
      t_peer = _time(lambda: peer(logits, mask), repeats)
      row = dict(config=name, rows=r, vocab=vocab, width=width, dtype=str(jnp.dtype(dtype)),
                 backend=jax.default_backend(), device=kind,
                 impl=ip.resolve_impl(impl), ours_ms=t_ours * 1e3, unfused_ms=t_peer * 1e3,
                 speedup=t_peer / t_ours)
      if on_gpu:
        nbytes = r * width * jnp.dtype(dtype).itemsize + r * words * 4
        row["ours_gbs"] = nbytes / t_ours / 1e9
        if peak:
          row["hbm_fraction"] = nbytes / t_ours / peak
      results.append(row)
      print(json.dumps(row), flush=True)
  return results


def sweep(rows_list, vocab, width, dtype, repeats, blocks, warps, interpret=False):
  """Kernel tiling sweep, plain config; ratio against the default tiling."""
  rng = np.random.default_rng(1)
  words = -(-vocab // 32)
  out = []
  for r in rows_list:
    logits = jnp.asarray(rng.normal(size=(r, width)).astype(np.float32) * 3, dtype)
    mask = jnp.asarray(rng.integers(-2**31, 2**31, size=(r, words), dtype=np.int64)
                       .astype(np.int32)) & jnp.int32(0x7FFFFFFF)
    args = (logits, mask, jnp.ones((r,), bool), ip.SamplingParams.create(r),
            jnp.arange(r, dtype=jnp.uint32), jnp.zeros((r,), jnp.int32))
    default = ip.BlockSizes.get_default()
    run_one = lambda b: ip.masked_sample_kernel(*args, vocab_size=vocab, block=b,
                                                interpret=interpret)
    t_default = _time(lambda: run_one(default), repeats)
    for bw in blocks:
      for nw in warps:
        b = ip.BlockSizes(bw, nw, default.num_stages)
        try:
          t = _time(lambda: run_one(b), repeats)
        except Exception as e:  # a tiling the compiler rejects is a result, not a crash
          print(json.dumps(dict(sweep=True, rows=r, block_words=bw, num_warps=nw,
                                error=str(e)[:200])), flush=True)
          continue
        row = dict(sweep=True, rows=r, block_words=bw, num_warps=nw, ms=t * 1e3,
                   vs_default=t_default / t)
        nbytes = r * width * jnp.dtype(dtype).itemsize + r * words * 4
        _, peak = peak_bandwidth()
        if jax.default_backend() == "gpu" and peak:
          row["hbm_fraction"] = nbytes / t / peak
        out.append(row)
        print(json.dumps(row), flush=True)
  return out


def spec(rows_list, vocab, width, dtype, repeats, k, impl):
  """spec_accept (dense q) vs the jnp reference on the same device."""
  rng = np.random.default_rng(2)
  words = -(-vocab // 32)
  out = []
  for b in rows_list:
    p = k + 1
    logits = jnp.asarray(rng.normal(size=(b, p, width)).astype(np.float32) * 3, dtype)
    mask = jnp.full((b, p, words), -1, jnp.int32).at[..., -1].set(
        (1 << (vocab % 32)) - 1 if vocab % 32 else -1)
    q = ip.DenseQ(jax.nn.softmax(jnp.asarray(rng.normal(size=(b, k, width)), jnp.float32)))
    drafts = jnp.asarray(rng.integers(0, vocab, (b, k)), jnp.int32)
    args = dict(logits=logits, mask=mask, mask_enabled=jnp.ones((b,), bool),
                states=jnp.zeros((b, p), jnp.int8), drafts=drafts,
                n_drafts=jnp.full((b,), k, jnp.int32), q=q,
                params=ip.SamplingParams.create(b), seed=jnp.arange(b, dtype=jnp.uint32),
                position=jnp.zeros((b,), jnp.int32))
    ours = jax.jit(lambda a: ip.spec_accept(**a, vocab_size=vocab, impl=impl))
    ref = jax.jit(lambda a: ip.spec_accept_reference(**a, vocab_size=vocab))
    t_ours, t_ref = _time(lambda: ours(args), repeats), _time(lambda: ref(args), repeats)
    row = dict(spec=True, rows=b, k=k, impl=ip.resolve_impl(impl), ours_ms=t_ours * 1e3,
               reference_ms=t_ref * 1e3, speedup=t_ref / t_ours)
    out.append(row)
    print(json.dumps(row), flush=True)
  return out


def main(argv=None):
  ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  ap.add_argument("--rows", default="8,32,128")
  ap.add_argument("--vocab", type=int, default=151_669, help="tokenizer V (mask width)")
  ap.add_argument("--width", type=int, default=151_936, help="logits width Vm")
  ap.add_argument("--dtype", default="bfloat16")
  ap.add_argument("--repeats", type=int, default=5)
  ap.add_argument("--impl", default=None, help="kernel | reference | interpret (default auto)")
  ap.add_argument("--json", default=None, help="write all rows to this file")
  ap.add_argument("--sweep", default=None, help="block_words list: kernel tiling sweep only")
  ap.add_argument("--warps", default="8", help="num_warps list for --sweep")
  ap.add_argument("--spec", type=int, default=0, help="also time spec_accept with this K")
  args = ap.parse_args(argv)
  rows = [int(x) for x in args.rows.split(",")]
  dtype = jnp.dtype(args.dtype)
  if args.sweep:
    results = sweep(rows, args.vocab, args.width, dtype, args.repeats,
                    [int(x) for x in args.sweep.split(",")],
                    [int(x) for x in args.warps.split(",")], interpret=args.impl == "interpret")
    if args.json:
      with open(args.json, "w") as f:
        json.dump(results, f, indent=1)
    return 0
  results = run(rows, args.vocab, args.width, dtype, args.repeats, args.impl)
  spec_rows = spec(rows, args.vocab, args.width, dtype, args.repeats, args.spec,
                   args.impl) if args.spec else []
  print(f"\n{'config':24s} {'R':>4s} {'ours ms':>9s} {'unfused ms':>11s} {'speedup':>8s}"
        f" {'HBM %':>6s}")
  for r in results:
    hbm = f"{100 * r['hbm_fraction']:.0f}" if "hbm_fraction" in r else "-"
    print(f"{r['config']:24s} {r['rows']:4d} {r['ours_ms']:9.2f} {r['unfused_ms']:11.2f} "
          f"{r['speedup']:8.2f} {hbm:>6s}")
  for r in spec_rows:
    print(f"spec_accept K={r['k']:<2d} dense q       {r['rows']:4d} {r['ours_ms']:9.2f} "
          f"{r['reference_ms']:11.2f} {r['speedup']:8.2f}   (vs jnp reference)")
  if args.json:
    with open(args.json, "w") as f:
      json.dump(results + spec_rows, f, indent=1)
  return 0


if __name__ == "__main__":
  sys.exit(main())
