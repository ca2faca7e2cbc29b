"""Is every engine step at this machine's roofline, and where does each gap live?

Measured in one run, on whatever device JAX picks (CPU here, a GPU where there is one):
  denominators  memory bandwidth of a GEMV stream (CPU: `_timing.gemv_bandwidth`, f32, 453 MB;
                GPU: a 1 GiB matrix in the model dtype) and the dense rate of one large product
                (CPU: f32 2048^3; GPU: 8192^3 in the model dtype);
  steps         the round's own jitted device steps (`runtime._round._JIT[verify_step]` over
                [anchor, drafts] with the bucketed `attention_span`, then
                `_JIT[finish_step]`, unmasked and with a packed mask) on a random-weight model
                of the target's shapes in the engine's default (unrolled) layout, at
                M = B x P positions per step: decode = M lanes x 1 position, verify = 1 lane x
                M positions, batched verify = 4 lanes x M/4 positions; decode(1) also at KV
                capacity 512 and 4096 with the same sequence;
  pieces        one lane x M rows of each part of a step: each layer product (qkv, o, gate_up,
                down) for one layer and all layers chained, attention over the span, the
                elementwise work (norms, RoPE, softmax, SwiGLU activation), the LM head, the KV
                write and mask unpack + acceptance (`finish_step` with a packed mask); at
                M = 1 also attention of 4 and 8 lanes x 1 position (a batched decode's) and
                the KV write at the other capacities;
  thunks        the instructions of each step's compiled ENTRY computation that become runtime
                work (`_roofline_report.entry_thunks`);
  lanes         decode(B) / decode(1) at B = 1, 4, 8, 16 (--lanes) for the stacked and unrolled
                layouts, with the CPU kernels and with XLA's own ops (`_roofline_lanes`); last,
                or alone with --only lanes.

Roofline of a step or piece = max(bytes / bandwidth, FLOPs / dense rate). A step's bytes are
every weight it streams (layers, final norm, LM head), the KV read of its span, the new K/V
written, the logits written by verify and read by finish, and the mask words; its FLOPs are
2 x matmul params x M plus attention (4 x B x P x span x N x H per layer; the span holds the
new positions too).

  .venv/bin/python benchmarks/roofline.py [--dtype float32] [--repeats 10] [--capacity 1024]
      [--context 150] [--model SmolLM2-135M-Instruct] [--quick] [--budget S] [--json FILE]
      [--write] [--lanes 1 4 8 16] [--only lanes]
  .venv/bin/python benchmarks/roofline.py --from-json FILE --out REPORT

`--write` writes docs/results/roofline.md and docs/results/roofline.json (with --only lanes: that
section of the JSON replaced, the other sections kept, the page rewritten); `--from-json` renders
a run measured elsewhere (docs/results/roofline_h200.md, from `scripts/gpu_check.sh`).
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import datetime
import json
import statistics
import sys
import time
from collections import namedtuple
from pathlib import Path
from typing import Callable

_START = time.perf_counter()  # --budget counts from here (imports included)
ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
from flax import nnx  # noqa: E402

import _roofline_lanes as lanes_section  # noqa: E402
import _roofline_report as report  # noqa: E402
from _roofline_report import (Shape, attention_flops, layer_matrices, roofline_ms,  # noqa: E402
                              step_cost, step_shapes)
import _timing  # noqa: E402
from infernix_jax import mask_layout  # noqa: E402
from infernix_jax import models as im  # noqa: E402
from infernix_jax import pallas as ip  # noqa: E402
from infernix_jax.models import config as presets  # noqa: E402
from infernix_jax.models import layers as _layers  # noqa: E402
from infernix_jax.models import cpu_kernels, packed_gemm  # noqa: E402
from infernix_jax.models import unrolled  # noqa: E402

REPORT_MD = ROOT / "docs/results/roofline.md"
REPORT_JSON = ROOT / "docs/results/roofline.json"
STEP_M = (1, 2, 5, 8, 20, 40)
PIECE_M = (1, 5, 20)
QUICK_SHAPES = (Shape("decode", 1, 1), Shape("verify", 1, 5), Shape("batched verify", 4, 2))
QUICK_PIECE_M = (1,)
CAPACITIES = (512, 4096)  # decode(1) at these KV capacities besides --capacity
BATCHED_ATTENTION_LANES = (4, 8)  # at M = 1 also attention for these lanes x 1 position
GPU_STREAM_SHAPE = (16384, 32768)  # 1 GiB in bf16: far above the L2 of any GPU
CPU_DENSE_N, GPU_DENSE_N = 2048, 8192
QUICK_DENSE_N = 1024  # --quick on the CPU


# --- what is measured ------------------------------------------------------------------------
@dataclasses.dataclass
class Timed:
  """A callable to time (it blocks until its results are ready) and its roofline inputs."""

  fn: Callable[[], None]
  bytes: float
  flops: float


def interleaved_ms(fns: dict[str, Callable[[], None]], repeats: int, budget: float = 0.0,
                   notes: list | None = None) -> dict[str, float]:
  """Median ms of each callable over `repeats` interleaved rounds (load drift on a shared
  machine hits every entry alike); each is called once first (compile, warm caches).

  Past `budget` (`over_budget`) no further callable is compiled and no further round starts
  (the first callable and the first round always run); the result then lacks the callables
  never compiled, and `notes` says what was cut.
  """
  warm = {}
  for name, fn in fns.items():
    if warm and over_budget(budget):
      break
    fn()
    warm[name] = fn
  if notes is not None and len(warm) < len(fns):
    notes.append(f"not compiled: {', '.join(n for n in fns if n not in warm)}")
  times = {name: [] for name in warm}
  for done in range(repeats):
    if done and over_budget(budget):
      if notes is not None:
        notes.append(f"{', '.join(warm)}: {done} of {repeats} repeats")
      break
    for name, fn in warm.items():
      t0 = time.perf_counter()
      fn()
      times[name].append(time.perf_counter() - t0)
  return {name: 1e3 * statistics.median(t) for name, t in times.items()}


# --- denominators ----------------------------------------------------------------------------
def on_accelerator() -> bool:
  """Whether JAX runs on something other than the CPU (a GPU here)."""
  return jax.devices()[0].platform != "cpu"


def denominators(dtype: str, repeats: int, quick: bool = False) -> dict:
  """{"bandwidth" bytes/s, "dense_rate" FLOP/s, "bandwidth_how", "dense_how"} of this device
  (`quick`: the CPU's dense rate from a product of QUICK_DENSE_N, an eighth of the work)."""
  if on_accelerator():
    dt = jnp.dtype(dtype)
    a = jnp.full(GPU_STREAM_SHAPE, 0.5, dt)
    x = jnp.ones((GPU_STREAM_SHAPE[1],), dt)
    gemv = jax.jit(lambda a, x: a @ x)
    bandwidth = a.nbytes / _timing.median_ms(lambda: gemv(a, x).block_until_ready(),
                                             repeats) * 1e3
    how_bw = f"{dtype} GEMV over a {GPU_STREAM_SHAPE[0]}x{GPU_STREAM_SHAPE[1]} matrix " \
             f"({a.nbytes / 2**30:.0f} GiB)"
    del a
    n, dense_dtype = GPU_DENSE_N, dt
  else:
    bandwidth = _timing.gemv_bandwidth(repeats)
    rows, cols = _timing.GEMV_SHAPE
    how_bw = f"f32 GEMV over a {rows}x{cols} matrix ({rows * cols * 4 / 1e6:.0f} MB)"
    n, dense_dtype = QUICK_DENSE_N if quick else CPU_DENSE_N, jnp.float32
  a = jnp.full((n, n), 0.5, dense_dtype)
  b = jnp.full((n, n), 0.25, dense_dtype)
  mm = jax.jit(lambda a, b: a @ b)
  dense_rate = 2 * n**3 / _timing.median_ms(lambda: mm(a, b).block_until_ready(),
                                            max(2, repeats // 4)) * 1e3
  return {"bandwidth": bandwidth, "dense_rate": dense_rate, "bandwidth_how": how_bw,
          "dense_how": f"{jnp.dtype(dense_dtype).name} {n}^3 product"}


# --- the model and its costs -----------------------------------------------------------------
def build_model(cfg: im.ModelConfig, packed: bool | None = None):
  """(graphdef, state) of a random-weight `cfg` model in the engine's default (unrolled)
  layout (`packed`: as `unrolled.unroll`): step time depends on shapes, not on weights."""
  model = unrolled.unroll(im.Transformer(cfg, rngs=nnx.Rngs(0)), packed=packed)
  return nnx.split(model)


def packed_head(state):
  """The model's panel-packed LM head (`Transformer.packed_head`), or None."""
  return state["packed_head"][...] if "packed_head" in state else None


def model_costs(cfg: im.ModelConfig, state) -> dict:
  """What a step streams: {"weight_bytes" (every parameter: layers, final norm, LM head; an
  embedding the head does not read is left out, its gather reads a few rows, and so is an
  unpacked head beside a packed copy), "matmul_params" (the layers' products and the LM
  head), "kv_itemsize"}."""
  total = sum(x.nbytes for x in jax.tree.leaves(state))
  head = cfg.vocab_size * cfg.dim * jnp.dtype(cfg.jnp_dtype).itemsize
  unread = (head if not cfg.tie_embeddings else 0) + (head if packed_head(state) is not None else 0)
  return {"weight_bytes": total - unread,
          "matmul_params": cfg.num_layers * sum(layer_matrices(cfg).values())
                           + cfg.vocab_size * cfg.dim,
          "kv_itemsize": jnp.dtype(cfg.jnp_dtype).itemsize}


# --- the engine's device steps ---------------------------------------------------------------
Steps = namedtuple("Steps", "verify finish attention_span proposal source")
_MirrorProposal = namedtuple("_MirrorProposal", "drafts n q")  # a pytree like Proposal


def engine_steps() -> Steps:
  """The round's jitted verify and finish steps (`runtime._round._JIT`).

  Where the runtime package cannot be imported (a device image without the constraint
  libraries that `infernix_jax.runtime` imports), the same composition is jitted here from
  the models and pallas packages the steps call; `source` says which ran.
  """
  try:
    from infernix_jax.runtime import _round
    from infernix_jax.runtime.drafters.base import Proposal
  except ImportError as e:
    return _mirror_steps(f"a mirror of runtime._round's steps (the runtime failed to import: "
                         f"{e})")
  return Steps(_round._JIT[_round.verify_step], _round._JIT[_round.finish_step],
               _round.attention_span, lambda d, n: Proposal(d, n, ip.OneHotQ()),
               "runtime._round._JIT[verify_step], _JIT[finish_step]")


def _mirror_steps(source: str) -> Steps:
  """verify_step / finish_step / attention_span of `runtime._round`, rebuilt without it."""
  span_step = 512

  def verify_step(graphdef, state, cache, lengths, anchor, drafts, span=None):
    cache = cache.with_lengths(lengths)
    tokens = jnp.concatenate([anchor[:, None], drafts], axis=1)  # [B, P]
    return im.verify(graphdef, state, cache, tokens, span=span)

  def finish_step(logits, mask, states, enabled, prop, params, seed, position, bias=None, *,
                  vocab_size, masked_q):
    del masked_q  # one-hot proposals: masked q changes nothing
    out = ip.spec_accept(logits, mask, enabled, states, prop.drafts, prop.n, prop.q, params,
                         seed, position, vocab_size=vocab_size)
    return out.accepted, out.tokens, out.flags, prop.n

  def attention_span(lengths, p, capacity):
    need = -(-(int(np.max(lengths)) + p) // span_step) * span_step
    return None if need >= capacity else need

  return Steps(jax.jit(verify_step, static_argnames=("graphdef", "span"),
                       donate_argnames=("cache",)),
               jax.jit(finish_step, static_argnames=("vocab_size", "masked_q")),
               attention_span, lambda d, n: _MirrorProposal(d, n, ip.OneHotQ()), source)


def finish_inputs(cfg, steps: Steps, lanes: int, positions: int, context: int,
                  temperature: float, seed: int = 0) -> dict:
  """Everything `finish_step` takes besides the logits, as the round passes it for a host
  drafter: drafts and n as host arrays, a random packed mask [B, P, W] (about half the ids
  legal), READY states, every lane enabled, per-lane SamplingParams, seeds and positions."""
  b, p = lanes, positions
  w = mask_layout.mask_words(cfg.vocab_size)
  rng = np.random.default_rng(seed)
  mask = rng.integers(-2**31, 2**31, (b, p, w), dtype=np.int64).astype(np.int32)
  return dict(
      mask=jnp.asarray(mask), states=jnp.zeros((b, p), jnp.int8),
      enabled=jnp.ones((b,), bool),
      prop=steps.proposal(np.ones((b, p - 1), np.int32), np.full((b,), p - 1, np.int32)),
      params=ip.SamplingParams.create(b, temperature=temperature),
      seed=jnp.arange(b, dtype=jnp.uint32), position=jnp.full((b,), context, jnp.int32))


class StepCase:
  """One step shape on its own KV cache: the round's verify, then its finish, blocking on both
  (the verify's cache is donated and threaded through, as in the round)."""

  def __init__(self, steps: Steps, split, cfg, shape: Shape, capacity: int, context: int,
               temperature: float):
    self.steps, (self.graphdef, self.state), self.cfg = steps, split, cfg
    b, p = shape.lanes, shape.positions
    self.cache = im.KVCache.init(cfg, b, capacity)
    self.lengths = np.full((b,), context, np.int32)
    self.anchor = np.ones((b,), np.int32)
    self.drafts = np.ones((b, p - 1), np.int32)
    self.span = steps.attention_span(self.lengths, p, capacity)
    self.kv_span = self.span or capacity  # cache positions attention reads
    self.fin = finish_inputs(cfg, steps, b, p, context, temperature)

  def _verify_args(self):
    return (self.graphdef, self.state, self.cache, self.lengths, self.anchor, self.drafts)

  def _finish_args(self, logits, masked: bool):
    f = self.fin
    mask, states, enabled = (f["mask"], f["states"], f["enabled"]) if masked else (None,) * 3
    return (logits, mask, states, enabled, f["prop"], f["params"], f["seed"], f["position"],
            None)

  def run(self, masked: bool) -> None:
    """verify then finish (with the packed mask or without), until both are done."""
    logits, _, self.cache = self.steps.verify(*self._verify_args(), span=self.span)
    out = self.steps.finish(*self._finish_args(logits, masked),
                            vocab_size=self.cfg.vocab_size, masked_q=False)
    jax.block_until_ready((out, self.cache.k))

  def verify_hlo(self) -> str:
    """The compiled verify step's optimized HLO text (the jit cache holds it already)."""
    return self.steps.verify.lower(*self._verify_args(), span=self.span).compile().as_text()

  def thunks(self) -> dict[str, int]:
    """Runtime thunks of each compiled step (`entry_thunks` of its optimized HLO)."""
    logits = jax.ShapeDtypeStruct((self.cache.batch, self.drafts.shape[1] + 1,
                                   self.cfg.vocab_size), jnp.float32)
    out = {"verify": report.entry_thunks(self.verify_hlo())}
    for key, masked in (("finish", False), ("finish_masked", True)):
      finish = self.steps.finish.lower(*self._finish_args(logits, masked),
                                       vocab_size=self.cfg.vocab_size, masked_q=False)
      out[key] = report.entry_thunks(finish.compile().as_text())
    return out


# --- pieces (1 lane x M positions) -----------------------------------------------------------
def _nbytes(*arrays) -> float:
  return float(sum(np.prod(a.shape) * jnp.dtype(a.dtype).itemsize for a in arrays))


def _without_kernels(fn, *args):
  """fn(*args) with the CPU kernels off while it traces (`cpu_kernels.disabled`)."""
  with cpu_kernels.disabled():
    return fn(*args)


def _block(fn, *args):
  """A timed callable: fn(*args) until its results are ready."""
  return lambda: jax.block_until_ready(fn(*args))


def product_pieces(cfg, layer_params: list[dict], m: int) -> dict[str, Timed]:
  """Each layer product at M rows for layer 0 ("qkv (one layer)", ...) and every layer's four
  products chained as in the unrolled layer ("layer products (all L layers)")."""
  dt = cfg.jnp_dtype
  widths = {"qkv": cfg.dim, "o": cfg.num_heads * cfg.head_dim, "gate_up": cfg.dim,
            "down": cfg.ffn_dim}
  out = {}
  for name, width in widths.items():
    w = layer_params[0][name]
    x = jnp.full((1, m, width), 0.01, dt)
    fn = jax.jit(lambda w, x, name=name: _layers.dense(x, {name: w}, name))
    y = jax.eval_shape(fn, w, x)
    out[f"{name} (one layer)"] = Timed(_block(fn, w, x), _nbytes(w, x, y), 2.0 * m * w.size)
  mats = [{k: p[k] for k in widths} for p in layer_params]
  nh, f = cfg.num_heads * cfg.head_dim, cfg.ffn_dim

  def chain(mats, x):
    """[1, M, D] through every layer's qkv, o, gate_up, down (no attention, norms or cache)."""
    for p in mats:
      qkv = _layers.dense(x, p, "qkv")  # [1, M, (N + 2G)H]
      kv = qkv[..., nh:].sum(-1, keepdims=True)  # keeps the k/v columns of the product alive
      x = x + _layers.dense(qkv[..., :nh], p, "o") + kv
      gate_up = _layers.dense(x, p, "gate_up")  # [1, M, 2F]
      x = x + _layers.dense(jax.nn.silu(gate_up[..., :f]) * gate_up[..., f:], p, "down")
    return x

  x = jnp.full((1, m, cfg.dim), 0.01, dt)
  params = cfg.num_layers * sum(layer_matrices(cfg).values())
  fn = jax.jit(chain)
  out["layer products (all L layers)"] = Timed(
      _block(fn, mats, x), _nbytes(*[w for p in mats for w in p.values()], x, x), 2.0 * m * params)
  return out


def span_mask(m: int, context: int, span: int):
  """bool [1, M, S']: new row t (at slot context + t) reads the committed slots and the new
  slots up to its own, as the model's layers mask the cache span."""
  slots = np.arange(span)[None, None, :]
  return jnp.asarray(slots <= context + np.arange(m)[None, :, None])


def attention_piece(cfg, m: int, capacity: int, context: int, span: int,
                    lanes: int = 1, kernels: bool = True) -> Timed:
  """Every layer's attention of `lanes` x M new rows over the first `span` slots of a
  [L, B, S, G, H] cache that already holds their K/V (`layers.span_attention`: grouped QK^T,
  masked f32 softmax, PV), through the span attention kernel where it applies unless
  `kernels` is False."""
  dt, l, g, n, h = cfg.jnp_dtype, cfg.num_layers, cfg.num_kv_heads, cfg.num_heads, cfg.head_dim
  rng = np.random.default_rng(1)
  q = jnp.asarray(rng.standard_normal((l, lanes, m, n, h)), dt)  # [L, B, M, N, H]
  cache_k = jnp.asarray(rng.standard_normal((l, lanes, capacity, g, h)), dt)  # [L, B, S, G, H]
  cache_v = jnp.asarray(rng.standard_normal((l, lanes, capacity, g, h)), dt)
  mask = jnp.broadcast_to(span_mask(m, context, span), (lanes, m, span))

  def attend(q, cache_k, cache_v, mask):
    outs = [_layers.span_attention(q[i], cache_k, cache_v, i, mask) for i in range(l)]
    return jnp.stack(outs)  # [L, B, M, N, H]

  kv_read = 2 * l * lanes * span * g * h * jnp.dtype(dt).itemsize
  args = (q, cache_k, cache_v, mask)
  with contextlib.nullcontext() if kernels else cpu_kernels.disabled():
    compiled = jax.jit(attend).lower(*args).compile()  # traced here: the choice is kept
  return Timed(_block(compiled, *args), kv_read + _nbytes(q, q),
               attention_flops(cfg, lanes, m, span))


def elementwise_piece(cfg, layer_params: list[dict], m: int, context: int, span: int) -> Timed:
  """Every layer's elementwise work at M rows: two RMSNorms, RoPE on q and k (tables built
  once), the masked softmax over the span's keys, SwiGLU's silu(gate) * up, two residual adds.
  Roofline bytes: every input read once and every output written once."""
  dt, l, g, n, h = cfg.jnp_dtype, cfg.num_layers, cfg.num_kv_heads, cfg.num_heads, cfg.head_dim
  f, keys = cfg.ffn_dim, span
  rng = np.random.default_rng(2)
  x = jnp.asarray(rng.standard_normal((1, m, cfg.dim)), dt)  # [1, M, D]
  q = jnp.asarray(rng.standard_normal((l, 1, m, n, h)), dt)
  k = jnp.asarray(rng.standard_normal((l, 1, m, g, h)), dt)
  scores = jnp.asarray(rng.standard_normal((l, 1, g, n // g, m, keys)), jnp.float32)
  gate_up = jnp.asarray(rng.standard_normal((l, 1, m, 2 * f)), dt)  # [L, 1, M, 2F]
  norms = [(p["attn_norm"], p["mlp_norm"]) for p in layer_params]
  mask = span_mask(m, context, keys)
  positions = jnp.asarray(context + np.arange(m, dtype=np.int32)[None, :])  # [1, M]

  def elementwise(x, norms, q, k, scores, gate_up, mask, positions):
    cos, sin = _layers.rope_tables(positions, h, cfg.rope_theta)
    qs, ks, probs, acts = [], [], [], []
    for i, (attn_norm, mlp_norm) in enumerate(norms):
      x = x + _layers.rms_norm(x, attn_norm, cfg.norm_eps)
      qs.append(_layers.apply_rope(q[i], cos, sin))
      ks.append(_layers.apply_rope(k[i], cos, sin))
      masked = jnp.where(mask[:, None, None], scores[i] * h ** -0.5, _layers.NEG_INF)
      probs.append(jax.nn.softmax(masked, axis=-1))
      acts.append(jax.nn.silu(gate_up[i, ..., :f]) * gate_up[i, ..., f:])
      x = x + _layers.rms_norm(x, mlp_norm, cfg.norm_eps)
    return x, jnp.stack(qs), jnp.stack(ks), jnp.stack(probs), jnp.stack(acts)

  args = (x, norms, q, k, scores, gate_up, mask, positions)
  fn = jax.jit(elementwise)
  outs = jax.eval_shape(fn, *args)
  return Timed(_block(fn, *args), _nbytes(*jax.tree.leaves(args), *jax.tree.leaves(outs)), 0.0)


def head_piece(cfg, state, m: int) -> Timed:
  """Final RMSNorm and the LM head at M rows -> f32 logits [1, M, Vm], as
  `Transformer.logits` computes them."""
  packed = packed_head(state)
  if packed is not None:
    head, product = packed, packed_gemm.matmul
  else:
    head = state["embed"][...] if cfg.tie_embeddings else state["lm_head"][...]
    spec = "...D,VD->...V" if cfg.tie_embeddings else "...D,DV->...V"
    product = lambda h, w: jnp.einsum(spec, h, w, preferred_element_type=jnp.float32)
  norm = state["final_norm"][...]
  hidden = jnp.full((1, m, cfg.dim), 0.01, cfg.jnp_dtype)

  def logits(norm, head, hidden):
    return product(_layers.rms_norm(hidden, norm, cfg.norm_eps), head)

  return Timed(_block(jax.jit(logits), norm, head, hidden),
               _nbytes(head, norm, hidden) + m * cfg.vocab_size * 4,
               2.0 * m * cfg.dim * cfg.vocab_size)


class KVWritePiece:
  """Every layer's new K and V for M rows written in place into a donated [L, 1, S, G, H]
  cache (one dynamic update slice per layer and array: the O(M) write a step needs, whatever
  S). Roofline bytes: the new entries, read and written."""

  def __init__(self, cfg, m: int, capacity: int, context: int):
    dt = cfg.jnp_dtype
    shape = (cfg.num_layers, 1, capacity, cfg.num_kv_heads, cfg.head_dim)
    self.cache = (jnp.zeros(shape, dt), jnp.zeros(shape, dt))
    new = (cfg.num_layers, 1, m, cfg.num_kv_heads, cfg.head_dim)  # [L, 1, M, G, H]
    self.k, self.v = jnp.ones(new, dt), jnp.ones(new, dt)
    self.start = jnp.int32(context)

    def write(cache_k, cache_v, k, v, start):
      for i in range(cfg.num_layers):
        corner = (i, 0, start, 0, 0)
        cache_k = jax.lax.dynamic_update_slice(cache_k, k[i:i + 1], corner)
        cache_v = jax.lax.dynamic_update_slice(cache_v, v[i:i + 1], corner)
      return cache_k, cache_v

    self.fn = jax.jit(write, donate_argnums=(0, 1))
    self.bytes = 2 * _nbytes(self.k, self.v)

  def __call__(self) -> None:
    self.cache = self.fn(*self.cache, self.k, self.v, self.start)
    jax.block_until_ready(self.cache)


def finish_piece(cfg, steps: Steps, m: int, context: int, temperature: float) -> Timed:
  """Mask unpack + acceptance: `finish_step` on f32 logits [1, M, Vm] with a packed mask
  (the pallas spec_accept kernel on GPU, its jnp reference elsewhere). Roofline bytes: the
  logits and the mask words read once."""
  fin = finish_inputs(cfg, steps, 1, m, context, temperature)
  logits = jnp.asarray(np.random.default_rng(3).standard_normal((1, m, cfg.vocab_size)),
                       jnp.float32)

  def run():
    out = steps.finish(logits, fin["mask"], fin["states"], fin["enabled"], fin["prop"],
                       fin["params"], fin["seed"], fin["position"], None,
                       vocab_size=cfg.vocab_size, masked_q=False)
    jax.block_until_ready(out)

  return Timed(run, _nbytes(logits, fin["mask"]), 0.0)


def piece_cases(cfg, split, steps: Steps, m: int, args) -> dict[str, tuple[Timed, bool]]:
  """{name: (Timed, aggregate)} of every piece at M rows; aggregate pieces (all layers, the
  head, the KV write, finish) are the parts a step is made of, the one-layer products are
  for reference."""
  graphdef, state = split
  model = nnx.merge(graphdef, state)
  layer_params = [layer.params() for layer in model.layers.layers]
  span = steps.attention_span(np.full((1,), args.context), m, args.capacity) or args.capacity
  cases = {name: (t, "all L" in name) for name, t in product_pieces(cfg, layer_params,
                                                                      m).items()}
  cases[f"attention over the span ({span}, all L layers)"] = (
      attention_piece(cfg, m, args.capacity, args.context, span), True)
  cases["norms, RoPE, softmax, SwiGLU act (all L layers)"] = (
      elementwise_piece(cfg, layer_params, m, args.context, span), True)
  cases["LM head (final norm + logits)"] = (head_piece(cfg, state, m), True)
  kv = KVWritePiece(cfg, m, args.capacity, args.context)
  cases[f"KV write (all L layers, capacity {args.capacity})"] = (Timed(kv, kv.bytes, 0.0), True)
  cases["mask unpack + acceptance (finish_step, packed mask)"] = (
      finish_piece(cfg, steps, m, args.context, args.temperature), True)
  return cases


# --- the run ---------------------------------------------------------------------------------
def over_budget(budget: float) -> bool:
  """Whether `budget` seconds (0: no limit) have passed since this script started."""
  return bool(budget) and time.perf_counter() - _START > budget


def measure_steps(result: dict, ctx: dict, shapes: list[Shape], capacities: tuple) -> None:
  """Times every shape (unmasked and masked) and decode(1) at each extra capacity (unmasked),
  interleaved; appends rows to result["steps"] and result["capacities"]."""
  cfg, args, den = ctx["cfg"], ctx["args"], result["denominators"]
  make = lambda shape, cap: StepCase(ctx["steps"], ctx["split"], cfg, shape, cap,  # noqa: E731
                                     args.context, args.temperature)
  cases = {shape.name: make(shape, args.capacity) for shape in shapes}
  fns = {}
  for name, case in cases.items():
    fns[name] = lambda case=case: case.run(False)
    fns[name + " masked"] = lambda case=case: case.run(True)
  caps = {cap: make(Shape("decode", 1, 1), cap) for cap in capacities}
  fns.update({f"capacity {cap}": lambda case=case: case.run(False) for cap, case in caps.items()})
  peers = {}  # the same steps with XLA's dot for every product (first group only)
  if capacities and "xla_split" in ctx:
    peers = {shape.name: StepCase(ctx["steps"], ctx["xla_split"], cfg, shape, args.capacity,
                                  args.context, args.temperature) for shape in shapes}
    fns.update({f"xla {name}": lambda case=case: _without_kernels(case.run, False)
                for name, case in peers.items()})
  ms = interleaved_ms(fns, args.repeats, args.budget, result["skipped"])
  for shape in shapes:
    case = cases[shape.name]
    if shape.name + " masked" not in ms:  # cut by the budget before it compiled
      continue
    row = {"name": shape.name, "kind": shape.kind, "lanes": shape.lanes,
           "positions": shape.positions, "m": shape.m, "capacity": args.capacity,
           "span": case.kv_span, "ms": ms[shape.name], "ms_masked": ms[shape.name + " masked"]}
    for suffix, masked in (("", False), ("_masked", True)):
      nbytes, flops = step_cost(cfg, ctx["costs"], shape, case.kv_span, masked)
      roof, bound = roofline_ms(nbytes, flops, den)
      row.update({f"bytes{suffix}": nbytes, f"flops{suffix}": flops,
                  f"roofline_ms{suffix}": roof, f"bound{suffix}": bound,
                  f"ratio{suffix}": row[f"ms{suffix}"] / roof})
    row["thunks"] = case.thunks()
    result["steps"].append(row)
    print(f"{shape.name:26s} {row['ms']:9.3f} ms  masked {row['ms_masked']:9.3f} ms  roofline "
          f"{row['roofline_ms']:8.3f} ms ({row['bound']})  x{row['ratio']:5.2f} / "
          f"x{row['ratio_masked']:5.2f}  thunks {sum(row['thunks'].values())}", flush=True)
  for name in peers:
    if f"xla {name}" in ms:
      result["xla_steps"].append({"name": name, "ms": ms[f"xla {name}"]})
      print(f"{name + ' with XLA ops':26s} {ms[f'xla {name}']:9.3f} ms", flush=True)
  decode1 = Shape("decode", 1, 1)
  for cap, case in caps.items():
    if f"capacity {cap}" not in ms:
      continue
    nbytes, flops = step_cost(cfg, ctx["costs"], decode1, case.kv_span, False)
    roof, bound = roofline_ms(nbytes, flops, den)
    t = ms[f"capacity {cap}"]
    result["capacities"].append({"capacity": cap, "span": case.kv_span, "ms": t,
                                 "roofline_ms": roof, "bound": bound, "ratio": t / roof,
                                 "sized_ops": report.sized_ops(case.verify_hlo(), cap)})
    print(f"decode(1) at capacity {cap:5d}  {t:9.3f} ms  roofline {roof:8.3f} ms", flush=True)


def measure_pieces(result: dict, ctx: dict, m: int) -> None:
  """Times every piece at M rows (interleaved; at M = 1 also the KV write at each of
  CAPACITIES) and appends rows to result["pieces"]."""
  cfg, args, den = ctx["cfg"], ctx["args"], result["denominators"]
  cases = piece_cases(cfg, ctx["split"], ctx["steps"], m, args)
  if m == 1:
    for cap in CAPACITIES:
      if cap != args.capacity:
        kv = KVWritePiece(cfg, m, cap, args.context)
        cases[f"KV write (all L layers, capacity {cap})"] = (Timed(kv, kv.bytes, 0.0), False)
    span = ctx["steps"].attention_span(np.full((1,), args.context), m, args.capacity) \
        or args.capacity
    for lanes in BATCHED_ATTENTION_LANES:  # what a batched decode step's attention costs
      cases[f"attention over the span ({span}, all L layers, {lanes} lanes x 1)"] = (
          attention_piece(cfg, m, args.capacity, args.context, span, lanes), False)
  if "xla_split" in ctx:  # the same attention with XLA's ops (the kernels' peer)
    for lanes in (1, *BATCHED_ATTENTION_LANES) if m == 1 else (1,):
      span = ctx["steps"].attention_span(np.full((1,), args.context), m, args.capacity) \
          or args.capacity
      cases[f"attention over the span ({span}, all L layers, {lanes} lanes x {m}), XLA ops"] = (
          attention_piece(cfg, m, args.capacity, args.context, span, lanes, False), False)
  ms = interleaved_ms({name: t.fn for name, (t, _) in cases.items()}, args.repeats, args.budget,
                      result["skipped"])
  for name, (t, aggregate) in cases.items():
    if name not in ms:
      continue
    roof, bound = roofline_ms(t.bytes, t.flops, den)
    row = {"name": name, "m": m, "aggregate": aggregate, "ms": ms[name], "roofline_ms": roof,
           "bound": bound, "ratio": ms[name] / roof, "bytes": t.bytes, "flops": t.flops}
    result["pieces"].append(row)
    print(f"M={m:<3d} {name:56s} {row['ms']:9.3f} ms  roofline {roof:8.4f} ms  "
          f"x{row['ratio']:7.1f}", flush=True)


def plan(result: dict, ctx: dict, shapes: list[Shape], piece_m) -> list[tuple[str, Callable]]:
  """The run's parts as (label, task), most telling first, since --budget cuts the tail:
  decode(1) and verify(5) with the capacity variants, the pieces at the two smallest M, the
  other shapes by kind, the remaining pieces."""
  first = [s for s in shapes if s.name in ("decode(1)", "verify(5)")]
  extra = tuple(c for c in CAPACITIES if c != ctx["args"].capacity)
  groups = [(first, extra)] + [([s for s in shapes if s not in first and s.kind == kind], ())
                               for kind in ("decode", "verify", "batched verify")]
  steps = [(", ".join(s.name for s in group) or "capacities",
            lambda group=group, caps=caps: measure_steps(result, ctx, group, caps))
           for group, caps in groups if group or caps]
  pieces = [(f"pieces at M={m}", lambda m=m: measure_pieces(result, ctx, m)) for m in piece_m]
  lanes = [("lanes", lambda: result.update(lanes=measure_lanes(
      ctx["args"], ctx["cfg"], ctx["steps"], result["denominators"])))]
  if ctx["args"].quick:
    lanes = []
  return steps[:1] + pieces[:2] + steps[1:] + pieces[2:] + lanes


def measure_lanes(args, cfg: im.ModelConfig, steps: Steps, den: dict) -> dict:
  """The report's lanes entry: decode(B) for B in --lanes, both layouts
  (`_roofline_lanes.measure`), with rooflines from the denominators `den`."""
  def make_case(own_steps, split, lanes):
    return StepCase(own_steps, split, cfg, Shape("decode", lanes, 1), args.capacity,
                    args.context, args.temperature)

  def roofline(state, lanes, span):
    nbytes, flops = step_cost(cfg, model_costs(cfg, state), Shape("decode", lanes, 1), span,
                              False)
    return roofline_ms(nbytes, flops, den)

  entry = lanes_section.measure(args, cfg, steps, make_case, interleaved_ms, roofline,
                                _timing.machine(), tuple(args.lanes))
  entry["denominators"] = den
  for row in entry["rows"]:
    print(f"lanes {row['layout']:9s} {row['ops']:12s} decode({row['lanes']:2d}) "
          f"{row['ms']:9.3f} ms", flush=True)
  return entry


def run(args, cfg: im.ModelConfig, emit: Callable[[dict], None]) -> dict:
  """Everything the report shows, as one JSON-able dict (emitted after each part)."""
  shapes = list(QUICK_SHAPES) if args.quick else step_shapes(STEP_M)
  piece_m = QUICK_PIECE_M if args.quick else PIECE_M
  device = jax.devices()[0]
  result = {"command": args.command, "date": datetime.date.today().isoformat(),
            "machine": _timing.machine(), "device": f"{device.platform}: {device.device_kind}",
            "jax": jax.__version__, "model": cfg.name or "custom", "dtype": cfg.dtype,
            "capacity": args.capacity, "context": args.context, "repeats": args.repeats,
            "temperature": args.temperature, "pallas_impl": ip.resolve_impl(),
            "steps": [], "capacities": [], "xla_steps": [], "pieces": [], "skipped": [], "complete": False}
  den = denominators(cfg.dtype, max(2, args.repeats), quick=args.quick)
  result["denominators"] = den
  print(f"jax {jax.__version__} on {result['device']}; bandwidth {den['bandwidth'] / 1e9:.1f} "
        f"GB/s ({den['bandwidth_how']}); dense {den['dense_rate'] / 1e12:.3f} TFLOP/s "
        f"({den['dense_how']})", flush=True)
  split = build_model(cfg)
  steps = engine_steps()
  costs = model_costs(cfg, split[1])
  result["steps_source"] = steps.source
  kernels = cpu_kernels.available()
  result["kernels"] = (
      f"the CPU kernels (models/cpu_kernels.py): packed-weight products up to "
      f"{packed_gemm.KERNEL_MAX_ROWS} rows, span attention up to "
      f"{_layers.ATTENTION_KERNEL_MAX_ROWS} new rows per lane" if kernels else "XLA's own ops")
  result["weights"] = {**costs, "floor_ms": 1e3 * costs["weight_bytes"] / den["bandwidth"]}
  print(f"{result['model']}: {costs['weight_bytes'] / 1e6:.1f} MB of weights, floor "
        f"{result['weights']['floor_ms']:.3f} ms; steps: {steps.source}", flush=True)
  emit(result)
  ctx = {"cfg": cfg, "args": args, "split": split, "steps": steps, "costs": costs}
  if kernels:  # the kernels' peer, timed beside decode(1) and verify(5)
    ctx["xla_split"] = build_model(cfg, packed=False)
  for label, task in plan(result, ctx, shapes, piece_m):
    if over_budget(args.budget):
      result["skipped"].append(label)
      continue
    task()
    emit(result)
  result["goals"] = report.goals(result)
  result["complete"] = True
  emit(result)
  return result


def main(argv: list[str] | None = None, cfg: im.ModelConfig | None = None) -> int:
  """The CLI; `cfg` (tests) replaces --model."""
  ap = argparse.ArgumentParser(description=__doc__,
                               formatter_class=argparse.RawDescriptionHelpFormatter)
  ap.add_argument("--model", default=presets.SMOLLM2_135M.name, choices=sorted(presets.PRESETS),
                  help="the shapes to build (random weights)")
  ap.add_argument("--dtype", default="float32", choices=("float32", "bfloat16"),
                  help="model (weights, activations, KV cache) dtype")
  ap.add_argument("--repeats", type=int, default=10, help="timed calls per step and piece")
  ap.add_argument("--capacity", type=int, default=1024, help="KV capacity S of the step shapes")
  ap.add_argument("--context", type=int, default=150, help="committed positions in the cache")
  ap.add_argument("--temperature", type=float, default=0.0,
                  help="sampling temperature of finish (0: greedy, the engine's default)")
  ap.add_argument("--quick", action="store_true",
                  help=f"steps {', '.join(s.name for s in QUICK_SHAPES)}; pieces at M in "
                       f"{QUICK_PIECE_M}; at most 3 repeats; on the CPU the "
                       f"dense rate from a {QUICK_DENSE_N}^3 product")
  ap.add_argument("--budget", type=float, default=0.0,
                  help="seconds after which remaining step groups and pieces are skipped "
                       "(0: no limit); what was measured is still reported")
  ap.add_argument("--json", default="", help="write the results here (also while running)")
  ap.add_argument("--write", action="store_true",
                  help=f"write {REPORT_MD.relative_to(ROOT)} and {REPORT_JSON.relative_to(ROOT)}")
  ap.add_argument("--from-json", default="",
                  help="measure nothing: print the report of a run's --json (one a GPU run of "
                       "scripts/gpu_check.sh brought back); with --out, write it there")
  ap.add_argument("--out", default="", help="the report's path for --from-json")
  ap.add_argument("--lanes", type=int, nargs="+", default=list(lanes_section.LANES),
                  help="B of the lanes section's decode(B), the first the ratios' baseline")
  ap.add_argument("--only", choices=("lanes",), default=None,
                  help="measure one section alone; with --write it replaces that section of "
                       f"{REPORT_JSON.relative_to(ROOT)} and rewrites the page, keeping the "
                       "other sections as they were measured")
  args = ap.parse_args(argv)
  if args.from_json:
    text = report.markdown(json.loads(Path(args.from_json).read_text()))
    print(text)
    if args.out:
      Path(args.out).write_text(text)
    return 0
  if args.repeats < 1:
    ap.error(f"--repeats={args.repeats} must be at least 1")
  if args.context < 1 or args.context + max(STEP_M) > min(args.capacity, *CAPACITIES):
    ap.error(f"--context={args.context} must be at least 1 and leave room for {max(STEP_M)} "
             f"positions in "
             f"every capacity (--capacity={args.capacity}, {CAPACITIES})")
  if min(args.lanes) < 1:
    ap.error(f"--lanes={args.lanes} must all be at least 1")
  if args.quick:
    args.repeats = min(args.repeats, 3)
  args.command = "benchmarks/roofline.py " + " ".join(sys.argv[1:] if argv is None else argv)
  cfg = (cfg or presets.PRESETS[args.model]).replace(dtype=args.dtype)
  if args.only == "lanes":
    return only_lanes(args, cfg, ap)

  def emit(result: dict) -> None:
    if args.json:
      Path(args.json).write_text(json.dumps(result, indent=1) + "\n")

  result = run(args, cfg, emit)
  text = report.markdown(result)
  print(text)
  if args.write:
    REPORT_MD.write_text(text)
    REPORT_JSON.write_text(json.dumps(result, indent=1) + "\n")
    print(f"wrote {REPORT_MD.relative_to(ROOT)} and {REPORT_JSON.relative_to(ROOT)}")
  return 0


def only_lanes(args, cfg: im.ModelConfig, ap: argparse.ArgumentParser) -> int:
  """--only lanes: the lanes section alone; --write puts it into the report's JSON (which must
  exist and be of the same model and dtype) and rewrites the page from it."""
  base = None
  if args.write:
    if not REPORT_JSON.exists():
      ap.error(f"--only lanes --write replaces a section of {REPORT_JSON.relative_to(ROOT)}, "
               f"which does not exist: run without --only first")
    base = json.loads(REPORT_JSON.read_text())
    if (base.get("model"), base.get("dtype")) != (cfg.name or "custom", cfg.dtype):
      ap.error(f"{REPORT_JSON.relative_to(ROOT)} reports {base.get('model')} "
               f"{base.get('dtype')}, not {cfg.name or 'custom'} {cfg.dtype}: measure that "
               f"model with --model/--dtype, or rewrite the whole report without --only")
  den = denominators(cfg.dtype, max(2, args.repeats), quick=args.quick)
  entry = measure_lanes(args, cfg, engine_steps(), den)
  print("\n".join(report.lanes_section(entry)))
  if args.json:
    Path(args.json).write_text(json.dumps(entry, indent=1) + "\n")
  if base is not None:
    base["lanes"] = entry
    REPORT_JSON.write_text(json.dumps(base, indent=1) + "\n")
    REPORT_MD.write_text(report.markdown(base))
    print(f"wrote the lanes section of {REPORT_MD.relative_to(ROOT)} and "
          f"{REPORT_JSON.relative_to(ROOT)}")
  return 0


if __name__ == "__main__":
  sys.exit(main())
