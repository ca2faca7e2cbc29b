"""The lowered Finish holds no conditional that would wait on the host.

A `stablehlo.case` / `stablehlo.if` that survives to a GPU executable copies its predicate to
the host and waits (and cuts the step's command buffer); a `while` whose trip count depends
on data does the same each iteration. The engine's finish steps (`runtime._round`: the chain's
`finish_step`, the tree's `tree_finish_step`) are lowered for a tiny vocabulary over greedy and
sampled parameters, every q kind, with and without masks, and their StableHLO is walked:
  - under the GPU policy (`_sampling.skip_is_free()` False) no conditional is left;
  - where a skip is free (CPU, TPU) only the named expensive branches of
    `_sampling.SKIPPABLE` remain as conditionals;
  - every `while` compares its counter with a constant.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jaxlib.mlir import ir

from infernix_jax import mask_layout
from infernix_jax import models as im
from infernix_jax import pallas as ip
from infernix_jax.pallas import _sampling
from infernix_jax.runtime import _round
from infernix_jax.runtime.drafters import Proposal

B, K, V, VM = 2, 3, 90, 96
W = -(-V // 32)
P = K + 1
CONDITIONALS = ("stablehlo.case", "stablehlo.if", "mhlo.case", "mhlo.if")


def _params(sampled: bool) -> ip.SamplingParams:
  if sampled:
    return ip.SamplingParams.create(B, temperature=jnp.asarray([0.8, 1.0]), top_k=80,
                                    top_p=0.9, min_p=0.05, presence_penalty=0.3,
                                    history_ids=jnp.zeros((B, 4), jnp.int32),
                                    repetition_penalty=1.2, prompt_ids=[[1, 2], [3]])
  return ip.SamplingParams.create(B, temperature=0.0)


def _q(kind):
  if kind == "onehot":
    return ip.OneHotQ()
  if kind == "sparse":
    return ip.SparseQ(jnp.zeros((B, K, ip.SPARSE_Q_WIDTH), jnp.int32),
                      jnp.zeros((B, K, ip.SPARSE_Q_WIDTH), jnp.float32))
  return ip.DenseQ(jnp.zeros((B, K, VM), jnp.float32))


def _chain_finish(sampled: bool, kind: str, masked: bool, bias: bool):
  mask = jnp.zeros((B, P, W), jnp.int32) if masked else None
  states = jnp.zeros((B, P), jnp.int8) if masked else None
  enabled = jnp.ones((B,), bool) if masked else None
  prop = Proposal(jnp.zeros((B, K), jnp.int32), jnp.full((B,), K, jnp.int32), _q(kind))
  return _round._JIT[_round.finish_step].lower(
      jnp.zeros((B, P, VM), jnp.float32), mask, states, enabled, prop, _params(sampled),
      jnp.zeros((B,), jnp.uint32), jnp.zeros((B,), jnp.int32),
      jnp.zeros((B, P, VM), jnp.float32) if bias else None, vocab_size=V,
      masked_q=kind != "onehot", drop_illegal=False)


def _tree_finish(sampled: bool, masked: bool):
  cfg = im.ModelConfig(vocab_size=VM, dim=32, num_layers=1, num_heads=2, num_kv_heads=1,
                       head_dim=16, ffn_dim=64)
  cache = im.KVCache.init(cfg, batch=B, capacity=16)
  prop = Proposal(jnp.zeros((B, K), jnp.int32), jnp.full((B,), K, jnp.int32), ip.OneHotQ(),
                  jnp.asarray([[-1, 0, 0]] * B, jnp.int32))
  mask = jnp.zeros((B, P, W), jnp.int32) if masked else None
  states = jnp.full((B, P), mask_layout.READY, jnp.int8) if masked else None
  enabled = jnp.ones((B,), bool) if masked else None
  return _round._JIT[_round.tree_finish_step].lower(
      jnp.zeros((B, P, VM), jnp.float32), mask, states, enabled, prop, _params(sampled),
      jnp.zeros((B,), jnp.uint32), jnp.zeros((B,), jnp.int32), cache,
      jnp.zeros((B,), jnp.int32), jnp.zeros((B, P, 32), jnp.float32), vocab_size=V)


FINISHES = {
    **{f"chain-{'sampled' if s else 'greedy'}-{kind}-{'masked' if m else 'free'}":
       (lambda s=s, kind=kind, m=m: _chain_finish(s, kind, m, bias=False))
       for s in (False, True) for kind in ("onehot", "sparse", "dense") for m in (True,)},
    "chain-greedy-onehot-free": lambda: _chain_finish(False, "onehot", False, bias=False),
    "chain-sampled-dense-free": lambda: _chain_finish(True, "dense", False, bias=False),
    "chain-sampled-onehot-bias": lambda: _chain_finish(True, "onehot", True, bias=True),
    "tree-greedy-free": lambda: _tree_finish(False, False),
    "tree-sampled-masked": lambda: _tree_finish(True, True),
}


def _walk(module):
  ops = []

  def visit(op):
    ops.append(op)
    return ir.WalkResult.ADVANCE

  module.operation.walk(visit)
  return ops


def _scope(op) -> str:
  """The named scope of an op's location just above the primitive ('' if none)."""
  loc = str(op.location)
  start = loc.find('"') + 1
  parts = loc[start:loc.find('"', start)].split("/")
  return parts[-2] if len(parts) >= 2 else ""


def _constant_trip_count(op) -> bool:
  """Whether a stablehlo.while stops on its counter against a constant (fori_loop / scan)."""
  cond = op.regions[0].blocks[0]
  ret = list(cond.operations)[-1]
  compare = ret.operands[0].owner
  if compare.name != "stablehlo.compare":
    return False
  return any(getattr(x.owner, "name", "") == "stablehlo.constant" for x in compare.operands)


def _inspect(lowered):
  ops = _walk(lowered.compiler_ir("stablehlo"))
  conds = sorted(_scope(op) for op in ops if op.name in CONDITIONALS)
  data_loops = [str(op.location) for op in ops
                if op.name == "stablehlo.while" and not _constant_trip_count(op)]
  return conds, data_loops


def _lower(name, free: bool, monkeypatch):
  monkeypatch.setattr(_sampling, "skip_is_free", lambda: free)
  jax.clear_caches()  # the policy is read at trace time
  return _inspect(FINISHES[name]())


@pytest.mark.parametrize("name", sorted(FINISHES))
def test_gpu_finish_has_no_conditional(name, monkeypatch):
  conds, data_loops = _lower(name, False, monkeypatch)
  assert conds == [], f"{name}: conditionals left in the lowered finish: {conds}"
  assert data_loops == [], f"{name}: while loops with a data-dependent trip count: {data_loops}"


@pytest.mark.parametrize("name", ["chain-sampled-dense-masked", "chain-greedy-onehot-free",
                                  "tree-sampled-masked"])
def test_cpu_finish_keeps_only_the_named_expensive_skips(name, monkeypatch):
  conds, data_loops = _lower(name, True, monkeypatch)
  assert conds and set(conds) <= set(_sampling.SKIPPABLE), conds
  assert data_loops == []


def test_the_walk_finds_conditionals_and_data_loops():
  """The inspection itself: a cond and a data-bounded while are seen, a fori_loop is not."""

  def fn(x):
    with jax.named_scope("top_p_bisection"):
      y = jax.lax.cond(jnp.any(x > 0), lambda: x * 2, lambda: x)
    y = jax.lax.fori_loop(0, 4, lambda i, c: c + i, y)
    n = jax.lax.while_loop(lambda c: c < x[0], lambda c: c + 1, 0)
    return y, n

  conds, data_loops = _inspect(jax.jit(fn).lower(jnp.arange(3)))
  assert conds == ["top_p_bisection"]
  assert len(data_loops) == 1


def test_finish_tokens_do_not_depend_on_the_policy(monkeypatch):
  """The GPU policy (both branches, a select) gives the CPU policy's tokens (skips)."""
  rng = np.random.default_rng(0)
  logits = jnp.asarray(np.round(rng.normal(size=(B, P, VM)) * 2) / 2, jnp.float32)
  drafts = jnp.asarray(rng.integers(0, V, (B, K)), jnp.int32)
  prop = Proposal(drafts, jnp.full((B,), K, jnp.int32), ip.OneHotQ())
  out = {}
  for free in (True, False):
    monkeypatch.setattr(_sampling, "skip_is_free", lambda free=free: free)
    jax.clear_caches()
    for sampled in (False, True):
      res = _round.finish_step(logits, None, None, None, prop, _params(sampled),
                               jnp.arange(B, dtype=jnp.uint32), jnp.zeros((B,), jnp.int32),
                               vocab_size=V, masked_q=False)
      out[free, sampled] = [np.asarray(x) for x in res]
  for sampled in (False, True):
    for a, b in zip(out[True, sampled], out[False, sampled]):
      np.testing.assert_array_equal(a, b)
