"""The study runner: grids, resume, failed cells, determinism, shards and their merge, the
report never touching a tracked folder unless asked. Cells are the exactness study's
counter-example (a second each), so the runner's own behaviour is what is tested."""

from __future__ import annotations

import io
import json

import ml_collections
import pytest

from experiments import report, run as runner
from experiments.runner import environment, store, sweep
from tests.experiments import _configs


@pytest.fixture(autouse=True)
def _one_code_version(monkeypatch):
  """The checkout's uncommitted changes may change while the tests run (an editor saving):
  every run here is one code version unless a test says otherwise."""
  monkeypatch.setattr(environment, "code_diff_hash", lambda: "")


def _config(**grid):
  c = _configs.load("exactness")
  c.counter_samples = 3000
  c.publish_dir = ""
  c.grid = ml_collections.ConfigDict()
  c.grid.drafter = grid.get("drafter", ("counterexample/dense", "counterexample/sparse"))
  c.grid.rule = grid.get("rule", ("exact", "drop-illegal"))
  return c


def _run(c, tmp_path, **kw):
  return runner.run(c, results_dir=str(tmp_path), stream=io.StringIO(), **kw)


def _measurements(run_dir):
  return {r["cell"]: {k: v for k, v in r.items() if k != "overrides"}
          for r in store.read_records(run_dir) if r.get("kind") == "measurement"}


def test_grid_expands_in_key_order_with_stable_ids():
  cells = sweep.cells(_config())
  assert [c.id for c in cells] == [
      "drafter=counterexample/dense,rule=exact", "drafter=counterexample/dense,rule=drop-illegal",
      "drafter=counterexample/sparse,rule=exact",
      "drafter=counterexample/sparse,rule=drop-illegal"]
  assert cells[3].config.drafter == "counterexample/sparse"
  assert cells[3].config.rule == "drop-illegal" and "grid" not in cells[3].config


def test_bad_grids_and_shards_name_the_field():
  c = _config()
  c.grid.nonexistent = (1, 2)
  with pytest.raises(ValueError, match="grid.nonexistent.*no field 'nonexistent'"):
    sweep.cells(c)
  c = _config()
  c.grid.samples = 5
  with pytest.raises(ValueError, match="grid.samples = 5: a grid axis is a non-empty tuple"):
    sweep.cells(c)
  c = _config()
  c.grid.samples = ("many",)
  with pytest.raises(ValueError, match="grid.samples = 'many'"):
    sweep.cells(c)
  for bad in ("2", "3/2", "a/b", "-1/2"):
    with pytest.raises(ValueError, match=f"--shard={bad!r}"):
      sweep.parse_shard(bad)
  assert sweep.parse_shard("1/3") == (1, 3)


def _union():
  """Three sub-grids of the counter-example config; "dense" and "exact" both spell
  dense/exact, and "alpha" varies a field the others leave at the config's value."""
  c = _config()
  del c.grid
  c.grids = ml_collections.ConfigDict()
  c.grids.dense = ml_collections.ConfigDict(
      {"drafter": ("counterexample/dense",), "rule": ("exact", "drop-illegal")})
  c.grids.exact = ml_collections.ConfigDict(
      {"drafter": ("counterexample/dense", "counterexample/sparse"), "rule": ("exact",)})
  c.grids.alpha = ml_collections.ConfigDict({"alpha": (0.01,)})
  return c


UNION_IDS = [  # the sub-grids in name order, each cell naming every field any of them varies
    "alpha=0.01,drafter=counterexample/dense,rule=exact",
    "alpha=0.001,drafter=counterexample/dense,rule=exact",
    "alpha=0.001,drafter=counterexample/dense,rule=drop-illegal",
    "alpha=0.001,drafter=counterexample/sparse,rule=exact"]


def test_sub_grids_expand_to_their_union_with_repeats_kept_once():
  c = _union()
  cells = sweep.cells(c)
  assert [x.id for x in cells] == UNION_IDS and [x.index for x in cells] == [0, 1, 2, 3]
  assert [x.blocks for x in cells] == [("alpha",), ("dense", "exact"), ("dense",), ("exact",)]
  assert cells[0].config.alpha == 0.01 and cells[0].config.rule == "exact"
  assert cells[3].config.drafter == "counterexample/sparse" and cells[3].config.alpha == 0.001
  assert "grids" not in cells[3].config and "grid" not in cells[3].config
  # As a run directory's config.json gives it back (tuples as lists): the same cells.
  back = ml_collections.ConfigDict(json.loads(json.dumps(c.to_dict())))
  assert [x.id for x in sweep.cells(back)] == UNION_IDS
  assert dict(sweep.axes(c)) == {"alpha": (0.01, 0.001),
                                 "drafter": ("counterexample/dense", "counterexample/sparse"),
                                 "rule": ("exact", "drop-illegal")}
  # An integer for a float field spells the float's cell: 0 and 0.0 are one cell.
  c.grids.zero = ml_collections.ConfigDict({"alpha": (0,)})
  c.grids.zero_f = ml_collections.ConfigDict({"alpha": (0.0,)})
  assert [x.blocks for x in sweep.cells(c)][-1] == ("zero", "zero_f")
  # A grid beside the sub-grids (as --grid adds) is crossed with each, replacing their axis.
  crossed = sweep.with_axes(_union(), ["rule=exact,drop-illegal"])
  assert [x.id for x in sweep.cells(crossed)] == [
      "alpha=0.01,drafter=counterexample/dense,rule=exact",
      "alpha=0.01,drafter=counterexample/dense,rule=drop-illegal",
      *UNION_IDS[1:3],
      "alpha=0.001,drafter=counterexample/sparse,rule=exact",
      "alpha=0.001,drafter=counterexample/sparse,rule=drop-illegal"]
  # --only selects over the union's axes and values.
  assert [x.id for x in sweep.select(cells, c, ["alpha=0.01"])] == UNION_IDS[:1]
  with pytest.raises(ValueError, match="'0.5' not among the axis's values 0.01, 0.001"):
    sweep.select(cells, _union(), ["alpha=0.5"])
  bad = _union()
  bad.grids.oops = ml_collections.ConfigDict({"nonexistent": (1,)})
  with pytest.raises(ValueError, match="grids.oops.nonexistent: the config has no field"):
    sweep.cells(bad)
  bad = _union()
  bad.grids.flat = 3
  with pytest.raises(ValueError, match="grids.flat = 3: a sub-grid is a group of axes"):
    sweep.cells(bad)


def test_a_union_runs_in_shards_that_resume_and_merge(tmp_path):
  c = _union()
  shards = [_run(c, tmp_path, shard=f"{i}/2") for i in range(2)]
  ran = [sorted(_measurements(d)) for d in shards]
  assert ran == [sorted(UNION_IDS[0::2]), sorted(UNION_IDS[1::2])]
  assert _run(c, tmp_path, shard="0/2") == shards[0]  # resumed: nothing left to run
  assert sorted(_measurements(shards[0])) == ran[0]
  _, records, failures = report.merge(shards)
  assert not failures
  assert list(dict.fromkeys(r["cell"] for r in records)) == UNION_IDS  # sweep order
  assert "4 of 4 cells done" in report.build(shards, out_dir=tmp_path / "m").read_text()


@pytest.mark.parametrize("array", [(0, 1, 4), (1, 1, 4), (0, 2, 3)])
def test_slurm_array_tasks_partition_the_cells(array):
  """Faked SLURM job-array variables (--array=first-...:step with `count` tasks) set the default
  shard: the tasks' shards are disjoint and together hold every cell once."""
  first, step, count = array
  c = _config()
  c.grid.samples = (10, 20)
  cells = sweep.cells(c)
  seen = []
  for t in range(count):
    env = {"SLURM_ARRAY_TASK_ID": str(first + t * step), "SLURM_ARRAY_TASK_COUNT": str(count),
           "SLURM_ARRAY_TASK_MIN": str(first), "SLURM_ARRAY_TASK_STEP": str(step)}
    i, n = sweep.default_shard(env)
    assert (i, n) == (t, count)
    seen += [cell.index for cell in sweep.shard(cells, i, n)]
  assert sorted(seen) == [cell.index for cell in cells] and len(cells) == 8


def test_bad_slurm_variables_are_named():
  with pytest.raises(ValueError, match="SLURM_ARRAY_TASK_COUNT='four': expected an integer"):
    sweep.default_shard({"SLURM_ARRAY_TASK_ID": "0", "SLURM_ARRAY_TASK_COUNT": "four"})
  with pytest.raises(ValueError, match="SLURM_ARRAY_TASK_ID=5 is not one of the 4 tasks"):
    sweep.default_shard({"SLURM_ARRAY_TASK_ID": "5", "SLURM_ARRAY_TASK_COUNT": "4"})
  assert sweep.default_shard({}) == (0, 1)  # no array, one JAX process


def test_run_resume_and_failed_cell(tmp_path):
  c = _config(drafter=("counterexample/dense", "counterexample/bogus"), rule=("exact",))
  d = _run(c, tmp_path)
  cells = [r for r in store.read_records(d) if r.get("kind") == "cell"]
  status = {r["cell"]: r["status"] for r in cells}
  assert status == {"drafter=counterexample/dense,rule=exact": "ok",
                    "drafter=counterexample/bogus,rule=exact": "error"}
  err = next(r for r in cells if r["status"] == "error")
  assert "q_kind='bogus'" in err["error"]
  summary = (d / "summary.md").read_text()
  assert "## Cells not done" in summary and "bogus" in summary
  assert json.loads((d / "environment.json").read_text())["packages"]["jax"]
  assert json.loads((d / "config.json").read_text())["counter_samples"] == 3000
  # A rerun of the same config reuses the directory, skips the done cell, retries the failed one.
  before = _measurements(d)
  d2 = _run(c, tmp_path)
  assert d2 == d
  assert _measurements(d2) == before
  closes = [r for r in store.read_records(d) if r.get("kind") == "cell"]
  assert [r["status"] for r in closes] == ["ok", "error"]  # the failed attempt was replaced
  # A different config gets a new directory.
  c.counter_samples = 2000
  assert _run(c, tmp_path) != d


def test_absent_data_skips_the_cell_with_its_message(tmp_path):
  c = _configs.load("classification", "smoke")
  c.grid.dataset = ("trec",)
  c.grid.mode = ("pe",)
  c.model = "tiny-random"
  import experiments.workloads as wl

  real = wl.DATA
  try:
    wl.DATA = tmp_path / "absent"
    d = _run(c, tmp_path / "runs")
  finally:
    wl.DATA = real
  [cell] = [r for r in store.read_records(d) if r.get("kind") == "cell"]
  assert cell["status"] == "unavailable" and "is absent" in cell["error"]
  assert "unavailable" in (d / "summary.md").read_text()


def test_deterministic_and_shards_merge_to_the_whole(tmp_path):
  c = _config()
  whole = _run(c, tmp_path / "whole")
  again = _run(c, tmp_path / "again")
  assert _measurements(whole) == _measurements(again)
  shards = [_run(c, tmp_path / f"s{i}", shard=f"{i}/2") for i in range(2)]
  assert [len(_measurements(s)) for s in shards] == [2, 2]
  assert shards[0].name.endswith("-shard0of2")
  merged = report.build(shards, out_dir=tmp_path / "merged")
  whole_table = (whole / "summary.md").read_text().split("| drafter |", 1)[1]
  assert merged.read_text().split("| drafter |", 1)[1] == whole_table
  assert (tmp_path / "merged" / "exactness_tv.png").stat().st_size > 0
  assert "Cells still to run" not in merged.read_text()
  # One shard alone: the summary lists the other shard's cells as still to run.
  part = report.build(shards[:1], out_dir=tmp_path / "part").read_text()
  assert "2 of 4 cells have not run" in part and "| 1/2 | 2 | `--shard=1/2` |" in part
  assert "| 0/2 |" not in part
  # Shards of different configs refuse to merge.
  other = _config(rule=("exact",))
  with pytest.raises(ValueError, match="different configs"):
    report.build([shards[0], _run(other, tmp_path / "other")], out_dir=tmp_path / "x")


def test_some_cells_run_again_supersede_their_earlier_run(tmp_path):
  """`only` runs the selected cells in a directory of the whole config; merged after the
  earlier directory, its cells replace the earlier run's and the others stay."""
  c = _config()
  first = _run(c, tmp_path / "first")
  again = "drafter=counterexample/sparse,rule=exact"
  marked = [{**r, "earlier": True} for r in store.read_records(first)]
  (first / "runs.jsonl").write_text("".join(json.dumps(r) + "\n" for r in marked))
  second = _run(c, tmp_path / "second", only=("drafter=counterexample/sparse", "rule=exact"))
  assert {r["cell"] for r in store.read_records(second)} == {again}
  assert json.loads((second / "config.json").read_text()) == \
      json.loads((first / "config.json").read_text())
  assert "3 of 4 cells have not run" in (second / "summary.md").read_text()
  _, records, _ = report.merge([first, second])
  assert {r["cell"] for r in records} == {cell.id for cell in sweep.cells(c)}
  assert all(bool(r.get("earlier")) == (r["cell"] != again) for r in records)
  _, records, _ = report.merge([second, first])  # the order given decides
  assert all(r.get("earlier") for r in records)
  merged = report.build([first, second], out_dir=tmp_path / "merged").read_text()
  assert "from 2 run directories; 4 of 4 cells done" in merged
  # A selection over a field that is not an axis, or a value the axis lacks, is named.
  with pytest.raises(ValueError, match=r"--only seed=1: 'seed' is not an axis of the grid; "
                     r"its axes: drafter, rule"):
    _run(c, tmp_path / "x", only=("seed=1",))
  with pytest.raises(ValueError, match=r"'exakt' not among the axis's values exact, "
                     r"drop-illegal"):
    _run(c, tmp_path / "x", only=("rule=exakt",))
  with pytest.raises(ValueError, match="expected FIELD=V1,V2"):
    sweep.select(sweep.cells(c), c, ["rule"])


def test_publish_only_when_asked(tmp_path):
  c = _config(rule=("exact",), drafter=("counterexample/dense",))
  c.publish_dir = str(tmp_path / "tracked")
  _run(c, tmp_path / "runs")
  assert not (tmp_path / "tracked").exists()
  _run(c, tmp_path / "runs", publish=True)
  assert (tmp_path / "tracked" / "summary.md").exists()
  assert (tmp_path / "tracked" / "exactness_tv.png").exists()


def test_counter_example_verdicts(tmp_path):
  """The study's own claim on the counter-example: the exact rule passes, the naive one is
  rejected with a = 0.75."""
  d = _run(_config(drafter=("counterexample/dense",)), tmp_path)
  m = _measurements(d)
  exact = m["drafter=counterexample/dense,rule=exact"]
  naive = m["drafter=counterexample/dense,rule=drop-illegal"]
  assert exact["pvalue"] > 1e-3 and exact["tv"] < 0.03
  observed = {tuple(t["output"]): t["observed"] for t in naive["top"]}
  assert naive["pvalue"] < 1e-12 and abs(observed[("a",)] - 0.75) < 0.03


def test_an_override_of_a_missing_field_names_the_flag_and_the_fields():
  """`--config.grid.temperature=...` on a config whose grid lacks it is refused before the
  flag parser's bare AttributeError, with the flag, the config's fields and its grid axes."""
  config = f"--config={_configs.ROOT / 'configs' / 'acceptance.py'}:smoke"
  msg = runner.bad_override([config, "--config.grid.temperature=(0.0,)"])
  assert msg.startswith("--config.grid.temperature: config.grid has no field 'temperature'")
  assert "temperature" in msg.split("The config's fields: ")[1] and "grid's axes: constrained" in msg
  msg = runner.bad_override([config, "--config.drafter.options.nope=3"])
  assert "config.drafter.options has no field 'nope' (its fields: k, weights)" in msg
  assert runner.bad_override([config, "--config.drafter.options.k=8",
                              "--config.grid.constrained=(True,)"]) is None
  # A union of sub-grids: its axes are every field a sub-grid varies.
  union = f"--config={_configs.ROOT / 'configs' / 'acceptance.py'}:flagship"
  msg = runner.bad_override([union, "--config.temperatur=0.7"])
  assert "grid's axes: constrained, drafter.jump_forward, drafter.name, drafter.options.k" in msg
  assert runner.bad_override([union, "--config.grids.k.drafter.options.k=(2, 8)"]) is None


def test_resume_refuses_another_code_version_unless_asked(tmp_path):
  """A run directory whose done cells another code version ran is not resumed silently: the
  refusal names both versions and what differs; --resume_across_versions resumes and each
  cell's closing line names the version that ran it, which the summary reports."""
  c = _config(rule=("exact",))
  d = _run(c, tmp_path)
  second = "drafter=counterexample/sparse,rule=exact"
  env = json.loads((d / "environment.json").read_text())
  env["git"] = {"revision": "0123456789abcdef", "dirty": True, "diff_hash": "feedfacecafe"}
  env["packages"]["jax"] = "0.0.1"
  (d / "environment.json").write_text(json.dumps(env))
  old = "0123456789+feedfacecafe"  # as if that version had run the done cell
  lines = [{**r, "version": old} if r.get("kind") == "cell" else r for r in store.read_records(d)
           if r["cell"] != second]  # and the run was stopped before the second cell closed
  (d / "runs.jsonl").write_text("".join(json.dumps(r) + "\n" for r in lines))
  with pytest.raises(ValueError) as e:
    _run(c, tmp_path)
  msg = str(e.value)
  assert old in msg and "jax 0.0.1 vs" in msg
  assert "uncommitted code changes feedfacecafe vs" in msg and "--resume_across_versions" in msg
  assert _run(c, tmp_path, resume=False) != d  # a fresh directory is always allowed
  assert _run(c, tmp_path, run_dir=str(d), resume_across_versions=True) == d
  closes = {r["cell"]: r for r in store.read_records(d) if r.get("kind") == "cell"}
  now = closes[second]["version"]
  assert closes["drafter=counterexample/dense,rule=exact"]["version"] == old != now
  recorded = json.loads((d / "environment.json").read_text())
  assert recorded["git"]["revision"] == "0123456789abcdef"  # the first version is kept
  assert any("jax 0.0.1 vs" in x for x in recorded["resumed"][-1]["differences"])
  assert "**Cells from 2 code versions**" in (d / "summary.md").read_text()


def test_grid_flag_adds_or_replaces_an_axis_over_any_field():
  c = _config(rule=("exact",))
  out = sweep.with_axes(c, ["counter_samples=10,20", "rule=exact,drop-illegal"])
  ids = [cell.id for cell in sweep.cells(out)]
  assert len(ids) == 8 and ids[0] == ("counter_samples=10,drafter=counterexample/dense,"
                                      "rule=exact")
  assert sweep.cells(out)[1].config.rule == "drop-illegal"
  assert "counter_samples" not in c.grid  # the config passed in is not changed
  with pytest.raises(ValueError, match="--grid nope=1: the config has no field 'nope'; "
                                       "its fields: .*counter_samples"):
    sweep.with_axes(c, ["nope=1"])
  with pytest.raises(ValueError, match="'many' is not a int like the field's value 3000"):
    sweep.with_axes(c, ["counter_samples=10,many"])
  with pytest.raises(ValueError, match="expected FIELD=V1,V2"):
    sweep.with_axes(c, ["counter_samples"])


class _CoinStudy:
  """A study of a coin's heads rate: each batch is 20 new flips (requests), at most
  `c.flips` in all; its target figure is the rate with its bootstrap interval."""

  @staticmethod
  def run_cell(c, ctx, batch=0):
    import numpy as np

    rng = np.random.default_rng(100 + batch)
    for i in range(20 * batch, min(20 * (batch + 1), c.flips)):
      yield {"kind": "request", "item": i, "heads": int(rng.random() < 0.3)}
    yield {"kind": "measurement", "batch_flips": 20}

  @staticmethod
  def interval(records, c):
    from experiments.runner import stats

    reqs = [r for r in records if r.get("kind") == "request"]
    return stats.bootstrap(reqs, lambda rs: sum(r["heads"] for r in rs) / len(rs),
                           resamples=400)


def _sized(**fields):
  c = ml_collections.ConfigDict({"study": "coin", "flips": 1000, "target_width": 0.0,
                                 "max_units": 0, **fields})
  records = runner.sized_records(_CoinStudy, c, None)
  out = []
  while True:
    try:
      out.append(next(records))
    except StopIteration as stopped:
      return out, stopped.value


def test_cells_grow_until_their_interval_is_as_narrow_as_asked():
  """A target width adds batches of new units until the interval is that narrow; the cap and
  an exhausted source stop it too, and the closing record says which happened."""
  fixed, sample = _sized()
  assert sample is None and len(fixed) == 21 and "batch" not in fixed[0]
  records, sample = _sized(target_width=0.2, max_units=1000)
  reqs = [r for r in records if r["kind"] == "request"]
  assert sample["stopped"] == "reached" and sample["width"] <= 0.2
  assert sample["units"] == len(reqs) == 20 * sample["batches"] and sample["batches"] > 1
  assert len({r["item"] for r in reqs}) == len(reqs)  # batches are disjoint
  assert [r["batch"] for r in records if r["kind"] == "measurement"] == list(
      range(sample["batches"]))
  # One batch fewer would not have reached the width.
  shorter = [r for r in reqs if r["batch"] < sample["batches"] - 1]
  _, low, high = _CoinStudy.interval(shorter, None)
  assert high - low > 0.2
  _, sample = _sized(target_width=0.01, max_units=60)
  assert sample["stopped"] == "cap" and sample["units"] == 60 and sample["width"] > 0.01
  _, sample = _sized(target_width=0.01, max_units=10000, flips=50)
  assert sample["stopped"] == "exhausted" and sample["units"] == 50
  with pytest.raises(ValueError, match="needs a positive cap"):
    _sized(target_width=0.1)
  c = ml_collections.ConfigDict({"study": "coin", "target_width": 0.1, "max_units": 100})
  with pytest.raises(ValueError, match="the 'coin' study has no target figure"):
    next(runner.sized_records(type("Fixed", (), {"run_cell": _CoinStudy.run_cell}), c, None))
