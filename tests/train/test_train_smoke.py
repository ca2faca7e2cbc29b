"""The smoke training run goes end to end (a tiny random target with the embedded model's
vocabulary): corpus through the engine, teacher states, optax steps, an acceptance
evaluation, orbax checkpoints that resume, and an export the registry loads. Skipped
without the shared data or the embedded model's tokenizer."""

import json
import sys
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[2]
pytestmark = [pytest.mark.slow,
              pytest.mark.skipif(not (ROOT.parent / "shared/data/jsonschemabench").is_dir(),
                                 reason="needs ../shared/data")]


def _config(name, tmp_path):
  sys.path.insert(0, str(ROOT))
  import importlib
  c = importlib.import_module(f"configs.{name}").get_config("smoke")
  c.workdir = str(tmp_path / "run")
  c.cache_dir = str(tmp_path / "cache")
  c.export = str(tmp_path / "out" / "d.safetensors")
  return c


@pytest.fixture(scope="module")
def embedded():
  from infernix_jax import models as im
  try:
    im.default_model_path()
  except Exception as e:  # noqa: BLE001
    pytest.skip(f"embedded model absent: {e}")


@pytest.mark.parametrize("name", ["train_mtp"])
def test_smoke_run_trains_resumes_and_exports(embedded, tmp_path, name):
  from infernix_jax.models.drafters import weights as dw
  from infernix_jax.runtime import drafters
  from infernix_jax.train import corpus
  from infernix_jax.train.loop import train
  c = _config(name, tmp_path)
  summary = train(c)
  losses = [h["loss"] for h in summary["history"]["loss"]]
  assert losses and all(np.isfinite(losses))
  (ev,) = summary["history"]["evals"]
  assert ev["rounds"] > 0 and 1.0 <= ev["accepted_length"] <= c.k + 1
  assert summary["corpus"]["sequences"] > 0
  # Resume: a longer run continues from the last checkpoint, reusing the cached corpus.
  c.steps = c.steps + 2
  c.eval_every = 0
  again = train(c)
  assert [h["step"] for h in again["history"]["loss"]][-1] == c.steps
  assert (tmp_path / "run/checkpoints").is_dir()
  # The export carries its config and summary and loads through the registry.
  out = Path(c.export)
  assert json.loads((out.parent / "d.config.json").read_text())["steps"] == c.steps
  assert dw.summary(out)["steps"] == c.steps
  target, model_id = corpus.load_target(c.model)
  assert dw.summary(out)["target"] == model_id
  d = drafters.create("mtp", {"k": 2, "weights": str(out)}, target=(target.cfg, target.model))
  assert d.k == 2
  assert again["history"]["segments"] == [{"from_step": 4, "to_step": 6}]
