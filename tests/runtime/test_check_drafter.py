"""`check_drafter` on drafters written outside the package: one registered from its own file
(a plug-in module) passes; one whose q is not the distribution it drew from fails."""

from __future__ import annotations

import textwrap

import pytest

from infernix_jax import drafters
from infernix_jax.runtime.build import EngineSpec, load_plugins
from infernix_jax.testing import check_drafter

PLUGIN = textwrap.dedent('''
    """A user's drafter in their own file: K drafts drawn uniformly from a few ids (sparse q)."""
    import dataclasses

    import jax
    import jax.numpy as jnp

    from infernix_jax import drafters
    from infernix_jax.pallas import SparseQ

    @dataclasses.dataclass(frozen=True)
    class Options(drafters.DrafterOptions):
      skew: float = 0.0  # 0: q is the uniform law the drafts are drawn from; > 0: a lie

    @dataclasses.dataclass(frozen=True, eq=False)
    class Uniform(drafters.Drafter):
      skew: float = 0.0
      name = "uniform"
      on_device = True
      q_kind = "sparse"
      sampling = True

      def propose(self, params, state, inp):
        b, k, c = inp.anchor.shape[0], self.k, 8
        ids = jnp.broadcast_to(jnp.arange(1, c + 1, dtype=jnp.int32), (b, k, c))
        ids = jnp.concatenate([ids, jnp.full((b, k, 16 - c), -1, jnp.int32)], axis=-1)
        keys = jax.vmap(lambda s, p: jax.random.fold_in(jax.random.key(7), s * 4096 + p))(
            inp.seed.astype(jnp.int32), inp.position)
        pick = jax.vmap(lambda key: jax.random.randint(key, (k,), 0, c))(keys)  # [B, K]
        drafts = jnp.take_along_axis(ids[:, :, :c], pick[..., None], axis=-1)[..., 0]
        probs = jnp.full((c,), 1.0 / c).at[0].add(self.skew).at[1:].add(-self.skew / (c - 1))
        probs = jnp.concatenate([probs, jnp.zeros((16 - c,))])
        q = SparseQ(ids=ids, probs=jnp.broadcast_to(probs, (b, k, 16)).astype(jnp.float32))
        n = jnp.minimum(inp.limit, k).astype(jnp.int32)
        return drafters.Proposal(drafts.astype(jnp.int32), n, q), state

    def build(options, context):
      return Uniform(k=options.k, skew=options.skew)

    drafters.register("uniform", build, options=Options, help="uniform sparse drafts",
                      replace=True)
''')


@pytest.fixture(scope="module")
def plugin(tmp_path_factory):
  """The plug-in module, in a folder outside the repository, loaded as `--plugin` does."""
  import sys
  folder = tmp_path_factory.mktemp("user_code")
  (folder / "user_drafter.py").write_text(PLUGIN)
  sys.path.insert(0, str(folder))
  load_plugins(("user_drafter",))
  yield "uniform"
  sys.path.remove(str(folder))


def test_a_plugged_in_drafter_passes_the_checks(plugin):
  report = check_drafter(plugin, {"k": 3})
  assert report.passed, report
  assert report.drafted > 0 and report.accepted > 0
  assert drafters.fields(plugin) == {"k": 4, "skew": 0.0}
  spec = EngineSpec(drafter=plugin, drafter_options={"skew": "0.0"}, plugins=("user_drafter",))
  assert spec.validate(files=False).k == 4


def test_a_biased_q_fails_the_checks(plugin):
  """The drafts are drawn uniformly but q claims the first candidate is likelier: the
  acceptance ratio is wrong and the output law moves away from ordinary decoding's."""
  report = check_drafter(plugin, {"k": 3, "skew": 0.5})
  assert not report.passed
  assert any("chi-square" in f for f in report.failures), report
