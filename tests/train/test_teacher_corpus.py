"""The teacher-scored corpus: written items split by identity, a smoke build whose stored
distributions match an independent single-sequence forward (FP64 log-softmax), and a build
that resumes at its first unfinished shard. Skipped without the shared data or the embedded
model's tokenizer."""

import json
import shutil
import sys
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.skipif(not (ROOT.parent / "shared/data/jsonschemabench").is_dir(),
                                reason="needs ../shared/data")


def test_written_items_keep_validation_out_of_training():
  from infernix_jax.train import prompts, sources
  counts = {"maskbench": 40, "bfcl": 20, "banking77": 20, "clinc150": 20, "trec": 20}
  train = sources.items(counts, "train")
  val = sources.items(counts, "validation")
  assert {i.source for i in train} == set(sources.SOURCES)
  names = lambda xs: {i.name.split("#")[0] for i in xs}  # noqa: E731
  assert names(train).isdisjoint(names(val))
  assert all(prompts.split_of(n) == "validation" for n in names(val))
  for item in train:
    if item.family in ("json", "tool"):
      json.loads(item.answer)  # the answers are JSON documents
  with pytest.raises(ValueError, match="unknown corpus sources"):
    sources.items({"sharegpt": 1})


@pytest.fixture(scope="module")
def tiny_target():
  """Within this module `corpus.load_target("tiny-random")` returns one target, made once:
  the corpus build, every training run and the tests would otherwise each read the
  vocabulary and initialise the random model again (seconds each). The target is frozen
  (scoring, training and the engines read it) and the same as a fresh one (seed 0)."""
  from infernix_jax.train import corpus
  real, made = corpus.load_target, {}

  def load_target(path=None, layout="unrolled"):
    if path != corpus.TINY_RANDOM:
      return real(path, layout)
    if layout not in made:
      made[layout] = real(path, layout)
    return made[layout]

  with pytest.MonkeyPatch.context() as mp:
    mp.setattr(corpus, "load_target", load_target)
    yield


@pytest.fixture(scope="module")
def smoke(tmp_path_factory, tiny_target):
  from infernix_jax import models as im
  try:
    im.default_model_path()
  except Exception as e:  # noqa: BLE001
    pytest.skip(f"embedded model absent: {e}")
  sys.path.insert(0, str(ROOT))
  import importlib
  c = importlib.import_module("configs.corpus").get_config("smoke")
  c.self_mix = {"json": 1}
  c.cache_dir = str(tmp_path_factory.mktemp("corpus"))
  from infernix_jax.train import teacher_corpus
  return c, teacher_corpus.build(c)


@pytest.mark.slow
def test_smoke_corpus_matches_a_single_sequence_forward(smoke):
  from flax import nnx

  from infernix_jax.models import phases
  from infernix_jax.models.kv_cache import KVCache
  from infernix_jax.train import corpus
  c, built = smoke
  m = built.manifest
  assert m["tokens"] == built.tokens > 0 and len(built) == m["sequences"]
  assert set(m["mix"]) >= {"maskbench", "bfcl", "self"}
  assert m["scoring"]["tokens_per_second"] > 0
  target, _ = corpus.load_target("tiny-random")
  graphdef, state = nnx.split(target.model)
  d = target.cfg.dim
  for i in (0, len(built) - 1):
    seq = built.sequence(i)
    n = len(seq["tokens"])
    assert seq["features"].shape == (n, len(m["taps"]) * d) and seq["last"].shape == (n, d)
    cache = KVCache.init(target.cfg, batch=1, capacity=n)
    logits, hidden, _ = phases.verify(graphdef, state, cache, seq["tokens"][None].astype(np.int32))
    z = np.asarray(logits[0], np.float64)
    logp = z - z.max(-1, keepdims=True)
    logp -= np.log(np.exp(logp).sum(-1, keepdims=True))
    want = np.take_along_axis(logp, seq["top_ids"].astype(np.int64), axis=1)
    np.testing.assert_allclose(seq["top_logp"].astype(np.float64), want, atol=2e-2)
    # the stored ids are the J most probable, best first
    kth = np.sort(logp, axis=1)[:, -c.top_k]
    assert np.all(want[:, -1] >= kth - 1e-3) and np.all(np.diff(want, axis=1) <= 1e-3)
    np.testing.assert_allclose(seq["last"].astype(np.float32), np.asarray(hidden[0]),
                               atol=2e-2, rtol=2e-2)


@pytest.mark.slow
def test_build_resumes_at_its_first_unfinished_shard(smoke, capsys):
  from infernix_jax.train import teacher_corpus
  c, built = smoke
  assert len(built.manifest["shards"]) >= 2
  before = built.sequence(len(built) - 1)
  last = built.directory / built.manifest["shards"][-1]
  kept = built.directory / built.manifest["shards"][0] / "tokens.npy"
  stamp = kept.stat().st_mtime_ns
  (built.directory / "manifest.json").unlink()
  shutil.rmtree(last)
  again = teacher_corpus.build(c)
  assert kept.stat().st_mtime_ns == stamp  # a finished shard is not scored again
  after = again.sequence(len(again) - 1)
  for k in before:
    np.testing.assert_array_equal(before[k], after[k])
  assert again.manifest["sequences"] == built.manifest["sequences"]
  with pytest.raises(FileNotFoundError, match="no finished scored corpus"):
    teacher_corpus.ScoredCorpus(built.directory.parent)


@pytest.mark.slow
def test_eagle3_smoke_run_trains_resumes_and_exports_a_loadable_head(smoke, tmp_path):
  """The EAGLE-3 run on the smoke corpus: optax steps with finite losses, a resumed longer
  run, an export in the public layout that `--drafter eagle3 weights=DIR` loads."""
  import importlib

  from infernix_jax.runtime import drafters
  from infernix_jax.train import corpus, eagle3
  c_corpus, built = smoke
  c = importlib.import_module("configs.train_eagle3").get_config("smoke")
  c.corpus = c_corpus
  c.workdir = str(tmp_path / "run")
  c.export = str(tmp_path / "head")
  c.eval_at_end = False
  summary = eagle3.train(c)
  losses = [h["loss"] for h in summary["history"]["loss"]]
  assert losses and all(np.isfinite(losses)) and summary["corpus"]["key"] == built.manifest["key"]
  c.steps += 2
  c.eval_at_end = True
  again = eagle3.train(c)
  assert again["history"]["segments"] == [{"from_step": c.steps - 2, "to_step": c.steps}]
  (ev,) = again["history"]["evals"]
  assert ev["rounds"] > 0 and 1.0 <= ev["accepted_length"] <= c.k + 1
  head = Path(c.export)
  config = json.loads((head / "config.json").read_text())
  assert config["draft_vocab_size"] == c.draft_vocab and config["infernix"]["steps"] == c.steps
  assert json.loads((head / "training_log.json").read_text())["steps"] == c.steps
  target, _ = corpus.load_target("tiny-random")
  d = drafters.create("eagle3", {"k": c.k, "weights": str(head)},
                      target=(target.cfg, target.model))
  assert d.feature_taps == tuple(built.manifest["taps"])
  with pytest.raises(Exception, match="no such folder"):
    drafters.create("eagle3", {"weights": str(tmp_path / "nowhere")},
                    target=(target.cfg, target.model))
  with pytest.raises(ValueError, match="step_weights"):
    c.step_weights = (1.0,)
    eagle3.train(c)


@pytest.mark.slow
@pytest.mark.parametrize("name,vocab", [("train_mtp", 512), ("train_block", 0),
                                        ("train_dspark", 512)])
def test_distill_smoke_run_trains_resumes_and_exports(smoke, tmp_path, name, vocab):
  """The MTP / block run on the smoke corpus: finite losses, an evaluation through the
  engine, a resumed longer run, and an export that the registry loads with the draft
  vocabulary it was trained on (its drafts stay inside it)."""
  import importlib

  import jax.numpy as jnp

  from infernix_jax.models.drafters import weights as dw
  from infernix_jax.runtime import drafters
  from infernix_jax.train import corpus, loop
  c_corpus, built = smoke
  c = importlib.import_module(f"configs.{name}").get_config("smoke")
  c.corpus = c_corpus
  c.draft_vocab = vocab
  c.workdir = str(tmp_path / "run")
  c.export = str(tmp_path / "out" / "d.safetensors")
  summary = loop.train(c)
  losses = [h["loss"] for h in summary["history"]["loss"]]
  assert losses and all(np.isfinite(losses)) and summary["corpus"]["key"] == built.manifest["key"]
  (ev,) = summary["history"]["evals"]
  assert ev["rounds"] > 0 and 1.0 <= ev["accepted_length"] <= c.k + 1
  c.steps += 2
  c.eval_every = 0
  again = loop.train(c)
  assert again["history"]["segments"] == [{"from_step": c.steps - 2, "to_step": c.steps}]
  out = Path(c.export)
  assert json.loads((out.parent / "d.config.json").read_text())["steps"] == c.steps
  assert dw.summary(out)["steps"] == c.steps
  target, model_id = corpus.load_target("tiny-random")
  assert dw.summary(out)["target"] == model_id
  net = dw.load(out, c.drafter, target.cfg, target.model.embed[...])
  kept = dw.draft_vocab_of(net)
  assert (kept is None) if not vocab else (len(kept) == vocab
                                           and set(target.vocab.eos_ids) <= set(kept.tolist()))
  d = drafters.create(c.eval_drafter, {"k": 2, "weights": str(out)},
                      target=(target.cfg, target.model))
  head = d.net.head
  assert (head.vocab is None) == (not vocab)
  if vocab:
    logits = np.asarray(head.logits(jnp.ones((3, target.cfg.dim), jnp.float32)))
    assert np.isfinite(logits).sum(-1).tolist() == [vocab] * 3
  with pytest.raises(ValueError, match="position_weights"):
    c.position_weights = (1.0,)
    loop.train(c)
