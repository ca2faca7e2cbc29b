"""The lanes section of `benchmarks/roofline.py`: decode(B) / decode(1) for both layouts.

decode(B) = the round's verify step over B lanes x 1 position, then its finish (unmasked), at
B in LANES, for the stacked layout (`lax.scan` over [L, ...] weights) and the engine's default
unrolled layout, each with the CPU kernels where they run and with XLA's own ops (what a GPU
runs). Every case is timed interleaved with the others, so load drift on a shared machine hits
them alike; the load average before and after is recorded with the figures.

Axis letters (docs/CONTRACTS.md): B lanes, L layers.
"""

from __future__ import annotations

import datetime
import os
from typing import Callable

import jax
import jax.numpy as jnp
from flax import nnx

from infernix_jax import models as im
from infernix_jax.models import cpu_kernels, phases, unrolled

LANES = (1, 4, 8, 16)
LAYOUTS = ("stacked", "unrolled")
KERNELS, XLA = "CPU kernels", "XLA ops"


def build(cfg: im.ModelConfig, layout: str, packed: bool | None = None):
  """(graphdef, state) of a random-weight `cfg` model in `layout` (unrolled: `packed` as
  `unrolled.unroll`)."""
  model = im.Transformer(cfg, rngs=nnx.Rngs(0))
  if layout == "unrolled":
    unrolled.unroll(model, packed=packed)
  return nnx.split(model)


def xla_steps(steps):
  """`steps` with a verify step of its own for XLA's ops: the round's verify step
  (`runtime._round.verify_step`: the lanes' lengths, [anchor, drafts], the model's verify
  phase) over the phase's unjitted function, jitted afresh. The phase's own jit keys its
  traces by shapes alone, so the stacked layout's weights (the same arrays either way) would
  reuse the program traced with the kernels."""
  def verify_step(graphdef, state, cache, lengths, anchor, drafts, span=None):
    cache = cache.with_lengths(lengths)
    tokens = jnp.concatenate([anchor[:, None], drafts], axis=1)  # [B, P]
    return phases.verify.__wrapped__(graphdef, state, cache, tokens, span=span)

  return steps._replace(verify=jax.jit(verify_step, static_argnames=("graphdef", "span"),
                                       donate_argnames=("cache",)))


def load() -> str:
  """This machine's load averages over 1, 5 and 15 minutes."""
  try:
    return " / ".join(f"{x:.2f}" for x in os.getloadavg())
  except OSError:
    return "unknown"


def measure(args, cfg: im.ModelConfig, steps, make_case: Callable, timer: Callable,
            roofline: Callable, machine: str, lanes=LANES) -> dict:
  """Times decode(B) for every layout, products-and-attention choice and B in `lanes`.

  Args:
    args: the roofline CLI's arguments (capacity, context, temperature, repeats, budget,
      command).
    steps: the round's steps (`roofline.engine_steps`).
    make_case: (steps, split, lanes) -> a StepCase of decode(lanes) (`roofline.StepCase`).
    timer: ({name: callable}, repeats, budget, notes) -> {name: median ms}
      (`roofline.interleaved_ms`).
    roofline: (state, lanes, span) -> (ms, "memory" | "compute"): decode(lanes)'s roofline
      on this machine for a model of that state.
    machine: this machine's description (`_timing.machine`).
    lanes: the B values, the first the baseline of the ratios.

  Returns:
    the report's "lanes" entry: conditions and one row per (layout, ops, B).
  """
  kernels = cpu_kernels.available()
  choices = (KERNELS, XLA) if kernels else (XLA,)
  fns, cases = {}, {}
  for layout in LAYOUTS:
    for ops in choices:
      split = build(cfg, layout, packed=None if ops == KERNELS else False)
      own = steps if ops == KERNELS else xla_steps(steps)
      for b in lanes:
        case = make_case(own, split, b)
        cases[(layout, ops, b)] = case
        if ops == KERNELS or not kernels:
          fns[(layout, ops, b)] = lambda case=case: case.run(False)
        else:
          fns[(layout, ops, b)] = lambda case=case: _without_kernels(case.run, False)
  started = datetime.datetime.now(datetime.timezone.utc)
  before = load()
  skipped = []
  ms = timer(fns, args.repeats, args.budget, skipped)
  rows = []
  for (layout, ops, b), t in ms.items():
    case = cases[(layout, ops, b)]
    hlo = case.verify_hlo() if ops == KERNELS else _without_kernels(case.verify_hlo)
    roof, bound = roofline(case.state, b, case.kv_span)
    rows.append({"layout": layout, "ops": ops, "lanes": b, "ms": t, "span": case.kv_span,
                 "kernel_calls": hlo.count("custom-call("), "roofline_ms": roof,
                 "bound": bound})
  device = jax.devices()[0]
  return {"command": args.command, "started": started.strftime("%Y-%m-%d %H:%M UTC"),
          "machine": machine, "device": f"{device.platform}: {device.device_kind}",
          "jax": jax.__version__,
          "load_before": before, "load_after": load(), "repeats": args.repeats,
          "capacity": args.capacity, "context": args.context, "lanes": list(lanes),
          "steps_source": steps.source, "rows": rows, "skipped": skipped}


def _without_kernels(fn, *args):
  """fn(*args) with the CPU kernels off while it traces (`cpu_kernels.disabled`)."""
  with cpu_kernels.disabled():
    return fn(*args)
