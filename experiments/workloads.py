"""Constrained workloads of the studies: loaders over `../shared/data` and synthetic sets.

Every loader returns `Item`s in a stable order; a subset is the first `limit` items after a
permutation seeded by `seed` (documented per study). Loaders raise `WorkloadUnavailable` with a
message when the shared data folder or a file is absent, so a study can skip cleanly.

  jsonschema:<subset>   JSONSchemaBench (../shared/data/jsonschemabench/data/<subset>): "Answer
                        as JSON following this schema" prompts, constrained by the schema;
                        valid = jsonschema accepts the completed output.
  gbnf:<name>           GBNF grammars (../shared/data/gbnf/<name>.gbnf) with a task prompt each.
  labels:<dataset>      classification (../shared/data/labels): trec (42 fine labels in its
                        500-question test set), banking77 (77 intents, 3,080 tests), clinc150
                        (150 intents, 4,500 in-scope tests), with the trie paper's prompts
                        (arXiv:2608.12574, Appendix C.1); a choice constraint over the labels.
  tools:<K>             synthetic tool names (the trie paper's pools, Appendix C.2): a request
                        in words, answered by one of K tool names (choice constraint).
  regex:<format>        dates (ISO 8601), uuids, phones (E.164): a request for one value under
                        the format's regex; valid = Python's re.fullmatch.
  bfcl:<subset>         BFCL v4 (../shared/data/bfcl): the question with its function; the
                        answer is one call as JSON {"name": ..., "arguments": {...}} constrained
                        by the function's parameters (the embedded model has no tool-call
                        tokens); valid = jsonschema accepts the arguments.
"""

from __future__ import annotations

import csv
import dataclasses
import json
import random
import re
from pathlib import Path
from typing import Any

DATA = Path(__file__).resolve().parents[1].parent / "shared" / "data"

# The trie paper's single-pass prompt (PE and Trie-strict share it) and its shorter Trie prompt.
PROMPTS = {
    "pe": ("Select exactly one of the following options.\nOutput ONLY the option itself, "
           "nothing else.\n\nOptions: {options}\n\nText: {text}\nAnswer:"),
    "short": "Select one of: {options}\n\nText: {text}\nAnswer:",
}

# llama.cpp's json.gbnf and json_arr.gbnf spell an empty alternative (`ws ::= | " " ...`),
# which xgrammar's GBNF parser rejects; the grammars below compile as shipped.
GBNF_TASKS = {
    "arithmetic": "Write an arithmetic expression whose value is {n}.",
    "list": "List the steps to {task}.",
}
_FILL = {"n": ["12", "42", "100", "7", "365"],
         "task": ["make tea", "plant a tree", "tie a knot", "bake bread", "wash a car"]}

REGEX_FORMATS = {
    "dates": (r"\d{4}-(0[1-9]|1[0-2])-(0[1-9]|[12]\d|3[01])",
              "Give the date of {event} in ISO 8601 format (YYYY-MM-DD).",
              ["the first Moon landing", "the fall of the Berlin Wall", "New Year's Day 2000",
               "the signing of the Magna Carta", "the first flight of the Wright brothers",
               "the end of World War II in Europe", "the launch of Sputnik", "Pi Day 2015"]),
    "uuids": (r"[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}",
              "Generate a random version-4 UUID for {event}.",
              ["a new user account", "an order", "a database row", "a session", "a file upload",
               "a payment", "a support ticket", "a log entry"]),
    "phones": (r"\+[1-9]\d{7,14}",
               "Write a phone number in E.164 format for {event}.",
               ["a bakery in Paris", "a hotel in Tokyo", "a dentist in New York",
                "a taxi company in London", "a museum in Berlin", "a school in Sydney",
                "a library in Toronto", "a pharmacy in Madrid"]),
}


class WorkloadUnavailable(Exception):
  """The data a workload reads is absent (the message says which file)."""


@dataclasses.dataclass(frozen=True)
class Item:
  """One request of a workload.

  Attributes:
    id: stable identity "<workload>/<key>" (the split and the records use it).
    workload: the workload spec that made it.
    prompt: the user message (rendered with the model's chat template).
    constraint: ("json_schema", text) | ("choice", labels) | ("regex", pattern) |
      ("grammar", gbnf) | None.
    reference: the gold answer (label, tool name, BFCL call) or None.
    max_tokens: generation budget.
    check: how completed outputs are validated: "json_schema" | "choice" | "regex" |
      "bfcl" | "" (no oracle).
  """

  id: str
  workload: str
  prompt: str
  constraint: tuple | None
  reference: Any
  max_tokens: int
  check: str = ""

  def output_constraint(self):
    """The `OutputConstraint` of this item (None when unconstrained)."""
    from infernix_jax.constrain import OutputConstraint

    if self.constraint is None:
      return None
    kind, source = self.constraint
    return {"json_schema": OutputConstraint.json_schema, "choice": OutputConstraint.choice,
            "regex": OutputConstraint.regex, "grammar": OutputConstraint.grammar}[kind](source)

  def validate(self, text: str) -> bool | None:
    """Whether a completed output is in the item's language (None: no oracle)."""
    if self.check in ("json_schema", "bfcl"):
      import jsonschema

      try:
        value = json.loads(text)
      except json.JSONDecodeError:
        return False
      schema = json.loads(self.constraint[1])
      try:
        jsonschema.validate(value, schema)
      except (jsonschema.ValidationError, jsonschema.SchemaError):
        return False
      return True
    if self.check == "choice":
      return text in self.constraint[1]
    if self.check == "regex":
      return re.fullmatch(self.constraint[1], text) is not None
    return None


def _need(path: Path) -> Path:
  if not path.exists():
    raise WorkloadUnavailable(f"{path} is absent (the shared data folder ../shared/data)")
  return path


def draw(items: list[Item], limit: int, seed: int) -> list[Item]:
  """The first `limit` items after a permutation seeded by `seed` (all when limit is 0)."""
  return draw_batch(items, limit, 0, seed)


def draw_batch(items: list[Item], size: int, batch: int, seed: int) -> list[Item]:
  """Batch `batch` of `size` items of one seeded permutation: batch 0 is `draw(items, size,
  seed)` (all items, in order, when `size` is 0 or covers them), batch b the next `size` items
  of the same permutation, so batches never repeat an item; empty once they are used up."""
  if not size or size >= len(items):
    return list(items) if batch == 0 else []
  order = list(items)
  random.Random(seed).shuffle(order)
  return order[size * batch:size * (batch + 1)]


def labels(dataset: str, data: Path | None = None) -> tuple[list[str], list[tuple[str, str]]]:
  """(label set, [(text, gold label)]) of a classification test set, in file order."""
  root = Path(data or DATA) / "labels"
  if dataset == "trec":
    labels_ = json.loads(_need(root / "trec/fine_labels_in_test.json").read_text())
    rows = []
    for line in _need(root / "trec/TREC_10.label").read_text(encoding="latin-1").splitlines():
      label, _, text = line.partition(" ")
      if text.strip():
        rows.append((text.strip(), label))
    return labels_, rows
  if dataset == "banking77":
    labels_ = json.loads(_need(root / "banking77/categories.json").read_text())
    with open(_need(root / "banking77/test.csv"), encoding="utf-8") as f:
      return labels_, [(r["text"], r["category"]) for r in csv.DictReader(f)]
  if dataset == "clinc150":
    labels_ = json.loads(_need(root / "clinc150/intents.json").read_text())
    full = json.loads(_need(root / "clinc150/data_full.json").read_text())
    return labels_, [(t, g) for t, g in full["test"]]
  raise ValueError(f"labels:{dataset}: unknown dataset; known: trec, banking77, clinc150")


def _labels(dataset, limit, seed, data, template="pe", constrained=True):
  if template not in PROMPTS:
    raise ValueError(f"labels template {template!r}: known {', '.join(PROMPTS)}")
  names, rows = labels(dataset, data)
  options = ", ".join(names)
  items = [Item(f"labels:{dataset}/{i}", f"labels:{dataset}",
                PROMPTS[template].format(options=options, text=text),
                ("choice", tuple(names)) if constrained else None, gold, 24, "choice")
           for i, (text, gold) in enumerate(rows)]
  return draw(items, limit, seed)


def _jsonschema(subset, limit, seed, data, max_schema_chars=800):
  """Schemas of a JSONSchemaBench subset up to `max_schema_chars` that the strict schema
  checker accepts (a decoding workload measures decoding; coverage is schema_coverage's)."""
  from infernix_jax.constrain.errors import ConstraintError
  from infernix_jax.constrain.schema.check import check_json_schema

  root = _need(data / "jsonschemabench/data" / subset)
  items = []
  for path in sorted(root.glob("*.json")):
    try:
      schema = json.dumps(json.loads(path.read_text(encoding="utf-8")))
    except (ValueError, UnicodeDecodeError):
      continue
    if len(schema) > max_schema_chars:
      continue
    try:
      check_json_schema(schema)
    except ConstraintError:
      continue
    items.append(Item(f"json/{subset}/{path.stem}", f"jsonschema:{subset}",
                      f"Answer as JSON following this schema: {schema}",
                      ("json_schema", schema), None, 96, "json_schema"))
  return draw(items, limit, seed)


def _gbnf(name, limit, seed, data):
  if name not in GBNF_TASKS:
    raise ValueError(f"gbnf:{name}: no task prompt for it; known: {', '.join(GBNF_TASKS)}")
  text = _need(data / "gbnf" / f"{name}.gbnf").read_text()
  key = re.search(r"\{(\w+)\}", GBNF_TASKS[name]).group(1)
  items = [Item(f"gbnf/{name}/{i}", f"gbnf:{name}", GBNF_TASKS[name].format(**{key: v}),
                ("grammar", text), None, 64) for i, v in enumerate(_FILL[key])]
  return draw(items, limit, seed)


def _tools(k, limit, seed):
  from experiments.studies.trie.enum_sets import tool_names

  names = tool_names(int(k), seed=0)
  rng = random.Random(seed)
  items = []
  for i in range(max(limit, 1) if limit else 50):
    gold = rng.choice(names)
    ns, _, call = gold.rpartition(".")
    action, _, resource = call.partition("_")
    where = f" in {ns}" if ns else ""
    items.append(Item(f"tools:{k}/{i}", f"tools:{k}",
                      f"Which tool should run this request: {action} the "
                      f"{resource.replace('_', ' ')}{where}? Answer with the tool name only.",
                      ("choice", tuple(names)), gold, 24, "choice"))
  return items


def _regex(fmt, limit, seed):
  if fmt not in REGEX_FORMATS:
    raise ValueError(f"regex:{fmt}: known formats: {', '.join(REGEX_FORMATS)}")
  pattern, template, events = REGEX_FORMATS[fmt]
  items = [Item(f"regex/{fmt}/{i}", f"regex:{fmt}", template.format(event=e),
                ("regex", pattern), None, 48, "regex") for i, e in enumerate(events)]
  return draw(items, limit, seed)


def _bfcl(subset, limit, seed, data):
  from infernix_jax.constrain.framing.tools import tools_from_bfcl

  answers = {}
  for line in _need(data / f"bfcl/possible_answer/BFCL_v4_{subset}.json").read_text().splitlines():
    if line.strip():
      a = json.loads(line)
      answers[a["id"]] = a["ground_truth"]
  items = []
  for line in _need(data / f"bfcl/BFCL_v4_{subset}.json").read_text().splitlines():
    if not line.strip():
      continue
    case = json.loads(line)
    tools = tools_from_bfcl(case["function"])
    question = case["question"][0][-1]["content"]
    specs = [{"name": t.name, "description": t.description, "parameters": dict(t.parameters)}
             for t in tools]
    calls = [{"type": "object",
              "properties": {"name": {"const": t.name}, "arguments": dict(t.parameters)},
              "required": ["name", "arguments"], "additionalProperties": False} for t in tools]
    schema = calls[0] if len(calls) == 1 else {"anyOf": calls}
    items.append(Item(f"tool/{subset}/{case['id']}", f"bfcl:{subset}",
                      f"You can call these functions: {json.dumps(specs)}\nAnswer the question "
                      f'with one call as JSON {{"name": ..., "arguments": {{...}}}}.\n'
                      f"Question: {question}", ("json_schema", json.dumps(schema)),
                      answers.get(case["id"]), 96, "bfcl"))
  return draw(items, limit, seed)


def load(spec: str, limit: int = 0, *, seed: int = 0, data: Path | None = None,
         **options) -> list[Item]:
  """The items of workload `spec` ("kind:arg"), `limit` of them (0 = all) by a `seed`ed draw.

  Raises:
    WorkloadUnavailable: its data is absent.
    ValueError: an unknown workload kind or argument.
  """
  kind, _, arg = spec.partition(":")
  data = Path(data or DATA)
  if kind == "labels":
    return _labels(arg, limit, seed, data, **options)
  if kind == "jsonschema":
    return _jsonschema(arg, limit, seed, data)
  if kind == "gbnf":
    return _gbnf(arg, limit, seed, data)
  if kind == "tools":
    return _tools(arg, limit, seed)
  if kind == "regex":
    return _regex(arg, limit, seed)
  if kind == "bfcl":
    return _bfcl(arg, limit, seed, data)
  raise ValueError(f"workload {spec!r}: unknown kind; known: labels, jsonschema, gbnf, tools, "
                   f"regex, bfcl")
