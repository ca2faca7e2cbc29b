"""Sharded safetensors checkpoints: the streaming loader gives the model that reading every
tensor whole and assembling it gives (same logits, bit for bit), holds at most about one shard
and one layer of host memory beyond the model, and `infernix_jax.models` imports without gguf."""

import json
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from infernix_jax import models as im
from infernix_jax.models import _convert, unrolled
from tests.models import _shards

torch = pytest.importorskip("torch")
pytest.importorskip("safetensors")

ROOT = Path(__file__).resolve().parents[2]
TINY = {"qwen3": _shards.hf_config("qwen3", vocab=101, dim=64, layers=3, heads=4, kv_heads=2,
                                   head_dim=16, ffn=96, tie=False),
        "qwen2": _shards.hf_config("qwen2", vocab=67, dim=32, layers=2, heads=4, kv_heads=1,
                                   head_dim=8, ffn=48, tie=True)}
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
  return _shards.write_sharded(directory, config, _random_maker(0, _TORCH_DTYPES[files_dtype]),
                               _TORCH_DTYPES[files_dtype].itemsize, shard_bytes)


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
  arrays = _shards.arrays_of(files, cfg.num_layers)
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


# A Qwen3-shaped model of 1.08B parameters (Qwen3-8B's vocabulary and head sizes, narrower
# and shallower), untied like Qwen3-8B: 2.16 GB in bf16, in 5 shards as save_pretrained cuts.
BIG = _shards.hf_config("qwen3", vocab=151_936, dim=1536, layers=20, heads=16, kv_heads=8,
                        head_dim=128, ffn=4608, tie=False)
_MEASURE = """
import json, os, resource, sys, time
import jax
import numpy as np
from flax import nnx
import infernix_jax.models as im

def rss():
  with open("/proc/self/statm") as f:
    return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")

jax.block_until_ready(jax.numpy.zeros(8) + 1)  # the backend is up
base = rss()
start = time.perf_counter()
cfg, model, _ = im.load_hf_dir(sys.argv[1], dtype="bfloat16", layout=sys.argv[2])
leaves = jax.tree.leaves(nnx.state(model))
jax.block_until_ready(leaves)
seconds = time.perf_counter() - start
peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
dtypes = sorted({str(leaf.dtype) for leaf in leaves})
model_bytes = sum(leaf.nbytes for leaf in leaves)
# A spot check against safetensors' own reader (after the measurement: torch is imported).
from safetensors import safe_open
name = "model.layers.7.mlp.down_proj.weight"
shard = json.load(open(sys.argv[1] + "/model.safetensors.index.json"))["weight_map"][name]
with safe_open(sys.argv[1] + "/" + shard, framework="pt") as f:
  want = f.get_tensor(name).float().numpy().T
head = "lm_head.weight"
shard = json.load(open(sys.argv[1] + "/model.safetensors.index.json"))["weight_map"][head]
with safe_open(sys.argv[1] + "/" + shard, framework="pt") as f:
  want_head = f.get_slice(head)[-3:].float().numpy().T
if sys.argv[2] == "stacked":
  got = np.asarray(model.layers.down[7], np.float32)
else:
  got = np.asarray(model.layers.layers[7].down[...], np.float32)
got_head = np.asarray(model.lm_head[:, -3:], np.float32)
print(json.dumps({"base": base, "peak": peak, "model_bytes": model_bytes, "seconds": seconds,
                  "dtypes": dtypes, "down_equal": bool(np.array_equal(got, want)),
                  "head_equal": bool(np.array_equal(got_head, want_head))}))
"""


@pytest.fixture(scope="module")
def big_checkpoint(tmp_path_factory):
  directory = tmp_path_factory.mktemp("qwen3_1b")
  total = 2 * sum(int(np.prod(s)) for _, s in _shards.hf_shapes(BIG))
  generator = torch.Generator().manual_seed(0)

  def make(name, shape):  # random bf16 weights, made one shard at a time
    return torch.randn(shape, generator=generator, dtype=torch.bfloat16) * 0.02
  files = _shards.write_sharded(directory, BIG, make, 2, total // 5)
  yield directory, files
  shutil.rmtree(directory)


@pytest.mark.slow
@pytest.mark.parametrize("layout", unrolled.LAYOUTS)
def test_1b_checkpoint_loads_within_one_shard_and_one_layer_of_host_memory(big_checkpoint,
                                                                           layout):
  """Peak RSS of a fresh process loading the 1B bf16 checkpoint, minus its RSS after the
  imports, minus the model's own bytes, is at most 1.3 x the largest shard plus one layer."""
  directory, files = big_checkpoint
  assert len(files) == 5
  largest = max(f.stat().st_size for f in files)
  layer = 2 * sum(int(np.prod(s)) for n, s in _shards.hf_shapes(BIG)
                  if n.startswith("model.layers.0."))
  out = json.loads(_run_python(_MEASURE, str(directory), layout,
                               timeout=900).splitlines()[-1])
  file_bytes = sum(f.stat().st_size for f in files)
  assert out["dtypes"] == ["bfloat16"]
  assert out["model_bytes"] == pytest.approx(file_bytes, rel=1e-3)
  assert out["down_equal"] and out["head_equal"]
  beyond = out["peak"] - out["base"] - out["model_bytes"]
  bound = 1.3 * largest + layer
  print(f"\n{layout}: load {out['seconds']:.1f} s; model {out['model_bytes'] / 2**20:.0f} MiB; "
        f"largest shard {largest / 2**20:.0f} MiB; one layer {layer / 2**20:.0f} MiB; "
        f"RSS after imports {out['base'] / 2**20:.0f} MiB, peak {out['peak'] / 2**20:.0f} MiB; "
        f"beyond the model {beyond / 2**20:.0f} MiB <= bound {bound / 2**20:.0f} MiB")
  assert beyond <= bound
