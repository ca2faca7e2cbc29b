"""What the GPU check measures with: random models built layer by layer on the device, a
JSONL log, and loop timers (warm up, time N iterations, block once)."""

from __future__ import annotations

import datetime
import json
import time
from pathlib import Path

import jax
import jax.numpy as jnp
from flax import nnx

from infernix_jax import models as im
from infernix_jax.models import transformer as _transformer
from infernix_jax.models import unrolled

# Toy stand-ins of the dry run: the same families (Llama-style, Qwen3 with qk-norm and an
# untied head), a few layers, so every step runs on a CPU in seconds.
TOY_SMOLLM2 = im.SMOLLM2_135M.replace(vocab_size=512, dim=64, num_layers=2, num_heads=4,
                                      num_kv_heads=2, head_dim=16, ffn_dim=128,
                                      dtype="bfloat16", name="toy SmolLM2")
TOY_QWEN3_8B = im.QWEN3_8B.replace(vocab_size=1000, dim=64, num_layers=3, num_heads=4,
                                   num_kv_heads=2, head_dim=16, ffn_dim=160,
                                   name="toy Qwen3-8B")


def model_configs(dry_run: bool) -> dict[str, im.ModelConfig]:
  """{"SmolLM2": cfg, "Qwen3-8B": cfg} in bf16 (toy shapes in the dry run)."""
  if dry_run:
    return {"SmolLM2": TOY_SMOLLM2, "Qwen3-8B": TOY_QWEN3_8B}
  return {"SmolLM2": im.SMOLLM2_135M.replace(dtype="bfloat16"), "Qwen3-8B": im.QWEN3_8B}


class Log:
  """Appends one JSON line per measurement to `path` as it goes (flushed each line)."""

  def __init__(self, path: Path, group: str, dry_run: bool):
    self.path, self.group, self.dry_run = Path(path), group, dry_run
    self.path.parent.mkdir(parents=True, exist_ok=True)
    dev = jax.devices()[0]
    self.base = dict(device_kind=dev.device_kind, platform=dev.platform,
                     jax=jax.__version__, dry_run=dry_run)

  def write(self, label: str, config: dict, figures: dict, **extra) -> dict:
    line = dict(self.base, group=self.group, label=label, config=config, figures=figures,
                time=datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
                **extra)
    with self.path.open("a") as f:
      f.write(json.dumps(line) + "\n")
    shown = ", ".join(f"{k} {v:.4g}" if isinstance(v, float) else f"{k} {v}"
                      for k, v in figures.items())
    print(f"[{self.group}] {label}: {shown or extra.get('skipped', '')}", flush=True)
    return line

  def skip(self, label: str, config: dict, why: str) -> dict:
    return self.write(label, config, {}, skipped=why)


class Budget:
  """A group's time budget: `left()` seconds remain; `over()` once it is spent."""

  def __init__(self, seconds: float):
    self.seconds, self.start = seconds, time.perf_counter()

  def left(self) -> float:
    return self.seconds - (time.perf_counter() - self.start)

  def over(self) -> bool:
    return self.left() <= 0


def loop_ms(call, iters: int, warmup: int = 2) -> tuple[float, float]:
  """(wall ms per iteration, host ms per iteration) of `iters` back-to-back calls of
  `call()` (which returns arrays and must not block): warm up, enqueue all, block once on
  the last result. Host ms is the time to enqueue, before the one block."""
  for _ in range(warmup):
    jax.block_until_ready(call())
  start = time.perf_counter()
  out = None
  for _ in range(iters):
    out = call()
  enqueued = time.perf_counter()
  jax.block_until_ready(out)
  end = time.perf_counter()
  return 1e3 * (end - start) / iters, 1e3 * (enqueued - start) / iters


def synced_ms(call, iters: int, warmup: int = 2) -> float:
  """Wall ms per call of `call()` with a block after each call (the synced-per-call figure:
  dispatch and device time in series, what a host loop waiting on every step pays)."""
  for _ in range(warmup):
    jax.block_until_ready(call())
  start = time.perf_counter()
  for _ in range(iters):
    jax.block_until_ready(call())
  return 1e3 * (time.perf_counter() - start) / iters


_init = jax.jit(_transformer.init_param, static_argnums=(0, 1, 2))


@jax.jit
def _set_layer(stacked, value, index):
  return jax.lax.dynamic_update_index_in_dim(stacked, value.astype(stacked.dtype), index, 0)


_set_layer_donated = jax.jit(_set_layer.__wrapped__, donate_argnums=(0,))


def random_model(cfg: im.ModelConfig, layout: str, seed: int = 0):
  """(graphdef, state) of a random-weight `cfg` model in `layout` ("unrolled" or
  "stacked"), every parameter drawn on the device one layer at a time in the model dtype:
  no host copy of the weights (step time depends on shapes, not weights)."""
  model = nnx.eval_shape(lambda: im.Transformer(cfg, rngs=nnx.Rngs(0)))
  key = jax.random.key(seed)
  keys = iter(jax.random.split(key, 4 + 32 * cfg.num_layers))
  dtype = cfg.jnp_dtype
  model.embed = nnx.Param(_init("embed", (cfg.vocab_size, cfg.dim), dtype, next(keys)))
  model.final_norm = nnx.Param(jnp.ones((cfg.dim,), dtype))
  if not cfg.tie_embeddings:
    model.lm_head = nnx.Param(_init("lm_head", (cfg.dim, cfg.vocab_size), dtype, next(keys)))
  shapes = sorted(im.layers.layer_param_shapes(cfg).items())

  def one_layer():
    return {name: _init(name, shape, dtype, next(keys)) for name, shape in shapes}

  if layout == "stacked":
    layers = model.layers
    stacked = {name: jnp.zeros((cfg.num_layers, *shape), dtype) for name, shape in shapes}
    for index in range(cfg.num_layers):
      for name, value in one_layer().items():
        stacked[name] = _set_layer_donated(stacked[name], value, index)
    for name, value in stacked.items():
      setattr(layers, name, nnx.Param(value))
  elif layout == "unrolled":
    model.layers = _unrolled_layers(cfg, (one_layer() for _ in range(cfg.num_layers)))
  else:
    raise ValueError(f"layout={layout!r} must be 'unrolled' or 'stacked'")
  return nnx.split(model)


def _unrolled_layers(cfg, layer_params):
  """`UnrolledLayers` built from per-layer device arrays as they are drawn. A checkout whose
  `UnrolledLayers` still takes stacked arrays (and copies them to the host) gets them
  stacked, for models under 1 GB only: never a host copy of a large model."""
  import inspect
  if "layer_params" in inspect.signature(unrolled.UnrolledLayers.__init__).parameters:
    return unrolled.UnrolledLayers(cfg, layer_params, weights=cfg.dtype, packed=False)
  per_layer = list(layer_params)
  nbytes = sum(v.nbytes for layer in per_layer for v in layer.values())
  if nbytes > 1e9:
    raise RuntimeError(f"this checkout's models/unrolled.py builds the unrolled layout "
                       f"through host copies of stacked arrays; refused for {cfg.name} "
                       f"({nbytes / 1e9:.1f} GB): the check needs the per-layer builder "
                       f"UnrolledLayers(cfg, layer_params, ...)")
  stacked = {name: jnp.stack([layer[name] for layer in per_layer]) for name in per_layer[0]}
  return unrolled.UnrolledLayers(cfg, stacked, weights=cfg.dtype, packed=False)


def decode_cache(cfg, lanes: int, capacity: int, filled: int) -> im.KVCache:
  """An empty cache whose rows claim `filled` committed positions (steady-state decode at
  that offset; the values are zeros, which costs the same)."""
  cache = im.KVCache.init(cfg, lanes, capacity)
  return cache.with_lengths(jnp.full((lanes,), filled, jnp.int32))
