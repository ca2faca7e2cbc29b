"""The distillation prompt mix: what constrained-decoding studies ask the embedded model.

Four families, each from real data in `../shared/data` (free chat needs none):

  json   "Answer as JSON following this schema: ..." over JSONSchemaBench Github_easy,
         constrained by the schema, and the same prompt unconstrained;
  tool   a BFCL simple_python question with its function, answered as a JSON call
         {"name": ..., "arguments": {...}} constrained by the function's parameters;
  label  a Banking77 utterance classified into its 77 intents (a choice constraint);
  chat   a TREC question answered freely (no constraint).

Train and validation prompts are disjoint by schema file, by question and by utterance: an
item belongs to validation when a stable hash of its identity falls in the validation share.
"""

from __future__ import annotations

import csv
import dataclasses
import hashlib
import json
from pathlib import Path
from typing import Iterator

DATA = Path(__file__).resolve().parents[2].parent / "shared" / "data"
FAMILIES = ("json", "tool", "label", "chat")
VALIDATION_SHARE = 0.15


@dataclasses.dataclass(frozen=True)
class Prompt:
  """One item of the mix.

  Attributes:
    name: stable identity (family/source/item), the key of the split.
    family: json | tool | label | chat.
    text: the user message.
    constraint: ("json_schema", schema text) | ("choice", labels) | None.
    max_tokens: the generation budget.
  """

  name: str
  family: str
  text: str
  constraint: tuple | None
  max_tokens: int


def split_of(name: str, share: float = VALIDATION_SHARE) -> str:
  """"validation" or "train", from a stable hash of the item's identity."""
  h = int.from_bytes(hashlib.sha256(name.encode()).digest()[:4], "big") / 2**32
  return "validation" if h < share else "train"


def _json_prompts(data: Path, max_schema_chars: int) -> Iterator[Prompt]:
  for path in sorted((data / "jsonschemabench/data/Github_easy").glob("*.json")):
    try:
      schema = json.dumps(json.loads(path.read_text(encoding="utf-8")))
    except (ValueError, UnicodeDecodeError):
      continue
    if len(schema) > max_schema_chars:
      continue
    yield Prompt(f"json/Github_easy/{path.stem}", "json",
                 f"Answer as JSON following this schema: {schema}",
                 ("json_schema", schema), 96)


def _tool_prompts(data: Path) -> Iterator[Prompt]:
  from infernix_jax.constrain.framing.tools import tools_from_bfcl
  with open(data / "bfcl/BFCL_v4_simple_python.json", encoding="utf-8") as f:
    for line in f:
      case = json.loads(line)
      (tool,) = tools_from_bfcl(case["function"][:1])
      question = case["question"][0][-1]["content"]
      spec = {"name": tool.name, "description": tool.description,
              "parameters": dict(tool.parameters)}
      schema = {"type": "object", "properties": {"name": {"const": tool.name},
                                                 "arguments": dict(tool.parameters)},
                "required": ["name", "arguments"], "additionalProperties": False}
      yield Prompt(f"tool/simple_python/{case['id']}", "tool",
                   f"You can call this function: {json.dumps(spec)}\nAnswer the question "
                   f'with one call as JSON {{"name": ..., "arguments": {{...}}}}.\n'
                   f"Question: {question}", ("json_schema", json.dumps(schema)), 64)


def _label_prompts(data: Path) -> Iterator[Prompt]:
  labels = json.loads((data / "labels/banking77/categories.json").read_text())
  with open(data / "labels/banking77/test.csv", encoding="utf-8") as f:
    for row in csv.DictReader(f):
      yield Prompt(f"label/banking77/{row['text']}", "label",
                   f"Classify this banking request into one of these intents: "
                   f"{', '.join(labels)}.\nAnswer with the intent only.\n"
                   f"Request: {row['text']}", ("choice", tuple(labels)), 16)


def _chat_prompts(data: Path) -> Iterator[Prompt]:
  seen = set()
  for line in (data / "labels/trec/TREC_10.label").read_text(encoding="latin-1").splitlines():
    question = line.partition(" ")[2].strip()
    if question and question not in seen:
      seen.add(question)
      yield Prompt(f"chat/trec/{question}", "chat", question, None, 64)


def prompt_mix(counts: dict[str, int], split: str, *, unconstrained_share: float = 0.25,
               data: Path = DATA, max_schema_chars: int = 800) -> list[Prompt]:
  """The first `counts[family]` prompts of each family in `split`, in a stable order.

  Args:
    counts: prompts per family (families not named get none).
    split: "train" or "validation".
    unconstrained_share: of the constrained families (json, tool, label), this share of
      items is generated without its constraint (every 1/share-th item).
    data: the shared data folder.
    max_schema_chars: longer JSON schemas are skipped (they would fill the context).

  Raises:
    FileNotFoundError: the shared data folder is absent.
    ValueError: an unknown family or split.
  """
  if split not in ("train", "validation"):
    raise ValueError(f"split={split!r} must be 'train' or 'validation'")
  unknown = sorted(set(counts) - set(FAMILIES))
  if unknown:
    raise ValueError(f"unknown prompt families {unknown}; known: {', '.join(FAMILIES)}")
  if not data.is_dir():
    raise FileNotFoundError(f"the shared data folder {data} is absent")
  sources = {"json": lambda: _json_prompts(data, max_schema_chars),
             "tool": lambda: _tool_prompts(data), "label": lambda: _label_prompts(data),
             "chat": lambda: _chat_prompts(data)}
  every = round(1 / unconstrained_share) if unconstrained_share > 0 else 0
  out = []
  for family in FAMILIES:
    want = counts.get(family, 0)
    taken = 0
    for item in sources[family]():
      if taken == want:
        break
      if split_of(item.name) != split:
        continue
      if item.constraint is not None and every and taken % every == every - 1:
        item = dataclasses.replace(item, name=item.name + "#free", constraint=None)
      out.append(item)
      taken += 1
  return out
