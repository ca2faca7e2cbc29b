"""Trained drafter weights: one safetensors file per drafter, tied to the target it serves.

A file holds the drafter's parameters (float16) and, in its metadata, what they belong to:
the format tag, the drafter kind (mtp | block | dspark), the drafter's layer config, the target's
identity (file name and dims) and a fingerprint of the target's embedding (two checkpoints
of one architecture differ there). A network trained on a draft vocabulary (a subset of the
target's ids its head scores) carries it as the int32 tensor `draft_vocab`. `load` refuses
a file whose kind, dims or fingerprint do not match, naming the file and both models, so
trained weights never meet the wrong target.

The weights trained for the embedded SmolLM2-135M-Instruct ship in `trained/` beside this
module, each with the config that produced it and its training summary.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

import numpy as np

FORMAT = "infernix-drafter-v1"

def _mtp(cfg, feature_dim, rngs):
  from infernix_jax.models.drafters.mtp import MTPHead
  return MTPHead(cfg, rngs=rngs)


def _block(cfg, feature_dim, rngs):
  from infernix_jax.models.drafters.dflash import DFlashNet
  return DFlashNet(cfg, feature_dim, rngs=rngs)


def _dspark(cfg, feature_dim, rngs):
  from infernix_jax.models.drafters.dspark import DSparkNet
  return DSparkNet(cfg, feature_dim, rngs=rngs)


# Network kind -> (layer cfg, F target features read, nnx.Rngs) -> an untrained network.
NETWORKS = {"mtp": _mtp, "block": _block, "dspark": _dspark}
KINDS = tuple(NETWORKS)
SHIPPED = Path(__file__).resolve().parent / "trained"
EMBEDDED_STEM = "smollm2-135m-instruct"


class DrafterWeightsError(ValueError):
  """A drafter checkpoint is missing or belongs to another drafter or target."""


def shipped_path(kind: str) -> Path:
  """The shipped weights of `kind` for the embedded model."""
  return SHIPPED / f"{EMBEDDED_STEM}.{kind}.safetensors"


def new_network(kind: str, cfg, feature_dim: int, *, rngs):
  """An untrained network of `kind` (`KINDS`): `cfg` its layer dims, `feature_dim` (F) the
  width of the target features it reads (the block drafter's `fc`; MTP reads D).

  Raises:
    ValueError: an unknown kind (the message lists them).
  """
  if kind not in NETWORKS:
    raise ValueError(f"drafter network kind {kind!r} must be one of {', '.join(KINDS)}")
  return NETWORKS[kind](cfg, feature_dim, rngs)


VOCAB_TENSOR = "draft_vocab"


def set_draft_vocab(net, vocab) -> None:
  """Ties a network to a draft vocabulary (sorted target ids; None: the full vocabulary)."""
  from flax import nnx
  import jax.numpy as jnp
  if vocab is None:
    if hasattr(net, VOCAB_TENSOR):
      delattr(net, VOCAB_TENSOR)
    return
  setattr(net, VOCAB_TENSOR, nnx.Variable(jnp.asarray(np.asarray(vocab), jnp.int32)))


def draft_vocab_of(net) -> np.ndarray | None:
  """The draft vocabulary a network was trained on (i32[Vd]), or None for the full one."""
  v = getattr(net, VOCAB_TENSOR, None)
  return None if v is None else np.asarray(v[...], np.int32)


def head_for(model, net):
  """The target's head as network `net` drafts with it (a `TargetHead`): restricted to the
  draft vocabulary the network was trained on, when it has one."""
  from infernix_jax.models.drafters.base import TargetHead
  head = TargetHead.from_model(model)
  vocab = draft_vocab_of(net)
  return head if vocab is None else head.restricted(vocab)


def target_fingerprint(embed) -> str:
  """A short fingerprint of a target's embedding [Vm, D] (first 256 rows, 6 digits)."""
  rows = np.asarray(embed[:256], np.float64)
  return f"{np.abs(rows).sum():.6g}/{rows.sum():.6g}"


def save(path, module, *, kind: str, target_cfg, target_embed, target_name: str,
         extra: dict | None = None) -> Path:
  """Writes `module`'s parameters (float16) with the metadata `load` checks.

  Args:
    path: the .safetensors file to write.
    module: an `MTPHead`, `DFlashNet` or `DSparkNet`.
    kind: "mtp", "block" or "dspark".
    target_cfg, target_embed, target_name: the target the drafter was trained on.
    extra: more metadata (e.g. the training summary), stored as JSON.
  """
  from flax import nnx
  from flax.traverse_util import flatten_dict
  from safetensors.numpy import save_file
  if kind not in KINDS:
    raise ValueError(f"kind={kind!r} must be one of {KINDS}")
  params = nnx.to_pure_dict(nnx.state(module, nnx.Param))
  flat = {k: np.ascontiguousarray(np.asarray(v, np.float32).astype(np.float16))
          for k, v in flatten_dict(params, sep=".").items()}
  vocab = draft_vocab_of(module)
  if vocab is not None:
    flat[VOCAB_TENSOR] = np.ascontiguousarray(vocab)
  meta = {"format": FORMAT, "kind": kind, "config": json.dumps(dataclasses.asdict(module.cfg)),
          # F, the width of the target features the block drafter reads ([F, D] `fc`)
          "feature_dim": str(module.fc[...].shape[0] if hasattr(module, "fc")
                             else target_cfg.dim),
          "target": target_name, "target_dims": _dims(target_cfg),
          "target_fingerprint": target_fingerprint(target_embed),
          "extra": json.dumps(extra or {})}
  path = Path(path)
  path.parent.mkdir(parents=True, exist_ok=True)
  save_file(flat, str(path), metadata=meta)
  return path


def _dims(cfg) -> str:
  return f"dim={cfg.dim} layers={cfg.num_layers} vocab={cfg.vocab_size}"


def read_metadata(path) -> dict:
  """The metadata of a drafter checkpoint (DrafterWeightsError when it is not one)."""
  from safetensors import safe_open
  path = Path(path)
  if not path.is_file():
    raise DrafterWeightsError(f"no drafter weights at {path}")
  with safe_open(str(path), "np") as f:
    meta = f.metadata() or {}
  if meta.get("format") != FORMAT:
    raise DrafterWeightsError(f"{path} is not an infernix drafter checkpoint "
                              f"(format {meta.get('format')!r}, expected {FORMAT!r})")
  return meta


def load(path, kind: str, target_cfg, target_embed, *, expected: str = "the target"):
  """Restores a drafter network for a target, checking that it belongs to it.

  Args:
    path: the .safetensors file.
    kind: "mtp", "block" or "dspark".
    target_cfg, target_embed: the target the caller drafts for.
    expected: how to name that target in errors.

  Returns:
    An `MTPHead`, `DFlashNet` or `DSparkNet` holding the weights (in the target's dtype) and, when it
    was trained on one, its draft vocabulary (`draft_vocab_of`).

  Raises:
    DrafterWeightsError: missing file, another kind, or another target.
  """
  from flax import nnx
  from flax.traverse_util import flatten_dict, unflatten_dict
  from safetensors.numpy import load_file

  from infernix_jax.models.config import ModelConfig
  path = Path(path)
  if not path.is_file():
    raise DrafterWeightsError(f"no {kind} drafter weights at {path} (expected weights "
                              f"trained for {expected}, {_dims(target_cfg)})")
  meta = read_metadata(path)
  if meta["kind"] != kind:
    raise DrafterWeightsError(f"{path} holds {meta['kind']} drafter weights, not {kind}")
  if (meta["target_dims"] != _dims(target_cfg)
      or meta["target_fingerprint"] != target_fingerprint(target_embed)):
    raise DrafterWeightsError(
        f"{path} was trained for {meta['target']} ({meta['target_dims']}, embedding "
        f"fingerprint {meta['target_fingerprint']}), not for {expected} "
        f"({_dims(target_cfg)}, fingerprint {target_fingerprint(target_embed)})")
  cfg = ModelConfig(**json.loads(meta["config"])).replace(dtype=target_cfg.dtype)
  graphdef, abstract = nnx.split(nnx.eval_shape(
      lambda: new_network(kind, cfg, int(meta["feature_dim"]), rngs=nnx.Rngs(0))))
  tensors = load_file(str(path))
  vocab = tensors.pop(VOCAB_TENSOR, None)
  if vocab is not None and (vocab.ndim != 1 or not len(vocab) or vocab[0] < 0
                            or vocab[-1] >= target_cfg.vocab_size
                            or np.any(np.diff(vocab) <= 0)):
    raise DrafterWeightsError(f"{path}: its {VOCAB_TENSOR} tensor is not a sorted set of "
                              f"target ids below {target_cfg.vocab_size}")
  flat = {k: np.asarray(v, np.float32).astype(cfg.jnp_dtype) for k, v in tensors.items()}
  want = flatten_dict(nnx.to_pure_dict(abstract), sep=".")
  if set(flat) != set(want) or any(flat[k].shape != want[k].shape for k in want):
    raise DrafterWeightsError(f"{path}: parameters do not match a {kind} drafter of config "
                              f"{meta['config']}")
  nnx.replace_by_pure_dict(abstract, unflatten_dict(flat, sep="."))
  net = nnx.merge(graphdef, abstract)
  set_draft_vocab(net, vocab)
  return net


def summary(path) -> dict:
  """The training summary stored with shipped weights (empty if none)."""
  return json.loads(read_metadata(path).get("extra", "{}"))
