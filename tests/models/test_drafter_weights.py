"""Trained drafter weights: round trip, refusals that name the file and the models, the
registry's default (shipped weights, never a silent random fall-back) and its explicit
random option."""

import jax
import numpy as np
import pytest
from flax import nnx

from infernix_jax import models as im
from infernix_jax.models import drafters as dr
from infernix_jax.models.drafters import weights as dw
from infernix_jax.runtime import drafters

CFG = im.ModelConfig(vocab_size=61, dim=32, num_layers=2, num_heads=4, num_kv_heads=2,
                     head_dim=8, ffn_dim=48, tie_embeddings=True)


def _target(seed):
  return CFG, im.Transformer(CFG, rngs=nnx.Rngs(seed))


@pytest.mark.parametrize("kind", ["mtp", "block"])
def test_round_trip_in_float16(tmp_path, kind):
  cfg, model = _target(0)
  net = (dr.MTPHead(cfg, rngs=nnx.Rngs(1)) if kind == "mtp"
         else dr.DFlashNet(cfg.replace(num_layers=2), cfg.dim, rngs=nnx.Rngs(1)))
  path = dw.save(tmp_path / f"d.{kind}.safetensors", net, kind=kind, target_cfg=cfg,
                 target_embed=model.embed[...], target_name="tiny", extra={"steps": 3})
  back = dw.load(path, kind, cfg, model.embed[...])
  a = nnx.to_pure_dict(nnx.state(net, nnx.Param))
  b = nnx.to_pure_dict(nnx.state(back, nnx.Param))
  flat_a = np.concatenate([np.ravel(v) for v in jax.tree.leaves(a)])
  flat_b = np.concatenate([np.ravel(v) for v in jax.tree.leaves(b)])
  np.testing.assert_allclose(flat_b, flat_a.astype(np.float16).astype(np.float32))
  assert back.cfg.num_layers == net.cfg.num_layers
  assert dw.summary(path) == {"steps": 3}


def test_refusals_name_the_file_and_the_models(tmp_path):
  cfg, model = _target(0)
  net = dr.MTPHead(cfg, rngs=nnx.Rngs(1))
  path = dw.save(tmp_path / "m.safetensors", net, kind="mtp", target_cfg=cfg,
                 target_embed=model.embed[...], target_name="tiny-A")
  with pytest.raises(dw.DrafterWeightsError, match="holds mtp drafter weights, not block"):
    dw.load(path, "block", cfg, model.embed[...])
  _, other = _target(7)  # same dims, other weights: the fingerprint tells them apart
  with pytest.raises(dw.DrafterWeightsError, match=r"m\.safetensors was trained for tiny-A"):
    dw.load(path, "mtp", cfg, other.embed[...], expected="model B")
  missing = tmp_path / "nope.safetensors"
  with pytest.raises(dw.DrafterWeightsError, match=r"no mtp drafter weights at .*nope"):
    dw.load(missing, "mtp", cfg, model.embed[...])
  (tmp_path / "x.safetensors").write_bytes(b"garbage")
  with pytest.raises(Exception):
    dw.load(tmp_path / "x.safetensors", "mtp", cfg, model.embed[...])


def test_draft_vocabulary_travels_with_the_weights(tmp_path):
  """A network trained on a draft vocabulary saves it; the registry's drafter restricts the
  target's head to it (drafts stay inside); a malformed one is refused by name."""
  from safetensors.numpy import load_file, save_file
  cfg, model = _target(0)
  net = dr.MTPHead(cfg, rngs=nnx.Rngs(1))
  vocab = np.array([0, 3, 4, 9, 20, 33, 60], np.int32)
  dw.set_draft_vocab(net, vocab)
  path = dw.save(tmp_path / "v.safetensors", net, kind="mtp", target_cfg=cfg,
                 target_embed=model.embed[...], target_name="tiny")
  np.testing.assert_array_equal(dw.draft_vocab_of(dw.load(path, "mtp", cfg, model.embed[...])),
                                vocab)
  d = drafters.create("mtp", {"k": 3, "weights": str(path)}, target=(cfg, model))
  np.testing.assert_array_equal(np.asarray(d.net.head.vocab), vocab)
  tensors = load_file(str(path))
  tensors["draft_vocab"] = vocab[::-1].copy()
  from safetensors import safe_open
  with safe_open(str(path), "np") as f:
    meta = f.metadata()
  save_file(tensors, str(tmp_path / "bad.safetensors"), metadata=meta)
  with pytest.raises(dw.DrafterWeightsError, match="draft_vocab tensor is not a sorted set"):
    dw.load(tmp_path / "bad.safetensors", "mtp", cfg, model.embed[...])


@pytest.mark.parametrize("name", ["mtp", "dflash", "dflash2"])
def test_registry_default_refuses_a_target_without_shipped_weights(name):
  with pytest.raises(dw.DrafterWeightsError, match="SmolLM2-135M-Instruct"):
    drafters.create(name, {"k": 2}, target=_target(0))
  d = drafters.create(name, {"k": 2, "weights": "random"}, target=_target(0))  # explicit opt-in
  assert d.k == 2


def test_registry_loads_a_weights_file(tmp_path):
  cfg, model = _target(0)
  net = dr.DFlashNet(cfg.replace(num_layers=2), cfg.dim, rngs=nnx.Rngs(3))
  path = dw.save(tmp_path / "b.safetensors", net, kind="block", target_cfg=cfg,
                 target_embed=model.embed[...], target_name="tiny")
  d = drafters.create("dflash2", {"k": 3, "weights": str(path)}, target=(cfg, model))
  assert d.net.cfg.num_layers == 2 and d.net.sparse
