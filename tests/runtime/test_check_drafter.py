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


@pytest.fixture(scope="module")
def tiny_checkpoint(tmp_path_factory):
  """A tiny random model on a byte-level vocabulary, saved as an infernix checkpoint."""
  from flax import nnx

  from infernix_jax import models as im
  from tests.runtime.test_cli import tiny_tokenizer_json
  folder = tmp_path_factory.mktemp("tiny_ckpt")
  tiny_tokenizer_json(folder / "tokenizer.json")
  cfg = im.ModelConfig(vocab_size=264, dim=32, num_layers=1, num_heads=2, num_kv_heads=1,
                       head_dim=16, ffn_dim=64)
  return im.save_checkpoint(folder / "tiny", cfg, im.Transformer(cfg, rngs=nnx.Rngs(0)),
                            vocab_source=folder / "tokenizer.json")


def test_a_plugin_drafter_runs_from_the_cli_and_the_api(plugin, tiny_checkpoint, tmp_path,
                                                        capsys):
  """`--plugin MODULE --drafter NAME --drafter-opt key=value` and `LLM(plugins=...,
  drafter=..., drafter_options=...)` build the same plugged-in drafter, which drafts."""
  import json

  from absl import flags

  import infernix_jax as ij
  from infernix_jax.cli import main as cli_main
  out = tmp_path / "out.json"
  flags.FLAGS.unparse_flags()
  argv = flags.FLAGS(["infernix-jax", "generate", f"--model={tiny_checkpoint}",
                      "--prompt=Pick one", "--choice=yes", "--choice=no way",
                      "--plugin=user_drafter", "--drafter=uniform", "--drafter-opt=skew=0",
                      "--k=2", "--max-tokens=12", f"--json-out={out}", "--nowarmup",
                      "--nostream"])
  assert cli_main.main(argv) == 0, capsys.readouterr().err
  result = json.loads(out.read_text())
  assert result["text"] in ("yes", "no way") and result["drafter"] == "jump+uniform"
  assert result["request"]["drafter"]["plugins"] == ["user_drafter"]
  assert result["stats"]["drafted"] > 0
  llm = ij.LLM(tiny_checkpoint, drafter="uniform", drafter_options={"skew": 0.0}, k=2,
               plugins=["user_drafter"], capacity=256, layout="stacked")
  out = llm.generate("Pick one", choice=["yes", "no way"], max_tokens=12)
  assert out.text in ("yes", "no way") and out.stats["drafted"] > 0
  assert out.token_ids == result["token_ids"]  # the same greedy output on both surfaces
  with pytest.raises(ij.RequestError) as err:
    ij.LLM(tiny_checkpoint, drafter="uniform", drafter_options={"skew": "lots"})
  assert err.value.param == "drafter_options.skew"


def test_a_plugin_drafter_runs_in_a_study_config(plugin, tmp_path):
  """A study config names the plug-in module and its drafter; the runner imports it first
  and the exactness study's cell passes its chi-square test."""
  import io

  import ml_collections

  from experiments import run as runner
  from experiments.runner import store
  from tests.experiments import _configs
  c = _configs.load("exactness")
  c.plugins = ("user_drafter",)
  c.samples, c.lanes, c.publish_dir = 600, 32, ""
  c.grid = ml_collections.ConfigDict({"drafter": ("uniform",)})
  run_dir = runner.run(c, results_dir=str(tmp_path), stream=io.StringIO())
  records = store.read_records(run_dir)
  [cell] = [r for r in records if r.get("kind") == "cell"]
  [measured] = [r for r in records if r.get("kind") == "measurement"]
  assert cell["status"] == "ok" and measured["pvalue"] > 1e-3, (cell, measured)
