"""The public EAGLE-3 checkpoint layout: a folder with config.json and model.safetensors.

The layout vLLM, SGLang and tpu-inference load (`LlamaForCausalLMEagle3`):

  config.json         hidden_size, intermediate_size, num_attention_heads,
                      num_key_value_heads, head_dim, rms_norm_eps, rope_theta, vocab_size
                      (the target's), draft_vocab_size, num_hidden_layers = 1, optional
                      eagle_config.eagle_aux_hidden_state_layer_ids (the *inputs* of those
                      target layers are the features; default 2, L // 2, L - 3)
  model.safetensors   fc.weight [D, F]; midlayer.input_layernorm.weight,
                      midlayer.hidden_norm.weight, midlayer.self_attn.{q,k,v,o}_proj.weight,
                      midlayer.post_attention_layernorm.weight,
                      midlayer.mlp.{gate,up,down}_proj.weight (torch's [out, in]);
                      norm.weight; lm_head.weight [Vd, D]; d2t i64[Vd] (target id = draft
                      id + d2t[draft id]); t2d bool[Vm]; optional embed_tokens.weight.
                      "model."-prefixed names and "layers.0." for "midlayer." are accepted.

Heads written here also record the target they were trained for (name, dims, an embedding
fingerprint) under config.json's "infernix" key, so `load` refuses them for another target
exactly as `weights.load` does; a published head is checked by its dims and vocabulary.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from infernix_jax.models.drafters.weights import DrafterWeightsError, target_fingerprint

ARCHITECTURE = "LlamaForCausalLMEagle3"
CONFIG, WEIGHTS = "config.json", "model.safetensors"

# our layer parameter -> the public tensor name under "midlayer." (torch layout [out, in])
_LAYER_NAMES = {"input_norm": "input_layernorm.weight", "hidden_norm": "hidden_norm.weight",
                "q": "self_attn.q_proj.weight", "k": "self_attn.k_proj.weight",
                "v": "self_attn.v_proj.weight", "o": "self_attn.o_proj.weight",
                "mlp_norm": "post_attention_layernorm.weight",
                "gate": "mlp.gate_proj.weight", "up": "mlp.up_proj.weight",
                "down": "mlp.down_proj.weight", "q_bias": "self_attn.q_proj.bias",
                "k_bias": "self_attn.k_proj.bias", "v_bias": "self_attn.v_proj.bias",
                "o_bias": "self_attn.o_proj.bias", "q_norm": "self_attn.q_norm.weight",
                "k_norm": "self_attn.k_norm.weight"}


def _dims(cfg) -> str:
  return f"dim={cfg.dim} layers={cfg.num_layers} vocab={cfg.vocab_size}"


def save(directory, net, *, target_cfg, target_embed, target_name: str,
         extra: dict | None = None) -> Path:
  """Writes an `Eagle3Net` in the public layout (float16) with the target's identity.

  Args:
    directory: the folder to write (config.json, model.safetensors).
    net: the head; its `d2t` is written with the matching `t2d`.
    target_cfg, target_embed, target_name: the target it was trained for.
    extra: more facts for config.json's "infernix" entry (e.g. the training summary).
  """
  from safetensors.numpy import save_file
  cfg = net.cfg
  directory = Path(directory)
  directory.mkdir(parents=True, exist_ok=True)
  f16 = lambda x: np.ascontiguousarray(np.asarray(x, np.float32).astype(np.float16))  # noqa: E731
  layer = net.layer_params()
  tensors = {"fc.weight": f16(np.asarray(net.fc[...]).T), "norm.weight": f16(net.final_norm[...]),
             "lm_head.weight": f16(np.asarray(net.lm_head[...]).T)}
  for name, value in layer.items():
    value = np.asarray(value)
    tensors["midlayer." + _LAYER_NAMES[name]] = f16(value.T if value.ndim == 2 else value)
  d2t = np.asarray(net.d2t[...], np.int64)
  t2d = np.zeros((cfg.vocab_size,), bool)
  t2d[np.arange(d2t.shape[0]) + d2t] = True
  tensors["d2t"], tensors["t2d"] = d2t, t2d
  if net.embed is not None:
    tensors["embed_tokens.weight"] = f16(net.embed[...])
  save_file(tensors, str(directory / WEIGHTS))
  config = {
      "architectures": [ARCHITECTURE], "model_type": "llama",
      "hidden_size": cfg.dim, "intermediate_size": cfg.ffn_dim,
      "num_attention_heads": cfg.num_heads, "num_key_value_heads": cfg.num_kv_heads,
      "head_dim": cfg.head_dim, "num_hidden_layers": 1, "rms_norm_eps": cfg.norm_eps,
      "rope_theta": cfg.rope_theta, "vocab_size": cfg.vocab_size,
      "draft_vocab_size": int(d2t.shape[0]), "max_position_embeddings": cfg.max_position,
      "attention_bias": bool(cfg.qkv_bias), "tie_word_embeddings": False,
      "torch_dtype": "float16",
      "eagle_config": {"eagle_aux_hidden_state_layer_ids": [t + 1 for t in net.taps],
                       "use_aux_hidden_state": True},
      "infernix": {"target": target_name, "target_dims": _dims(target_cfg),
                   "target_fingerprint": target_fingerprint(target_embed),
                   "taps": list(net.taps), **(extra or {})},
  }
  (directory / CONFIG).write_text(json.dumps(config, indent=1) + "\n")
  return directory


def _canonical(name: str) -> str:
  """A tensor name in the "midlayer." form (drops "model.", maps "layers.0.")."""
  name = name.removeprefix("model.")
  return "midlayer." + name.removeprefix("layers.0.") if name.startswith("layers.0.") else name


def read_config(directory) -> dict:
  """config.json of an EAGLE-3 head folder (DrafterWeightsError when it is not one)."""
  directory = Path(directory)
  path = directory / CONFIG
  if not path.is_file() or not (directory / WEIGHTS).is_file():
    raise DrafterWeightsError(f"no EAGLE-3 head at {directory} (expected a folder with "
                              f"{CONFIG} and {WEIGHTS} in the public EAGLE-3 layout)")
  config = json.loads(path.read_text())
  arch = config.get("architectures") or []
  if not any("eagle3" in a.lower() for a in arch):
    raise DrafterWeightsError(f"{path}: architectures {arch} is not an EAGLE-3 head "
                              f"(expected {ARCHITECTURE})")
  return config


def load(directory, target_cfg, target_embed, *, expected: str = "the target"):
  """Restores an `Eagle3Net` from a head folder, checking that it belongs to the target.

  Args:
    directory: the folder (config.json + model.safetensors).
    target_cfg, target_embed: the target the caller drafts for.
    expected: how to name that target in errors.

  Raises:
    DrafterWeightsError: no such head, or one trained for another target (width, vocabulary,
      feature layers, or the recorded target's fingerprint differ), or tensors that do not
      match its config.
  """
  from flax import nnx
  from safetensors.numpy import load_file

  from infernix_jax.models.config import ModelConfig
  from infernix_jax.models.drafters.eagle3 import Eagle3Net, default_taps, layer_shapes
  directory = Path(directory)
  config = read_config(directory)
  mine = config.get("infernix")
  if mine and (mine.get("target_dims") != _dims(target_cfg)
               or mine.get("target_fingerprint") != target_fingerprint(target_embed)):
    raise DrafterWeightsError(
        f"{directory} was trained for {mine.get('target')} ({mine.get('target_dims')}, "
        f"embedding fingerprint {mine.get('target_fingerprint')}), not for {expected} "
        f"({_dims(target_cfg)}, fingerprint {target_fingerprint(target_embed)})")
  d, vocab = int(config["hidden_size"]), int(config.get("vocab_size", 0))
  if d != target_cfg.dim or vocab != target_cfg.vocab_size:
    raise DrafterWeightsError(
        f"{directory} is an EAGLE-3 head for a target of width {d} and vocabulary {vocab}, "
        f"not for {expected} ({_dims(target_cfg)})")
  ids = (config.get("eagle_config") or {}).get("eagle_aux_hidden_state_layer_ids")
  taps = (tuple(int(i) - 1 for i in ids) if ids
          else default_taps(target_cfg.num_layers))
  if any(not 0 <= t < target_cfg.num_layers for t in taps):
    raise DrafterWeightsError(f"{directory} reads the features of target layers "
                              f"{[t + 1 for t in taps]}, which {expected} "
                              f"({target_cfg.num_layers} layers) does not have")
  heads = int(config["num_attention_heads"])
  cfg = ModelConfig(
      vocab_size=vocab, dim=d, num_layers=1, num_heads=heads,
      num_kv_heads=int(config.get("num_key_value_heads", heads)),
      head_dim=int(config.get("head_dim") or d // heads),
      ffn_dim=int(config["intermediate_size"]),
      rope_theta=float(config.get("rope_theta", 10_000.0)),
      norm_eps=float(config.get("rms_norm_eps", 1e-6)),
      qkv_bias=bool(config.get("attention_bias", False)),
      max_position=int(config.get("max_position_embeddings", 32_768)), tie_embeddings=False,
      dtype=target_cfg.dtype, name=f"eagle3:{directory.name}")
  raw = {_canonical(k): v for k, v in load_file(str(directory / WEIGHTS)).items()}
  vd = int(config.get("draft_vocab_size") or raw["lm_head.weight"].shape[0])
  want = {"fc.weight": (d, d * len(taps)), "norm.weight": (d,), "lm_head.weight": (vd, d),
          **{"midlayer." + _LAYER_NAMES[n]: (s[::-1] if len(s) == 2 else s)
             for n, s in layer_shapes(cfg).items()}}
  wrong = {k: (tuple(raw[k].shape) if k in raw else None, s) for k, s in want.items()
           if k not in raw or tuple(raw[k].shape) != s}
  if wrong:
    raise DrafterWeightsError(
        f"{directory / WEIGHTS}: tensors do not match its config ({len(taps)} feature "
        f"layers, draft vocabulary {vd}); name: (found, expected) {wrong}")
  d2t = np.asarray(raw.get("d2t", np.zeros((vd,), np.int64)), np.int64)
  if d2t.shape != (vd,) or np.any(np.arange(vd) + d2t < 0) or np.any(
      np.arange(vd) + d2t >= vocab):
    raise DrafterWeightsError(f"{directory / WEIGHTS}: d2t must map the {vd} draft ids into "
                              f"the target's {vocab} ids")
  own = "embed_tokens.weight" in raw
  net = Eagle3Net(cfg, taps, vd, rngs=nnx.Rngs(0), own_embedding=own)
  dtype = cfg.jnp_dtype
  cast = lambda x: np.asarray(x, np.float32).astype(dtype)  # noqa: E731
  net.fc[...] = cast(raw["fc.weight"].T)
  net.final_norm[...] = cast(raw["norm.weight"])
  net.lm_head[...] = cast(raw["lm_head.weight"].T)
  for name in net.names:
    value = raw["midlayer." + _LAYER_NAMES[name]]
    getattr(net, name)[...] = cast(value.T if value.ndim == 2 else value)[None]
  net.d2t[...] = np.asarray(d2t, np.int32)
  if own:
    net.embed[...] = cast(raw["embed_tokens.weight"])
  return net
