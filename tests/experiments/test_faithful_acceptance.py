"""The faithful_acceptance study's summary: accepted length, acceptance rate, the paired
exact/local ratio, tokens/s and the one-off Φ costs, from synthetic records."""

from __future__ import annotations

import pytest

from experiments.studies import faithful_acceptance as study
from tests.experiments import _configs


def _request(cell, law, prompt, seed, rounds, drafted, accepted, text="x", tokens=None):
  return {"cell": cell, "kind": "request", "law": law, "prompt": prompt, "seed": seed,
          "text": text, "finish": "stop", "rounds": rounds, "drafted": drafted,
          "accepted": accepted, "tokens": rounds + accepted if tokens is None else tokens,
          "overrides": {"constraint": "dyck", "drafter": "ngram", "temperature": 1.0}}


def _records():
  cell = "constraint=dyck,drafter=ngram,temperature=1.0"
  over = {"constraint": "dyck", "drafter": "ngram", "temperature": 1.0}
  return [
      # local: 2 requests, 10 rounds, 12 accepted of 20 drafted -> (12 + 10) / 10 = 2.2
      _request(cell, "local", 0, 0, 4, 8, 6, text="(())"),
      _request(cell, "local", 0, 1, 6, 12, 6, text="()"),
      # exact-finite: 10 rounds, 5 accepted of 16 drafted -> 1.5; one output the same
      _request(cell, "exact-finite", 0, 0, 5, 8, 3, text="(())"),
      _request(cell, "exact-finite", 0, 1, 5, 8, 2, text="(()())"),
      {"cell": cell, "kind": "measurement", "overrides": over,
       "timed": {"local": {"wall_seconds": 2.0, "cpu_seconds": 3.0, "tokens": 22},
                 "exact-finite": {"wall_seconds": 4.0, "cpu_seconds": 5.0, "tokens": 15}},
       "phi": [{"prompt": 0, "seconds": 20.0, "forwards": 11, "tokens": 1400, "nodes": 1400,
                "tv_bound": 0.0, "stop": "complete"}]},
      {"cell": cell, "kind": "cell", "status": "ok", "overrides": over, "seconds": 30.0},
  ]


def test_accepted_length_counts_the_target_token_of_every_round():
  reqs = [{"rounds": 4, "accepted": 6, "drafted": 8}, {"rounds": 6, "accepted": 6,
                                                         "drafted": 12}]
  assert study.accepted_length(reqs) == pytest.approx(2.2)
  assert study.acceptance_rate(reqs) == pytest.approx(0.6)
  assert study.accepted_length([]) == 0.0 and study.acceptance_rate([]) == 0.0
  # ordinary decoding: one token per round
  assert study.accepted_length([{"rounds": 7, "accepted": 0, "drafted": 0}]) == 1.0


def test_cells_pair_the_laws_and_give_the_ratio():
  c = _configs.load("faithful_acceptance")
  (row,) = study.cells(_records(), c)
  assert (row["constraint"], row["drafter"], row["temperature"]) == ("dyck", "ngram", 1.0)
  loc, fin = row["laws"]["local"], row["laws"]["exact-finite"]
  assert loc["accepted_length"] == pytest.approx(2.2)
  assert fin["accepted_length"] == pytest.approx(1.5)
  assert row["ratio"] == pytest.approx(1.5 / 2.2)
  assert fin["acceptance_rate"] == pytest.approx(5 / 16)
  assert loc["tokens_per_second"] == pytest.approx(11.0)
  assert fin["tokens_per_second"] == pytest.approx(3.75)
  assert row["same_output"] == pytest.approx(0.5)
  assert study.phi_costs([row]) == {("dyck", 1.0): row["phi"]}


def test_summary_table_and_answer_carry_the_numbers(tmp_path):
  c = _configs.load("faithful_acceptance")
  text = study.summarize(_records(), c, tmp_path)
  line = next(l for l in text.splitlines() if l.startswith("| dyck | ngram |"))
  cols = [x.strip() for x in line.strip("|").split("|")]
  assert cols[4:7] == ["2.20", "1.50", "0.68"]  # accepted length local, exact-finite, ratio
  assert cols[9:12] == ["11.0", "3.8", "0.34"]  # tokens/s local, exact-finite, ratio
  assert cols[-1] == "20.0"  # the one-off Φ seconds
  assert "accepted length is 0.68x local's" in text and "20.0 s" in text
  assert (tmp_path / "faithful_acceptance.png").stat().st_size > 0


def test_requests_are_paired_prompts_and_seeds():
  c = _configs.load("faithful_acceptance")
  c.temperature = 0.0
  assert study.requests(c) == [(i, 0) for i in range(c.greedy_prompts)]
  c.temperature = 1.0
  reqs = study.requests(c)
  assert len(reqs) == c.sampled_prompts * c.seeds == len(set(reqs))
  for name in ("tools", "dyck", "json"):
    con = study.CONSTRAINTS[name]()
    assert len(con.prompts) >= max(c.greedy_prompts, c.sampled_prompts)
