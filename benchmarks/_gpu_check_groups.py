"""The GPU check's measurement groups (see gpu_check.py): each writes its JSONL lines."""

from __future__ import annotations

import datetime
import functools
import json
import math
import os
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np

import gpu_check as plan_mod
from _gpu_check_setup import (decode_cache, loop_ms, model_configs, random_model, synced_ms)
from infernix_jax import models as im
from infernix_jax import pallas as ip
from infernix_jax.pallas import dispatch as ip_dispatch

ENGINE_LOOP_NOTE = (
    "stand-in: the engine's multi-round device loop (runtime/_round.py, the callback "
    "bridge's while_loop) calls the host for grammar masks and needs the constraint stack "
    "and a tokenizer, so this times a fori_loop of decode steps with on-device argmax "
    "against the same steps dispatched one by one")


def read_lines(path: Path) -> list[dict]:
  """The JSONL's lines (none if the file is absent)."""
  if not Path(path).exists():
    return []
  return [json.loads(line) for line in Path(path).read_text().splitlines() if line.strip()]


@functools.partial(jax.jit, static_argnums=(0,), donate_argnums=(2,))
def _decode_argmax(graphdef, state, cache, tokens):
  logits, _, cache = im.decode(graphdef, state, cache, tokens)
  return jnp.argmax(logits, -1).astype(jnp.int32), cache


@functools.partial(jax.jit, static_argnums=(0, 4), donate_argnums=(2,))
def _decode_loop(graphdef, state, cache, tokens, steps):
  def body(_, carry):
    cache, tokens = carry
    logits, _, cache = im.decode(graphdef, state, cache, tokens)
    return cache, jnp.argmax(logits, -1).astype(jnp.int32)
  cache, tokens = jax.lax.fori_loop(0, steps, body, (cache, tokens))
  return tokens, cache


class Stepper:
  """Decode steps of one model on an empty cache, as the timers call them. The rows'
  lengths advance with each step (attention spans the whole capacity, so the cost does
  not depend on them) and go back to the start before they would pass the capacity."""

  def __init__(self, cfg, graphdef, state, lanes: int, capacity: int):
    self.gd, self.st, self.lanes, self.capacity = graphdef, state, lanes, capacity
    self.start = capacity // 8
    self.cache = decode_cache(cfg, lanes, capacity, self.start)
    self.at = self.start
    self.tokens = jnp.ones((lanes,), jnp.int32)

  def _room(self, steps: int):
    if self.at + steps >= self.capacity:  # rare: a fresh lengths array (the old is donated)
      self.cache = self.cache.with_lengths(jnp.full((self.lanes,), self.start, jnp.int32))
      self.at = self.start
    self.at += steps

  def decode(self):
    self._room(1)
    logits, _, self.cache = im.decode(self.gd, self.st, self.cache, self.tokens)
    return logits

  def argmax_steps(self, steps: int):
    """`steps` decode steps dispatched one by one, each fed the previous argmax."""
    self._room(steps)
    tokens = self.tokens
    for _ in range(steps):
      tokens, self.cache = _decode_argmax(self.gd, self.st, self.cache, tokens)
    return tokens

  def loop(self, steps: int):
    """`steps` decode steps inside one fori_loop (one dispatch)."""
    self._room(steps)
    tokens, self.cache = _decode_loop(self.gd, self.st, self.cache, self.tokens, steps)
    return tokens


def _iters(dry_run: bool, full: int) -> int:
  return max(3, full // 10) if dry_run else full


def host_device(log, budget, dry_run):
  for name, cfg in model_configs(dry_run).items():
    labels = [f"{name} 1 lane {how}" for how in (
        "synced per call", f"{plan_mod.ASYNC_CALLS} async calls",
        f"{plan_mod.LOOP_STEPS}-step fori_loop")]
    if budget.over():
      for label in labels:
        log.skip(label, {"model": cfg.name}, "group budget spent")
      continue
    gd, st = random_model(cfg, "unrolled")
    run = Stepper(cfg, gd, st, 1, 512 if not dry_run else 64)
    config = dict(model=cfg.name, layout="unrolled", lanes=1, capacity=run.cache.k.shape[2],
                  dtype=cfg.dtype)
    ms = synced_ms(run.decode, _iters(dry_run, 30))
    log.write(labels[0], config, {"ms_per_step": ms})
    wall, host = loop_ms(run.decode, plan_mod.ASYNC_CALLS)
    log.write(labels[1], config, {"ms_per_step": wall, "host_ms_per_step": host})
    steps = plan_mod.LOOP_STEPS
    wall, host = loop_ms(lambda: run.loop(steps), _iters(dry_run, 10))
    log.write(labels[2], dict(config, steps=steps),
              {"ms_per_step": wall / steps, "host_ms_per_step": host / steps})
    del gd, st, run


def lanes(log, budget, dry_run):
  cfg = model_configs(dry_run)["SmolLM2"]
  bs, caps, _, _ = plan_mod.sizes(dry_run)
  for layout in ("unrolled", "stacked"):
    gd, st = random_model(cfg, layout) if not budget.over() else (None, None)
    for b in bs:
      for s in caps:
        label, config = f"SmolLM2 {layout} B={b} S={s}", dict(
            model=cfg.name, layout=layout, lanes=b, capacity=s, dtype=cfg.dtype)
        if budget.over():
          log.skip(label, config, "group budget spent")
          continue
        run = Stepper(cfg, gd, st, b, s)
        wall, host = loop_ms(run.decode, _iters(dry_run, plan_mod.ASYNC_CALLS))
        log.write(label, config, {"ms_per_step": wall, "host_ms_per_step": host})
        del run
    del gd, st


def cmdbuf(log, budget, dry_run, mode, flag):
  cfg = model_configs(dry_run)["SmolLM2"]
  steps = plan_mod.LOOP_STEPS
  labels = [f"SmolLM2 cmdbuf {mode} {how}" for how in ("decode(1)", f"{steps}-step fori_loop")]
  config = dict(model=cfg.name, layout="unrolled", lanes=1, mode=mode, flag=flag or "(none)",
                xla_flags=os.environ.get("XLA_FLAGS", ""))
  if dry_run:
    config["note"] = "the CPU backend has no command buffers: the flag is parsed, not used"
  gd, st = random_model(cfg, "unrolled")
  run = Stepper(cfg, gd, st, 1, 512 if not dry_run else 64)
  wall, host = loop_ms(run.decode, plan_mod.ASYNC_CALLS)
  log.write(labels[0], config, {"ms_per_step": wall, "host_ms_per_step": host})
  if budget.over():
    log.skip(labels[1], config, "group budget spent")
    return
  wall, host = loop_ms(lambda: run.loop(steps), _iters(dry_run, 10))
  log.write(labels[1], dict(config, steps=steps),
            {"ms_per_step": wall / steps, "host_ms_per_step": host / steps})


def device_loop(log, budget, dry_run):
  cfg = model_configs(dry_run)["SmolLM2"]
  steps = plan_mod.LOOP_STEPS
  gd, st = random_model(cfg, "unrolled")
  for b in plan_mod.sizes(dry_run)[0][:2]:
    config = dict(model=cfg.name, layout="unrolled", lanes=b, steps=steps,
                  engine_loop="not measured", note=ENGINE_LOOP_NOTE)
    labels = [f"SmolLM2 B={b} {how}" for how in ("per-step dispatch",
                                                 f"{steps}-step device loop")]
    if budget.over():
      for label in labels:
        log.skip(label, config, "group budget spent")
      continue
    run = Stepper(cfg, gd, st, b, 512 if not dry_run else 64)
    for label, call in zip(labels, (lambda: run.argmax_steps(steps), lambda: run.loop(steps))):
      wall, host = loop_ms(call, _iters(dry_run, 10))
      log.write(label, config, {"ms_per_step": wall / steps, "host_ms_per_step": host / steps})


# --- dispatch table ------------------------------------------------------------------------

_SAMPLING = {"greedy": dict(temperature=0.0), "plain": dict(temperature=1.0),
             "top-k + top-p": dict(temperature=0.8, top_k=50, top_p=0.9)}


def _vocab(dry_run):
  return (1000, 1024) if dry_run else (151_669, 151_936)  # V, Vm


def _mask(rng, shape_rw, vocab):
  """Random legal sets (about half the vocabulary), bits past V cleared."""
  mask = rng.integers(-2**31, 2**31, size=shape_rw, dtype=np.int64).astype(np.int32)
  if vocab % 32:
    mask[..., -1] &= (1 << (vocab % 32)) - 1
  return jnp.asarray(mask)


def _time_pair(log, label, config, op, size, kernel, reference, same, dry_run, rows):
  """Times kernel and reference (same inputs, same process), writes the line and the
  table row."""
  iters = _iters(dry_run, 20)
  k_ms, _ = loop_ms(kernel, iters)
  r_ms, _ = loop_ms(reference, iters)
  ref_out = jax.block_until_ready(reference())
  agree = bool(same(jax.block_until_ready(kernel()), ref_out))
  figures = {"kernel_ms": k_ms, "reference_ms": r_ms, "speedup": r_ms / k_ms,
             "same_result": agree}
  if hasattr(ref_out, "accepted"):  # shows the case: all drafts accepted or an early stop
    figures["mean_accepted"] = float(np.mean(np.asarray(ref_out.accepted)))
  log.write(label, config, figures)
  rows.append((op, size, k_ms, r_ms))


def _same(a, b):
  return all(np.array_equal(np.asarray(x), np.asarray(y))
             for x, y in zip(jax.tree.leaves(a), jax.tree.leaves(b)))


def dispatch(log, budget, dry_run, table: Path):
  impl = "interpret" if jax.default_backend() == "cpu" else "kernel"
  vocab, width = _vocab(dry_run)
  words = -(-vocab // 32)
  rng = np.random.default_rng(0)
  rows: list[tuple] = []
  _, _, rs, bs = plan_mod.sizes(dry_run)
  sample = [jax.jit(functools.partial(ip_dispatch.masked_sample, vocab_size=vocab, impl=which))
            for which in (impl, "reference")]  # one compile per R for every sampling config
  for r in rs:
    logits = jnp.asarray(rng.normal(size=(r, width)).astype(np.float32) * 3, jnp.bfloat16)
    mask = _mask(rng, (r, words), vocab)
    common = dict(mask_enabled=jnp.ones((r,), bool), seed=jnp.arange(r, dtype=jnp.uint32),
                  position=jnp.zeros((r,), jnp.int32))
    for name, sampling in _SAMPLING.items():
      label = f"masked_sample R={r} {name}"
      config = dict(op="masked_sample", rows=r, vocab=vocab, width=width, dtype="bfloat16",
                    impl=impl, sampling=sampling)
      if budget.over():
        log.skip(label, config, "group budget spent")
        continue
      params = ip.SamplingParams.create(r, **sampling)
      calls = [functools.partial(fn, logits, mask, params=params, **common) for fn in sample]
      _time_pair(log, label, config, "masked_sample", r, *calls, _same, dry_run, rows)
  k = 4
  accept = {op: [jax.jit(functools.partial(getattr(ip_dispatch, op), vocab_size=vocab,
                                           impl=which)) for which in (impl, "reference")]
            for op in ("spec_accept", "tree_accept")}
  for op in ("spec_accept", "tree_accept"):
    for b in bs:
      for case in ("all accepted", "early rejection"):
        label = f"{op} B={b} {case}"
        config = dict(op=op, lanes=b, vocab=vocab, width=width, dtype="bfloat16", impl=impl,
                      case=case, **({"k": k} if op == "spec_accept" else {"nodes": 8}))
        if budget.over():
          log.skip(label, config, "group budget spent")
          continue
        args = _accept_args(rng, op, b, k, vocab, width, words, case)
        fns = accept[op]
        _time_pair(log, label, config, op, b, lambda: fns[0](**args),
                   lambda: fns[1](**args), _same, dry_run, rows)
  if rows:
    source = (f"benchmarks/gpu_check.py group dispatch on {log.base['device_kind']}, jax "
              f"{jax.__version__}, {datetime.date.today()}: each kernel ({impl}) against its "
              f"jnp reference in the same process, bf16 logits, V = {vocab}"
              + (" (CPU dry run at toy sizes; not a measurement to ship)" if dry_run else ""))
    entry = ip_dispatch.write_table(table, log.base["device_kind"], rows, source)
    log.write("dispatch table", {"table": str(table)},
              {op: spec["kernel_sizes"] for op, spec in entry["ops"].items()})


def _accept_args(rng, op, b, k, vocab, width, words, case):
  """Inputs of spec_accept (chain of k drafts) or tree_accept (8 nodes, depth 4): in "all
  accepted" each draft is its parent position's argmax drawn from q = p (ratio 1); in
  "early rejection" each is the least likely token, q one-hot on it (dense, so both cases
  share one compiled program)."""
  if op == "spec_accept":
    positions, parents = k + 1, np.arange(-1, k)  # draft t (0-based) is judged at position t
  else:
    positions, parents = 8, np.array([0, 0, 0, 1, 1, 3, 3, 5])
  logits = rng.normal(size=(b, positions, width)).astype(np.float32) * 3
  logits[..., vocab:] = -np.inf
  legal = jnp.asarray(logits).astype(jnp.bfloat16).astype(jnp.float32)  # what the ops see
  pick = (jnp.argmax if case == "all accepted" else jnp.argmin)(
      jnp.where(jnp.isfinite(legal), legal, jnp.inf if case != "all accepted" else -jnp.inf),
      axis=-1).astype(jnp.int32)  # [B, positions]
  p = jax.nn.softmax(legal, axis=-1)
  q = p if case == "all accepted" else jax.nn.one_hot(pick, width, dtype=jnp.float32)
  args = dict(logits=legal.astype(jnp.bfloat16),
              mask=jnp.full((b, positions, words), -1, jnp.int32).at[..., -1].set(
                  (1 << (vocab % 32)) - 1 if vocab % 32 else -1),
              mask_enabled=jnp.ones((b,), bool),
              states=jnp.zeros((b, positions), jnp.int8),
              params=ip.SamplingParams.create(b), seed=jnp.arange(b, dtype=jnp.uint32),
              position=jnp.zeros((b,), jnp.int32))
  if op == "spec_accept":
    args.update(drafts=pick[:, :k], n_drafts=jnp.full((b,), k, jnp.int32),
                q=ip.DenseQ(q[:, :k]))
  else:
    par = jnp.asarray(parents, jnp.int32)
    tokens = pick[:, par]  # node t's token: an extreme of its parent's distribution
    args.update(tokens=tokens, parents=jnp.broadcast_to(par, (b, positions)),
                n_nodes=jnp.full((b,), positions, jnp.int32),
                q=ip.DenseQ(q[:, par]))
  return args


# --- GEMM ----------------------------------------------------------------------------------

def gemm(log, budget, dry_run):
  cfg = model_configs(dry_run)["Qwen3-8B"]
  d, f, h = cfg.dim, cfg.ffn_dim, cfg.head_dim
  shapes = {"qkv": (d, (cfg.num_heads + 2 * cfg.num_kv_heads) * h),
            "o": (cfg.num_heads * h, d), "gate_up": (d, 2 * f), "down": (f, d),
            "lm_head": (d, cfg.vocab_size)}
  for name, (kdim, ndim) in shapes.items():
    nbytes = kdim * ndim * 2
    # Enough distinct copies that the products stream from memory, not from L2.
    copies = 1 if dry_run else max(1, min(8, math.ceil(256e6 / nbytes)))
    weights = [jax.random.normal(jax.random.key(i), (kdim, ndim), jnp.bfloat16)
               for i in range(copies)] if not budget.over() else []
    for m in (1, 8, 40):
      label = f"{name} M={m}"
      config = dict(model=cfg.name, product=name, m=m, k=kdim, n=ndim, dtype="bfloat16",
                    weight_copies=copies)
      if budget.over():
        log.skip(label, config, "group budget spent")
        continue
      x = jax.random.normal(jax.random.key(99), (m, kdim), jnp.bfloat16)
      products = 2 * copies

      @jax.jit
      def chain(x, ws):
        acc = jnp.zeros((x.shape[0], ws[0].shape[1]), jnp.float32)
        for i in range(products):
          acc = acc + jnp.dot(x * (1 + i), ws[i % len(ws)], preferred_element_type=jnp.float32)
        return acc

      wall, _ = loop_ms(lambda: chain(x, weights), _iters(dry_run, 10))
      per = wall / products
      log.write(label, config, {"ms_per_product": per,
                                "weight_gb_per_s": nbytes / per / 1e6,
                                "tflop_per_s": 2 * m * kdim * ndim / per / 1e9})
    del weights
