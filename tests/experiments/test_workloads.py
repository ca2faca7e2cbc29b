"""Workload loaders: stable subsets, documented sizes, oracles that accept and reject, and a
clean message when the shared data is absent."""

from __future__ import annotations

import json

import pytest

from experiments import workloads
from experiments.studies.classification import match
from tests.experiments import _configs

needs_data = pytest.mark.skipif(not _configs.DATA.is_dir(), reason="../shared/data is absent")


@needs_data
@pytest.mark.parametrize("dataset,labels,rows", [("trec", 42, 500), ("banking77", 77, 3080),
                                                 ("clinc150", 150, 4500)])
def test_label_sets_and_subsets(dataset, labels, rows):
  names, all_rows = workloads.labels(dataset)
  assert len(set(names)) == labels and len(all_rows) == rows
  assert all(gold in names for _, gold in all_rows)
  a = workloads.load(f"labels:{dataset}", 200, seed=0)
  assert [i.id for i in a] == [i.id for i in workloads.load(f"labels:{dataset}", 200, seed=0)]
  assert len({i.id for i in a}) == 200
  assert a[0].prompt.startswith("Select exactly one of the following options.")
  assert a[0].validate(a[0].reference) and not a[0].validate(a[0].reference + "x")


@needs_data
def test_jsonschema_and_bfcl_items_validate_with_jsonschema():
  [item] = workloads.load("jsonschema:Github_easy", 1, seed=3)
  assert item.output_constraint().kind.value == "json_schema"
  assert item.validate("not json") is False
  [call] = workloads.load("bfcl:simple_python", 1, seed=0)
  schema = json.loads(call.constraint[1])
  name = schema["properties"]["name"]["const"]
  assert call.validate(json.dumps({"name": name, "arguments": {}})) in (True, False)
  assert call.validate(json.dumps({"name": name + "_nope", "arguments": {}})) is False


@needs_data
def test_jsonschema_workloads_hold_only_schemas_the_checker_accepts():
  """Github_trivial holds o65455 (`format` inside `oneOf`), which the strict checker refuses:
  a decoding workload leaves it out instead of failing every constrained cell."""
  from infernix_jax.constrain.schema.check import check_json_schema
  items = workloads.load("jsonschema:Github_trivial", 0)
  assert items and "json/Github_trivial/o65455" not in {i.id for i in items}
  for item in items:
    check_json_schema(item.constraint[1])


@needs_data
@pytest.mark.parametrize("name", ["arithmetic", "list"])
def test_gbnf_workloads_compile(name):
  from infernix_jax import constrain as ic
  from infernix_jax import models as im

  vocab = ic.Vocabulary.from_gguf(im.default_model_path())
  items = workloads.load(f"gbnf:{name}", 0)
  assert len(items) == 5
  ic.ConstraintCompiler(vocab).compile(items[0].output_constraint())


def test_synthetic_workloads_need_no_data():
  tools = workloads.load("tools:100", 5, seed=1)
  assert len(tools) == 5 and all(t.reference in t.constraint[1] for t in tools)
  dates = workloads.load("regex:dates", 0)
  assert dates[0].validate("2024-02-29") and not dates[0].validate("2024-13-01")
  uuid = workloads.load("regex:uuids", 1)[0]
  assert uuid.validate("123e4567-e89b-42d3-a456-426614174000")


def test_errors_name_the_workload(tmp_path):
  with pytest.raises(ValueError, match="workload 'nope:x': unknown kind"):
    workloads.load("nope:x")
  with pytest.raises(ValueError, match="labels:imdb: unknown dataset"):
    workloads.load("labels:imdb")
  with pytest.raises(workloads.WorkloadUnavailable, match="trec/fine_labels_in_test.json is absent"):
    workloads.load("labels:trec", data=tmp_path)


def test_fuzzy_match_of_free_answers():
  labels = ("card_arrival", "LOC:city", "exchange_rate")
  assert match("card_arrival", labels) == "card_arrival"
  assert match(" 'LOC:city'.\nBecause...", labels) == "LOC:city"
  assert match("card arival", labels) == "card_arrival"
  assert match("I do not know", labels) is None


def test_batches_of_a_draw_continue_its_permutation_without_repeats():
  items = [workloads.Item(f"i{n}", "w", "p", None, None, 8, "") for n in range(10)]
  assert workloads.draw_batch(items, 4, 0, 3) == workloads.draw(items, 4, 3)
  batches = [workloads.draw_batch(items, 4, b, 3) for b in range(4)]
  assert [len(b) for b in batches] == [4, 4, 2, 0]
  ids = [it.id for b in batches for it in b]
  assert sorted(ids) == sorted(it.id for it in items)  # each item once
  assert workloads.draw_batch(items, 10, 0, 3) == items and not workloads.draw_batch(items, 10, 1, 3)
