"""The dispatch table: kernel or reference per device kind, op and size; overrides; the writer;
the shipped table against the measurements it cites; the CPU kernels' switch."""

from __future__ import annotations

import json
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from infernix_jax import pallas as ip
from infernix_jax.models import cpu_kernels
from infernix_jax.pallas import dispatch

ROOT = Path(__file__).resolve().parents[2]
TABLE = dispatch.Table({"GPU X": {"masked_sample": ((8, 32), (128, None)),
                                  "cpu_kernels": ((1, None),)}})


@pytest.mark.parametrize("size,want", [(1, "reference"), (7, "reference"), (8, "kernel"),
                                       (20, "kernel"), (32, "kernel"), (33, "reference"),
                                       (127, "reference"), (128, "kernel"), (10**6, "kernel")])
def test_sizes_pick_the_kernel_only_inside_the_measured_ranges(size, want):
  assert dispatch.choose("masked_sample", size, table=TABLE, kind="GPU X") == want


def test_a_missing_device_kind_or_op_runs_the_reference():
  assert dispatch.choose("masked_sample", 16, table=TABLE, kind="GPU Y") == "reference"
  assert dispatch.choose("spec_accept", 16, table=TABLE, kind="GPU X") == "reference"
  assert dispatch.choose("cpu_kernels", table=TABLE, kind="GPU X") == "kernel"  # every size
  assert dispatch.choose("masked_sample", table=TABLE, kind="GPU X") == "reference"
  empty = dispatch.Table({})
  for op in dispatch.OPS:
    assert dispatch.choose(op, 8, table=empty, kind="cpu") == "reference"


def test_impl_overrides_the_table(monkeypatch):
  for impl in ("kernel", "reference", "interpret"):
    assert dispatch.choose("masked_sample", 1, impl, table=TABLE, kind="GPU X") == impl
    assert dispatch.choose("masked_sample", 16, impl, table=TABLE, kind="GPU X") == impl
  assert dispatch.choose("masked_sample", 16, "auto", table=TABLE, kind="GPU X") == "kernel"
  with pytest.raises(ValueError, match="impl="):
    dispatch.choose("masked_sample", 16, "fast", table=TABLE, kind="GPU X")
  with pytest.raises(ValueError, match="op="):
    dispatch.choose("sampling", 16, table=TABLE, kind="GPU X")
  monkeypatch.setenv(dispatch.ENV_IMPL, "interpret")
  assert ip.resolve_impl(None, "spec_accept", 8) == "interpret"
  assert ip.resolve_impl("reference", "spec_accept", 8) == "reference"  # the argument wins
  monkeypatch.setenv(dispatch.ENV_IMPL, "auto")
  assert ip.resolve_impl() == "reference"


def test_this_machine_runs_the_references_by_default(monkeypatch):
  """This CPU has no Pallas entry: every op at every size runs its reference."""
  monkeypatch.delenv(dispatch.ENV_IMPL, raising=False)
  kind = jax.devices()[0].device_kind
  assert kind not in {"NVIDIA H200"}, kind
  for op in ("masked_sample", "spec_accept", "tree_accept"):
    for size in (1, 8, 128, 4096):
      assert ip.resolve_impl(None, op, size) == "reference"


def _write(tmp_path, raw, name="table.json") -> Path:
  path = tmp_path / name
  path.write_text(raw if isinstance(raw, str) else json.dumps(raw))
  return path


@pytest.mark.parametrize("raw,what", [
    ("{not json", "not valid JSON"),
    ([], '"devices" object'),
    ({"devices": {"cpu": {"ops": {}}}}, "source"),
    ({"devices": {"cpu": {"source": "x", "ops": {"sampler": {"kernel_sizes": []}}}}},
     "unknown op 'sampler'"),
    ({"devices": {"cpu": {"source": "x", "ops": {"spec_accept": {}}}}}, "kernel_sizes"),
    ({"devices": {"cpu": {"source": "x", "ops": {"spec_accept": {"kernel_sizes": [[8]]}}}}},
     r"kernel_sizes\[0\] = \[8\]"),
    ({"devices": {"cpu": {"source": "x", "ops": {"spec_accept": {"kernel_sizes": [[9, 8]]}}}}},
     "1 <= lo <= hi"),
    ({"devices": {"cpu": {"source": "x", "ops": {"spec_accept": {"kernel_sizes": [[0, 8]]}}}}},
     "1 <= lo <= hi"),
])
def test_a_malformed_table_names_the_file_and_the_entry(tmp_path, raw, what):
  path = _write(tmp_path, raw)
  with pytest.raises(ValueError, match=what) as err:
    dispatch.load_table(path)
  assert str(path) in str(err.value)


def test_the_environment_names_another_table(tmp_path, monkeypatch):
  path = _write(tmp_path, {"devices": {jax.devices()[0].device_kind: {
      "source": "a test", "ops": {"tree_accept": {"kernel_sizes": [[2, 4]]}}}}})
  monkeypatch.setenv(dispatch.ENV_TABLE, str(path))
  monkeypatch.delenv(dispatch.ENV_IMPL, raising=False)
  assert [ip.resolve_impl(None, "tree_accept", b) for b in (1, 2, 4, 5)] == [
      "reference", "kernel", "kernel", "reference"]
  monkeypatch.setenv(dispatch.ENV_TABLE, str(_write(tmp_path, "[", "bad.json")))
  with pytest.raises(ValueError, match="bad.json"):
    ip.resolve_impl(None, "tree_accept", 2)


def test_kernel_ranges_keep_sizes_where_every_measurement_won():
  rows = [("masked_sample", 1, 2.0, 1.0), ("masked_sample", 8, 1.0, 2.0),
          ("masked_sample", 8, 1.0, 1.5),                       # both configurations won
          ("masked_sample", 32, 0.9, 1.0), ("masked_sample", 128, 3.0, 1.0),
          ("masked_sample", 512, 1.0, 2.0),
          dict(op="spec_accept", size=8, kernel_ms=1.0, reference_ms=2.0),
          dict(op="spec_accept", size=8, kernel_ms=2.0, reference_ms=1.0)]   # one lost
  assert dispatch.kernel_ranges(rows) == {"masked_sample": [[8, 32], [512, 512]],
                                          "spec_accept": []}
  with pytest.raises(ValueError, match="op="):
    dispatch.kernel_ranges([("sampler", 8, 1.0, 2.0)])
  with pytest.raises(ValueError, match="finite and positive"):
    dispatch.kernel_ranges([("spec_accept", 8, float("nan"), 2.0)])


def test_write_table_round_trips_and_keeps_other_devices(tmp_path):
  path = _write(tmp_path, {"devices": {"cpu": {"source": "kept", "ops": {
      "cpu_kernels": {"kernel_sizes": [[1, None]]}}}}})
  entry = dispatch.write_table(path, "GPU Z", [("spec_accept", 8, 1.0, 2.0),
                                               ("spec_accept", 32, 3.0, 2.0)], "a test run")
  assert entry["ops"]["spec_accept"]["kernel_sizes"] == [[8, 8]]
  table = dispatch.load_table(path)
  assert table.use_kernel("GPU Z", "spec_accept", 8)
  assert not table.use_kernel("GPU Z", "spec_accept", 32)
  assert table.use_kernel("cpu", "cpu_kernels", None)
  raw = json.loads(path.read_text())
  assert raw["devices"]["GPU Z"]["source"] == "a test run"
  assert [m["size"] for m in raw["devices"]["GPU Z"]["ops"]["spec_accept"]["measured"]] == [8, 32]


def test_the_shipped_table_is_what_its_sources_measured():
  """Every Pallas entry restates a measurement file of docs/results: the kernel is listed
  exactly where that file has it beating its reference."""
  raw = json.loads(dispatch.TABLE_PATH.read_text())
  table = dispatch.load_table(dispatch.TABLE_PATH)
  h200 = json.loads((ROOT / "docs/results/kernels_h200.json").read_text())
  spec = [(r["rows"], r["ours_ms"], r["reference_ms"]) for r in h200["bench_bf16"]
          if r.get("spec")]
  assert spec, "kernels_h200.json has no spec_accept rows"
  for rows, kernel_ms, reference_ms in spec:
    assert table.use_kernel("NVIDIA H200", "spec_accept", rows) == (kernel_ms < reference_ms)
  assert "kernels_h200.json" in raw["devices"]["NVIDIA H200"]["source"]
  # masked_sample was timed against an unfused peer only: no entry, the reference runs.
  assert not table.use_kernel("NVIDIA H200", "masked_sample", 128)
  assert set(raw["devices"]) == {"cpu", "NVIDIA H200"}
  assert table.use_kernel("cpu", "cpu_kernels", None)


def test_the_table_ships_with_the_package():
  import tomllib
  data = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"][
      "package-data"]["infernix_jax.pallas"]
  assert dispatch.TABLE_PATH.name in data


def test_cpu_kernels_go_through_the_table(monkeypatch):
  """The table's CPU entry turns the C++ kernels on; `disabled()` and the environment
  variable override it; a device kind without the entry runs XLA's own ops."""
  monkeypatch.setattr(cpu_kernels, "_loaded", lambda: True)
  monkeypatch.delenv(cpu_kernels.ENV_OFF, raising=False)
  assert cpu_kernels.available() == (jax.devices()[0].device_kind == "cpu")
  with cpu_kernels.disabled():
    assert not cpu_kernels.available()
  monkeypatch.setenv(cpu_kernels.ENV_OFF, "0")
  assert not cpu_kernels.available()
  monkeypatch.setenv(cpu_kernels.ENV_OFF, "1")
  monkeypatch.setattr(dispatch, "default_table", lambda: dispatch.Table({}))
  assert not cpu_kernels.available()
  monkeypatch.setattr(dispatch, "default_table", lambda: TABLE)
  monkeypatch.setattr(dispatch, "device_kind", lambda: "GPU X")
  assert cpu_kernels.available()


def test_dispatch_follows_the_table_to_the_kernel(monkeypatch):
  """`spec_accept` at a size the table lists calls the kernel (here interpreted), elsewhere
  the reference; both give the same tokens."""
  from tests.pallas.spec_world import World
  monkeypatch.delenv(dispatch.ENV_IMPL, raising=False)
  kind = jax.devices()[0].device_kind
  monkeypatch.setattr(dispatch, "default_table",
                      lambda: dispatch.Table({kind: {"spec_accept": ((3, 3),)}}))
  calls = []
  real = dispatch._sa.spec_accept_kernel
  monkeypatch.setattr(dispatch._sa, "spec_accept_kernel",
                      lambda *a, **kw: calls.append(a[0].shape[0]) or real(
                          *a, **{**kw, "interpret": True}))
  world = World(12, 16, 2, seed=1)
  for rows in (2, 3):
    inputs = world.batch(rows, "dense", dict(temperature=1.0), np.random.default_rng(rows))
    got = ip.spec_accept(**inputs, vocab_size=12)
    want = ip.spec_accept_reference(**inputs, vocab_size=12)
    for a, b in zip(got, want):
      np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
  assert calls == [3]


def test_the_one_residual_paths_follow_their_own_entries():
  """`spec_accept` / `tree_accept` run their one-residual jnp path at the sizes of the entries
  `<op>_one_residual`, the kernel where the table lists it too, else the reference."""
  table = dispatch.Table({"GPU X": {"tree_accept_one_residual": ((1, 16),),
                                    "tree_accept": ((8, 8),),
                                    "spec_accept_one_residual": ((4, None),)}})
  pick = lambda op, size, kind="GPU X": dispatch.choose(op, size, table=table, kind=kind)
  assert [pick("tree_accept", b) for b in (1, 8, 16, 17)] == [
      "one_residual", "kernel", "one_residual", "reference"]
  assert [pick("spec_accept", b) for b in (3, 4, 1000)] == [
      "reference", "one_residual", "one_residual"]
  assert pick("tree_accept", 4, "GPU Y") == "reference"
  assert pick("masked_sample", 4) == "reference"
  assert dispatch.choose("tree_accept", 4, "one_residual", table=dispatch.Table({}),
                         kind="cpu") == "one_residual"
  with pytest.raises(ValueError, match="one_residual.*not of masked_sample"):
    dispatch.choose("masked_sample", 4, "one_residual", table=table, kind="GPU X")
  assert dispatch.kernel_ranges([("tree_accept_one_residual", 8, 1.0, 2.0)]) == {
      "tree_accept_one_residual": [[8, 8]]}


def test_the_environment_asks_for_the_one_residual_paths(monkeypatch):
  """INFERNIX_PALLAS_IMPL=one_residual: the acceptance ops take that path, masked_sample (which
  has none) follows the table; as an argument it is refused for masked_sample."""
  monkeypatch.setenv(dispatch.ENV_IMPL, "one_residual")
  assert [ip.resolve_impl(None, op, 8) for op in ("spec_accept", "tree_accept")] == [
      "one_residual", "one_residual"]
  assert ip.resolve_impl(None, "masked_sample", 8) == "reference"
  with pytest.raises(ValueError, match="not of masked_sample"):
    ip.resolve_impl("one_residual", "masked_sample", 8)


def _small_trees(rows, rng):
  v, vm, t = 12, 16, 4
  logits = rng.normal(size=(rows, t, vm)).astype(np.float32) * 2
  best = np.argmax(logits[..., :v], -1)
  tokens = np.where(rng.random((rows, t)) < 0.5, best[:, [0, 0, 0, 1]],
                    rng.integers(0, v, (rows, t)))
  return dict(logits=jnp.asarray(logits), mask=None, mask_enabled=None, states=None,
              tokens=jnp.asarray(tokens, jnp.int32),
              parents=jnp.asarray(np.tile([-1, 0, 0, 1], (rows, 1)), jnp.int32),
              n_nodes=jnp.full((rows,), t, jnp.int32), q=ip.OneHotQ(),
              params=ip.SamplingParams.create(rows, temperature=np.where(
                  np.arange(rows) % 2 == 0, 0.0, 1.0)),
              seed=jnp.arange(rows, dtype=jnp.uint32), position=jnp.zeros((rows,), jnp.int32))


def test_dispatch_follows_the_table_to_the_one_residual_path(monkeypatch):
  """`tree_accept` at a size the table lists for its one-residual path calls that path,
  elsewhere the reference; both give the same results. `impl="one_residual"` reaches
  `spec_accept`'s."""
  monkeypatch.delenv(dispatch.ENV_IMPL, raising=False)
  kind = jax.devices()[0].device_kind
  monkeypatch.setattr(dispatch, "default_table",
                      lambda: dispatch.Table({kind: {"tree_accept_one_residual": ((3, 3),)}}))
  calls = []
  for module, name in ((dispatch._tp, "tree_accept_one_residual"),
                       (dispatch._sa, "spec_accept_one_residual")):
    real = getattr(module, name)
    monkeypatch.setattr(module, name, lambda *a, real=real, name=name, **kw: calls.append(
        (name, a[0].shape[0])) or real(*a, **kw))
  for rows in (2, 3):
    inputs = _small_trees(rows, np.random.default_rng(rows))
    got = ip.tree_accept(**inputs, vocab_size=12)
    want = ip.tree_accept_reference(**inputs, vocab_size=12)
    for a, b in zip(got, want):
      np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
  assert calls == [("tree_accept_one_residual", 3)]
  from tests.pallas.spec_world import World
  inputs = World(12, 16, 2, seed=1).batch(2, "dense", dict(temperature=1.0),
                                         np.random.default_rng(0))
  got = ip.spec_accept(**inputs, vocab_size=12, impl="one_residual")
  for a, b in zip(got, ip.spec_accept_reference(**inputs, vocab_size=12)):
    np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
  assert calls[-1] == ("spec_accept_one_residual", 2)
