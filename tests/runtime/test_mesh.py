"""The engine on a (data, model) mesh: each kind of drafter's tokens equal the one-device
engine's on 4 simulated CPU devices (one subprocess), and mesh specs fail clearly."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from infernix_jax.models import sharding

_SCRIPT = textwrap.dedent("""
    import jax
    from flax import nnx
    from jax.sharding import PartitionSpec as P
    from infernix_jax import constrain as ic, models as im
    from infernix_jax.models import sharding
    from infernix_jax.runtime import drafters
    from infernix_jax.runtime.engine import Engine
    from infernix_jax.runtime.types import GenerationRequest, SamplingOptions
    from infernix_jax.testing import exact_oracle as h
    assert jax.device_count() == 4, jax.devices()

    cfg = im.ModelConfig(vocab_size=h.TOY_VM, dim=32, num_layers=2, num_heads=4,
                         num_kv_heads=2, head_dim=8, ffn_dim=64, qk_norm=True,
                         tie_embeddings=False)  # untied: varied greedy text, lm_head sharded
    model = im.Transformer(cfg, rngs=nnx.Rngs(0))
    model.embed[...] = model.embed[...] * 2.0  # peakier: drafts get accepted and rejected
    vocab = h.toy_vocab()
    mesh = sharding.parse_mesh("tp=2,dp=2")
    choice = ic.OutputConstraint.choice(["abc", "ab", "ba1", "cab", "x{y}"])
    specs = [None, choice, None, choice.with_backend("trie"), None, choice]
    prompts = ([1, 1, 2, 1, 1, 2, 1], [8, 12, 13, 9, 8, 12], [3, 5, 7, 11, 2])

    def requests():  # 6 requests on 4 lanes: later ones join lanes freed by earlier ones
      return [GenerationRequest(prompts[i % 3], max_tokens=6, constraint=specs[i],
                                sampling=SamplingOptions(temperature=float(i >= 4), seed=i))
              for i in range(len(specs))]  # the last two sample at T = 1 (same seeds)

    pool = dict(k=3, model=h.tiny_model(seed=1), n=2, weights="random")
    # One drafter of each kind: none, a host drafter, a draft model with its own KV cache, a
    # device network (mtp and dflash place their state as dflash2 does).
    for name in ("none", "ngram", "draft", "dflash2"):
      opts = {f: v for f, v in pool.items() if f in drafters.fields(name)}
      outs = []
      runs = [(None, "stages"), (mesh, "stages")] + [(mesh, "callback")] * (name == "none")
      for m, bridge in runs:
        eng = Engine(model, vocab, drafters.create(name, opts, target=(cfg, model)), lanes=4,
                     capacity=32, mesh=m, bridge=bridge)
        results = eng.generate(requests())
        assert not [r.error for r in results if r.error], (name, m)
        outs.append([(tuple(r.token_ids), r.drafted, r.accepted) for r in results])
        if m is not None and eng.drafter.on_device:  # the drafter's KV cache: lanes on "data"
          draft = eng._round_state.draft
          assert draft.cache.k.sharding.spec[1] == "data", (name, draft)
      assert all(o == outs[0] for o in outs), (name, outs)  # same tokens, same acceptance
      constrained = [outs[0][i][0] for i, s in enumerate(specs) if s is not None]
      assert all(bytes().join(vocab.token_bytes[t] for t in o) in (b"abc", b"ab", b"ba1",
                 b"cab", b"x{y}") for o in constrained), (name, constrained)
      print(name, outs[0], flush=True)
    q = eng.state["layers"]["q"][...]
    assert q.sharding.spec == P(None, None, "model"), q.sharding  # tensor parallel
    cache = eng._round_state.cache
    assert cache.k.sharding.spec[1] == "data", cache.k.sharding  # lanes
    print("MESH_OK")
""")


def test_every_drafter_kind_on_a_mesh_equals_one_device():
  """tp=2,dp=2 on 4 fake CPU devices: tokens and accepted drafts equal the one-device
  engine's for no drafter, a host drafter, a draft model and a device network (and the callback bridge with "none"), constrained
  (xgrammar and trie choice) and free lanes mixed, greedy and T = 1."""
  root = Path(__file__).resolve().parents[2]
  env = dict(os.environ, XLA_FLAGS=f"{os.environ.get('XLA_FLAGS', '')} "
             "--xla_force_host_platform_device_count=4",
             JAX_PLATFORMS="cpu", PYTHONPATH=str(root))
  result = subprocess.run([sys.executable, "-c", _SCRIPT], env=env, cwd=root,
                          capture_output=True, text=True, timeout=900, check=False)
  assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-4000:]
  assert "MESH_OK" in result.stdout


class _Device:  # parse_mesh counts devices before it builds a mesh from them
  pass


@pytest.mark.parametrize("spec,message", [
    ("", "empty; write e.g. tp=2,dp=2"),
    ("tp", "'tp' must be key=size"),
    ("tp=2,pp=2", "unknown key 'pp' in 'pp=2'; keys are tp"),
    ("tp=2,tp=1", "tp is given twice"),
    ("tp=0", "'tp=0': the size must be an integer >= 1"),
    ("dp=two", "'dp=two': the size must be an integer >= 1"),
    ("tp=3", "dp * tp = 3 does not divide the 4 devices"),
    ("tp=4,dp=2", "needs dp * tp = 8 devices, only 4 are available"),
])
def test_parse_mesh_names_the_bad_part(spec, message):
  with pytest.raises(ValueError) as e:
    sharding.parse_mesh(spec, devices=[_Device() for _ in range(4)])
  assert str(e.value).startswith(f"mesh={spec!r}: ") and message in str(e.value), str(e.value)


def test_parse_mesh_builds_data_model_axes():
  import jax
  mesh = sharding.parse_mesh(" tp = 1 ", devices=jax.devices()[:1])
  assert mesh.axis_names == ("data", "model") and mesh.devices.shape == (1, 1)
