"""Sharded forward on 4 simulated CPU devices equals the unsharded one (subprocess)."""

import os
import subprocess
import sys
import textwrap
from pathlib import Path

_SCRIPT = textwrap.dedent("""
    import jax, jax.numpy as jnp, numpy as np
    from flax import nnx
    from infernix_jax import models as im
    from infernix_jax.models import sharding
    assert jax.device_count() == 4, jax.devices()
    cfg = im.ModelConfig(vocab_size=96, dim=32, num_layers=2, num_heads=4, num_kv_heads=2,
                         head_dim=8, ffn_dim=64, qk_norm=True, tie_embeddings=False)
    graphdef, state = nnx.split(im.Transformer(cfg, rngs=nnx.Rngs(0)))
    tokens = jnp.asarray(np.random.default_rng(0).integers(0, 96, (4, 6)), jnp.int32)
    ref_logits, _ = im.forward(graphdef, state, tokens)
    cache = im.KVCache.init(cfg, 4, 16)
    _, _, cache = im.prefill(graphdef, state, cache, tokens, jnp.full((4,), 6))
    ref_verify, _, _ = im.verify(graphdef, state, cache, tokens[:, :3])

    mesh = sharding.make_mesh(data=2, model=2)
    sstate = sharding.shard_state(state, cfg, mesh)
    q = sstate["layers"]["q"][...]
    assert q.sharding.spec == jax.sharding.PartitionSpec(None, None, "model"), q.sharding
    assert len(q.addressable_shards) == 4 and q.addressable_shards[0].data.shape == (2, 32, 16)
    logits, _ = im.forward(graphdef, sstate, jax.device_put(tokens,
        jax.sharding.NamedSharding(mesh, jax.sharding.PartitionSpec("data"))))
    np.testing.assert_allclose(np.asarray(logits), np.asarray(ref_logits), atol=1e-5)
    scache = sharding.shard_cache(im.KVCache.init(cfg, 4, 16), mesh)
    assert scache.k.sharding.spec == jax.sharding.PartitionSpec(None, "data", None, "model", None)
    _, _, scache = im.prefill(graphdef, sstate, scache, tokens, jnp.full((4,), 6))
    out, _, _ = im.verify(graphdef, sstate, scache, tokens[:, :3])
    np.testing.assert_allclose(np.asarray(out), np.asarray(ref_verify), atol=1e-5)
    print("SHARDED_OK")
""")


def test_sharded_forward_equals_unsharded():
  root = Path(__file__).resolve().parents[2]
  env = dict(os.environ, XLA_FLAGS=f"{os.environ.get('XLA_FLAGS', '')} "
             "--xla_force_host_platform_device_count=4",
             JAX_PLATFORMS="cpu", PYTHONPATH=str(root))
  result = subprocess.run([sys.executable, "-c", _SCRIPT], env=env, cwd=root,
                          capture_output=True, text=True, timeout=300, check=False)
  assert result.returncode == 0, result.stderr[-4000:]
  assert "SHARDED_OK" in result.stdout
