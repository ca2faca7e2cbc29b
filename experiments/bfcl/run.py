"""BFCL validation of strict tool calls under Qwen XML framing, for each drafter.

For every case of BFCL v4 simple_python / multiple / parallel (types mapped: dict -> object,
float -> number, tuple -> array), the case's functions become strict tools (non-strict when a
parameter is the untyped ``any``), the output starts in the thinking phase and the choice is
``required``. A grammar-guided walk (the structure is the grammar's whatever the weights)
stands in for the target; each drafter's rounds go through lookahead / preview / commit.
Every completed strict call must validate against its schema (jsonschema).

  .venv/bin/python -m experiments.bfcl.run [--limit N] [--subsets simple_python,multiple]
"""

from __future__ import annotations

import argparse
import collections
import json
import time
from pathlib import Path

import numpy as np

from infernix_jax.constrain import ConstraintError, Vocabulary
from infernix_jax.constrain import framing as fr
from infernix_jax.testing.framed_walk import LegalWalker, speculative_walk

ROOT = Path(__file__).resolve().parents[2]
DATA = ROOT / "../shared/data"
SUBSETS = ("simple_python", "multiple", "parallel")


def ngram(out, session, n=2, k=8):
  if len(out) < n:
    return []
  key = out[-n:]
  for j in range(len(out) - n - 1, -1, -1):
    if out[j:j + n] == key:
      return out[j + n:j + n + k]
  return []


def jump_forward(out, session, k=8):
  return session.forced_tokens(k) or ngram(out, session)


def make_random(vocab, seed):
  rng = np.random.default_rng(seed)
  return lambda out, session: rng.integers(0, vocab.size, size=6).tolist()


def main() -> None:
  ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  ap.add_argument("--limit", type=int, default=0, help="cases per subset (0 = all)")
  ap.add_argument("--subsets", default=",".join(SUBSETS))
  ap.add_argument("--k", type=int, default=8)
  ap.add_argument("--out", default=str(ROOT / "experiments/bfcl/results.json"))
  args = ap.parse_args()
  import jsonschema

  vocab = Vocabulary.from_tokenizer_json(DATA / "tokenizers/qwen3", padded_size=151936)
  drafters = {"none": lambda o, s: [], "ngram": ngram, "jump_forward": jump_forward,
              "random": make_random(vocab, 0)}
  totals: dict = collections.defaultdict(lambda: collections.Counter())
  failures = []
  t_start = time.perf_counter()
  for subset in args.subsets.split(","):
    rows = [json.loads(line) for line in
            (DATA / f"bfcl/BFCL_v4_{subset}.json").read_text().splitlines() if line.strip()]
    if args.limit:
      rows = rows[:args.limit]
    answers = {}
    for line in (DATA / f"bfcl/possible_answer/BFCL_v4_{subset}.json").read_text().splitlines():
      if line.strip():
        a = json.loads(line)
        answers[a["id"]] = a["ground_truth"]
    for idx, row in enumerate(rows):
      tools = fr.tools_from_bfcl(row["function"])
      c = totals[subset]
      c["cases"] += 1
      c["nonstrict_tools"] += sum(not t.strict for t in tools)
      c["tools"] += len(tools)
      t0 = time.perf_counter()
      try:
        prepared = fr.prepare_output(vocab, fr.OutputPhase.THINKING, tools=tools,
                                     choice=fr.ToolChoice.required())
      except ConstraintError as e:
        c["prepare_errors"] += 1
        failures.append({"id": row["id"], "stage": "prepare", "error": str(e)})
        continue
      c["compile_s"] += time.perf_counter() - t0
      by_name = {t.name: t for t in tools}
      gold = answers.get(row["id"], [])
      for dname, drafter in drafters.items():
        d = totals[f"{subset}/{dname}"]
        s = prepared.new_session()
        walker = LegalWalker(vocab, seed=idx, patience=40)
        t1 = time.perf_counter()
        try:
          out, drafted, accepted = speculative_walk(s, walker, drafter, args.k, max_tokens=800,
                                                    min_calls=len(gold))
        except Exception as e:  # an internal inconsistency: recorded, never hidden
          d["errors"] += 1
          failures.append({"id": row["id"], "drafter": dname, "error": repr(e)})
          continue
        d["walk_s"] += time.perf_counter() - t1
        d["tokens"] += len(out)
        d["drafted"] += drafted
        d["accepted"] += accepted
        d["terminated"] += int(s.terminated)
        d["gold_calls"] += len(gold)
        for call in s.result().tool_calls:
          tool = by_name[call.name]
          d["calls"] += 1
          d["strict_calls"] += int(tool.strict)
          try:
            jsonschema.validate(json.loads(call.arguments_json), tool.parameters)
            d["valid"] += 1
            d["strict_valid"] += int(tool.strict)
          except (jsonschema.ValidationError, json.JSONDecodeError) as e:
            failures.append({"id": row["id"], "drafter": dname, "call": call.name,
                             "error": str(e)[:300]})
      print(f"{subset} {idx + 1}/{len(rows)} {time.perf_counter() - t_start:.0f}s", flush=True)
  result = {"k": args.k, "seconds": time.perf_counter() - t_start,
            "totals": {k: dict(v) for k, v in totals.items()}, "failures": failures}
  Path(args.out).write_text(json.dumps(result, indent=1))
  for key, v in sorted(result["totals"].items()):
    if "/" in key:
      rate = v.get("strict_valid", 0) / max(v.get("strict_calls", 0), 1)
      print(f"{key:28s} terminated {v.get('terminated', 0)} calls {v.get('calls', 0)} strict "
            f"{v.get('strict_calls', 0)} valid {v.get('strict_valid', 0)} ({rate:.1%}) "
            f"accepted {v.get('accepted', 0)}/{v.get('drafted', 0)} errors {v.get('errors', 0)}")
    else:
      print(f"{key:28s} cases {v['cases']} tools {v['tools']} non-strict "
            f"{v['nonstrict_tools']} prepare errors {v.get('prepare_errors', 0)} "
            f"compile {v.get('compile_s', 0):.1f}s")
  print(f"failures: {len(failures)}")


if __name__ == "__main__":
  main()
