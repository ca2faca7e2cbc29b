"""Sharded safetensors checkpoints: the streaming loader gives the model that reading every
tensor whole and assembling it gives (same logits, bit for bit), holds at most one
piece of a tensor and one layer beyond the model (live buffers, traced host allocations), and
`infernix_jax.models` imports without gguf."""

import gc
import json
import os
import subprocess
import sys
import textwrap
import tracemalloc
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from infernix_jax import models as im
from infernix_jax.models import _convert, _hf, unrolled
from infernix_jax.testing import hf_checkpoints

torch = pytest.importorskip("torch")
pytest.importorskip("safetensors")

ROOT = Path(__file__).resolve().parents[2]
TINY = {"qwen3": hf_checkpoints.hf_config("qwen3", vocab=101, dim=64, layers=3, heads=4,
                                           kv_heads=2, head_dim=16, ffn=96, tie=False),
        "qwen2": hf_checkpoints.hf_config("qwen2", vocab=67, dim=32, layers=2, heads=4,
                                           kv_heads=1, head_dim=8, ffn=48, tie=True)}
_TORCH_DTYPES = {"bfloat16": torch.bfloat16, "float32": torch.float32}


def _random_maker(seed: int, dtype):
  generator = torch.Generator().manual_seed(seed)

  def make(name, shape):
    if name.endswith("norm.weight"):  # norms near 1, biases and matrices near 0
      value = 1.0 + 0.2 * torch.randn(shape, generator=generator)
    else:
      value = 0.08 * torch.randn(shape, generator=generator)
    return value.to(dtype)
  return make


def _write_tiny(directory, family, files_dtype, shard_bytes):
  config = TINY[family]
  torch_dtype = _TORCH_DTYPES[files_dtype]
  return hf_checkpoints.write_sharded(directory, config, _random_maker(0, torch_dtype),
                                      torch_dtype.itemsize, shard_bytes)


# (family, dtype of the files, sharded, model dtype, layout, weights)
CASES = [
    ("qwen3", "bfloat16", True, "float32", "stacked", None),
    ("qwen3", "bfloat16", True, "float32", "unrolled", None),  # packed where the kernels are
    ("qwen3", "bfloat16", True, "bfloat16", "stacked", None),
    ("qwen3", "bfloat16", True, "bfloat16", "unrolled", None),
    ("qwen3", "float32", False, "bfloat16", "unrolled", None),  # rounded to bf16 on load
    ("qwen3", "float32", False, "float32", "unrolled", "int8"),
    ("qwen2", "float32", True, "float32", "unrolled", "bfloat16"),
    ("qwen2", "float32", True, "bfloat16", "stacked", None),
]


@pytest.mark.parametrize("family,files_dtype,sharded,dtype,layout,weights", CASES)
def test_streamed_model_equals_whole_file_assembly(tmp_path, family, files_dtype, sharded,
                                                   dtype, layout, weights):
  """Shards of ~20 KB split layers across files; the model equals the one assembled from
  every tensor read whole by safetensors' own reader, and stores the model dtype."""
  files = _write_tiny(tmp_path, family, files_dtype, 20_000 if sharded else None)
  assert len(files) > 2 if sharded else len(files) == 1
  cfg, model, _ = im.load_hf_dir(tmp_path, dtype=dtype, layout=layout, weights=weights)
  assert cfg.dtype == dtype and unrolled.layout_of(model) == layout
  arrays = hf_checkpoints.arrays_of(files, cfg.num_layers)
  expected = unrolled.relayout(_convert.model_from_arrays(cfg, arrays), layout, weights)
  assert unrolled.weights_of(model) == unrolled.weights_of(expected)
  got_state = nnx.to_flat_state(nnx.state(model))
  want_state = nnx.to_flat_state(nnx.state(expected))
  assert [k for k, _ in got_state] == [k for k, _ in want_state]
  for (key, got), (_, want) in zip(got_state, want_state):
    assert got[...].dtype == want[...].dtype, key
    np.testing.assert_array_equal(np.asarray(got[...]), np.asarray(want[...]), err_msg=str(key))
  tokens = jnp.asarray(np.random.default_rng(1).integers(0, cfg.vocab_size, (2, 7)), jnp.int32)
  got_logits, _ = im.forward(*nnx.split(model), tokens)
  want_logits, _ = im.forward(*nnx.split(expected), tokens)
  np.testing.assert_array_equal(np.asarray(got_logits), np.asarray(want_logits))


def test_sharded_checkpoint_errors_name_the_problem(tmp_path):
  files = _write_tiny(tmp_path, "qwen3", "bfloat16", 20_000)
  files[1].rename(tmp_path / "elsewhere.bin")
  with pytest.raises(FileNotFoundError, match=f"names shards that are not in .*{files[1].name}"):
    im.load_hf_dir(tmp_path)
  (tmp_path / "elsewhere.bin").rename(files[1])
  with pytest.raises(ValueError, match="layout='diagonal' must be one of"):
    im.load_hf_dir(tmp_path, layout="diagonal")
  config = dict(TINY["qwen3"], intermediate_size=80)
  (tmp_path / "config.json").write_text(json.dumps(config))
  with pytest.raises(ValueError, match=r"'model.layers.0.mlp.gate_proj.weight' has shape "
                                       r"\[96, 64\], expected \[80, 64\]"):
    im.load_hf_dir(tmp_path)
  config = dict(TINY["qwen3"], num_hidden_layers=2)
  (tmp_path / "config.json").write_text(json.dumps(config))
  with pytest.raises(ValueError, match="'model.layers.2.*num_hidden_layers=2"):
    im.load_hf_dir(tmp_path, layout="unrolled")
  config = dict(TINY["qwen3"], num_hidden_layers=4)
  (tmp_path / "config.json").write_text(json.dumps(config))
  for layout in unrolled.LAYOUTS:
    with pytest.raises(ValueError, match=r"checkpoint lacks 'attn_norm' for layers \[3\]"):
      im.load_hf_dir(tmp_path, layout=layout)


def _run_python(code: str, *args: str, timeout: float) -> str:
  """stdout of a fresh interpreter running `code` with `args` (this checkout's package, on
  the CPU: there the device memory is the host's, which the RSS measures)."""
  env = dict(os.environ, PYTHONPATH=str(ROOT), JAX_PLATFORMS="cpu")
  run = subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True,
                       env=env, cwd=ROOT, timeout=timeout)
  assert run.returncode == 0, run.stderr[-4000:]
  return run.stdout


def test_models_import_without_gguf():
  """`import infernix_jax.models` with gguf blocked: GGUF files are the only users of it."""
  out = _run_python(textwrap.dedent("""
      import sys
      sys.modules["gguf"] = None  # any import of gguf now raises ImportError
      import infernix_jax.models as im
      from infernix_jax.models import loaders, unrolled
      print("gguf" in sys.modules and sys.modules["gguf"] is not None, callable(im.load_hf_dir))
      """), timeout=300)
  assert out.split() == ["False", "True"]


@pytest.mark.parametrize("layout", unrolled.LAYOUTS)
def test_loading_holds_one_piece_and_one_layer_beyond_the_model(tmp_path, monkeypatch, layout):
  """At every write of the loader, the live device buffers beyond the model are at most one
  layer plus one piece of a tensor, and the host's traced allocations (numpy's included)
  stay below one piece plus bookkeeping: never a shard, never a float32 copy. Counted on
  live buffers and traced allocations, so the allocator's page handling does not enter
  (peak RSS on a 1B checkpoint: benchmarks/loader_memory.py)."""
  config = hf_checkpoints.hf_config("qwen3", vocab=8192, dim=256, layers=4, heads=4,
                                    kv_heads=2, head_dim=64, ffn=1024, tie=False)
  total = 2 * sum(int(np.prod(s)) for _, s in hf_checkpoints.hf_shapes(config))
  files = hf_checkpoints.write_sharded(tmp_path, config, _random_maker(0, torch.bfloat16),
                                       2, total // 3)
  largest = max(f.stat().st_size for f in files)
  layer = 2 * sum(int(np.prod(s)) for n, s in hf_checkpoints.hf_shapes(config)
                  if n.startswith("model.layers.0."))
  piece = 64 << 10
  monkeypatch.setattr(_hf, "_CHUNK_BYTES", piece)
  im.load_hf_dir(tmp_path, dtype="bfloat16", layout=layout)  # compiles every write once
  live_at_writes = []
  write = _hf._write

  def counted_write(dest, rows, starts, transpose):
    live_at_writes.append(sum(x.nbytes for x in jax.live_arrays()))
    return write(dest, rows, starts, transpose)
  monkeypatch.setattr(_hf, "_write", counted_write)
  gc.collect()
  live_before = sum(x.nbytes for x in jax.live_arrays())
  tracemalloc.start()
  try:
    host_before = tracemalloc.get_traced_memory()[0]
    _, model, _ = im.load_hf_dir(tmp_path, dtype="bfloat16", layout=layout)
    host_peak = tracemalloc.get_traced_memory()[1] - host_before
  finally:
    tracemalloc.stop()
  model_bytes = sum(leaf.nbytes for leaf in jax.tree.leaves(nnx.state(model)))
  assert model_bytes == pytest.approx(total, rel=1e-3)
  beyond = max(live_at_writes) - live_before - model_bytes
  print(f"\n{layout}: model {model_bytes >> 10} KiB, largest shard {largest >> 10} KiB, one "
        f"layer {layer >> 10} KiB; live beyond the model at most {beyond >> 10} KiB; host "
        f"peak {host_peak >> 10} KiB")
  assert len(live_at_writes) > 3 * len(files)
  assert beyond <= layer + piece
  assert host_peak <= min(largest // 4, 4 * piece + (256 << 10))


