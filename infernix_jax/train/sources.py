"""Written (prompt, answer) pairs shaped like the constrained workloads, from ../shared/data.

The teacher-scored corpus (`teacher_corpus`) runs the frozen target over these texts once:
its distribution at every position is the training signal whoever wrote the answer, so no
token has to be generated. Sources:

  json    JSONSchemaBench MaskBench valid instances, as the answer to "Answer as JSON
          following this schema: ..." (the prompt of `prompts.prompt_mix`'s json family);
  tool    BFCL gold calls (simple_python, multiple, parallel, parallel_multiple), as the
          answer {"name": ..., "arguments": {...}} to the tool prompt of the tool family
          (one call per item: the first gold call, with the first admissible value of each
          argument);
  label   Banking77 and CLINC150 utterances with their intent, and TREC questions with
          their class, as classification chat turns answered by the label alone.

Every item is named like the prompt mix's items (family/source/identity), and the split is
`prompts.split_of` of that name: a schema, question or utterance in the validation split is
never a training item, in any source.
"""

from __future__ import annotations

import csv
import dataclasses
import json
from pathlib import Path
from typing import Iterator

from infernix_jax.train.prompts import DATA, split_of

SOURCES = ("maskbench", "bfcl", "banking77", "clinc150", "trec")
BFCL_FILES = ("simple_python", "multiple", "parallel", "parallel_multiple")
MASKBENCH_SUBSETS = ("Github_trivial", "Github_easy", "Github_medium", "Glaiveai2K")


@dataclasses.dataclass(frozen=True)
class Item:
  """One written chat turn.

  Attributes:
    name: identity, the key of the train/validation split (as `prompts.Prompt.name`).
    family: json | tool | label; source: one of SOURCES.
    prompt: the user message; answer: the assistant's text (EOS is appended when scored).
  """

  name: str
  family: str
  source: str
  prompt: str
  answer: str


def json_prompt(schema_text: str) -> str:
  """The json family's user message (`prompts.prompt_mix` asks the same)."""
  return f"Answer as JSON following this schema: {schema_text}"


def _maskbench(data: Path, max_schema_chars: int) -> Iterator[Item]:
  folder = data / "jsonschemabench/maskbench/data"
  for path in sorted(folder.glob("*.json")):
    subset, _, stem = path.stem.partition("---")
    raw = data / "jsonschemabench/data" / subset / f"{stem}.json"
    try:
      doc = json.loads(path.read_text(encoding="utf-8"))
      schema = json.dumps(json.loads(raw.read_text(encoding="utf-8")) if raw.is_file()
                          else doc["schema"])
    except (ValueError, UnicodeDecodeError, KeyError):
      continue
    if len(schema) > max_schema_chars:
      continue
    for n, test in enumerate(t for t in doc.get("tests", []) if t.get("valid")):
      yield Item(f"json/{subset}/{stem}", "json", "maskbench", json_prompt(schema),
                 json.dumps(test["data"], ensure_ascii=False))
      del n


def _first_admissible(values):
  """A BFCL gold argument lists its admissible values ("" marks an optional argument)."""
  for v in values:
    if v != "":
      return True, v
  return False, None


def _bfcl(data: Path) -> Iterator[Item]:
  from infernix_jax.constrain.framing.tools import tools_from_bfcl
  for file in BFCL_FILES:
    answers = {}
    with open(data / f"bfcl/possible_answer/BFCL_v4_{file}.json", encoding="utf-8") as f:
      for line in f:
        row = json.loads(line)
        answers[row["id"]] = row["ground_truth"]
    with open(data / f"bfcl/BFCL_v4_{file}.json", encoding="utf-8") as f:
      for line in f:
        case = json.loads(line)
        gold = answers.get(case["id"])
        if not gold:
          continue
        (fn, args), = gold[0].items()
        tools = {t.name: t for t in tools_from_bfcl(case["function"])}
        tool = tools.get(fn)
        if tool is None:
          continue
        arguments = {}
        for key, values in args.items():
          present, value = _first_admissible(values)
          if present:
            arguments[key] = value
        spec = {"name": tool.name, "description": tool.description,
                "parameters": dict(tool.parameters)}
        question = case["question"][0][-1]["content"]
        yield Item(f"tool/{file}/{case['id']}", "tool", "bfcl",
                   f"You can call this function: {json.dumps(spec)}\nAnswer the question "
                   f'with one call as JSON {{"name": ..., "arguments": {{...}}}}.\n'
                   f"Question: {question}",
                   json.dumps({"name": tool.name, "arguments": arguments}, ensure_ascii=False))


def _classify(kind: str, labels, text: str) -> str:
  return (f"Classify this {kind} into one of these intents: {', '.join(labels)}.\n"
          f"Answer with the intent only.\nRequest: {text}")


def _banking77(data: Path) -> Iterator[Item]:
  labels = json.loads((data / "labels/banking77/categories.json").read_text())
  with open(data / "labels/banking77/test.csv", encoding="utf-8") as f:
    for row in csv.DictReader(f):
      yield Item(f"label/banking77/{row['text']}", "label", "banking77",
                 _classify("banking request", labels, row["text"]), row["category"])


def _clinc150(data: Path) -> Iterator[Item]:
  blob = json.loads((data / "labels/clinc150/data_full.json").read_text())
  labels = json.loads((data / "labels/clinc150/intents.json").read_text())
  labels = [x for x in labels if isinstance(x, str)]
  for part in ("train", "val", "test"):
    for text, intent in blob.get(part, []):
      yield Item(f"label/clinc150/{text}", "label", "clinc150",
                 _classify("request", labels, text), intent)


def _trec(data: Path) -> Iterator[Item]:
  seen = set()
  for line in (data / "labels/trec/TREC_10.label").read_text(encoding="latin-1").splitlines():
    label, _, question = line.partition(" ")
    question = question.strip()
    if question and question not in seen:
      seen.add(question)
      coarse, _, fine = label.partition(":")
      yield Item(f"chat/trec/{question}", "label", "trec",
                 "What kind of answer does this question ask for? Answer as COARSE:fine "
                 f"(for example NUM:dist or HUM:ind).\nQuestion: {question}", f"{coarse}:{fine}")


def items(counts: dict[str, int], split: str = "train", *, data: Path = DATA,
          max_schema_chars: int = 1600) -> list[Item]:
  """The first `counts[source]` items of each source that fall in `split`, stable order.

  Args:
    counts: items per source (SOURCES; a source not named gives none; -1: all of it).
    split: "train" or "validation".
    data: the shared data folder.
    max_schema_chars: longer JSON schemas are skipped.

  Raises:
    FileNotFoundError: the shared data folder is absent.
    ValueError: an unknown source or split.
  """
  if split not in ("train", "validation"):
    raise ValueError(f"split={split!r} must be 'train' or 'validation'")
  unknown = sorted(set(counts) - set(SOURCES))
  if unknown:
    raise ValueError(f"unknown corpus sources {unknown}; known: {', '.join(SOURCES)}")
  if not data.is_dir():
    raise FileNotFoundError(f"the shared data folder {data} is absent")
  readers = {"maskbench": lambda: _maskbench(data, max_schema_chars),
             "bfcl": lambda: _bfcl(data), "banking77": lambda: _banking77(data),
             "clinc150": lambda: _clinc150(data), "trec": lambda: _trec(data)}
  out = []
  for source in SOURCES:
    want = counts.get(source, 0)
    taken = 0
    for item in readers[source]():
      if taken == want:
        break
      if split_of(item.name.split("#")[0]) == split:
        out.append(item)
        taken += 1
  return out
