"""The faithful classification study's summary counts item-level disagreement and costs
from its records (synthetic records, hand-computed figures)."""

from __future__ import annotations

from experiments.studies import faithful_classification as study
from tests.experiments import _configs


def _law(predicted, gold, seconds, forwards=0, stop=""):
  return {"text": predicted, "error": None, "valid": True, "predicted": predicted,
          "correct": predicted == gold, "seconds": seconds, "tokens": 3, "law_seconds": 0.0,
          "law_forwards": forwards, "law_tokens": 10 * forwards, "law_trie_nodes": 50,
          "law_stop": stop}


def test_summary_counts_disagreements_and_cost(tmp_path):
  c = _configs.load("faithful_classification")
  golds = ["A", "B", "C", "D"]
  local = ["A", "B", "X", "X"]  # 2 right
  exact = ["A", "X", "C", "Y"]  # 2 right: one gained (C), one lost (B)
  records = [{"kind": "request", "item": f"i{i}", "dataset": "trec", "gold": g,
              "local": _law(l, g, 1.0), "exact-finite": _law(e, g, 4.0, forwards=5,
                                                             stop="greedy" if i else "complete")}
             for i, (g, l, e) in enumerate(zip(golds, local, exact))]
  text = study.summarize(records, c, tmp_path)
  row = next(line for line in text.splitlines() if line.startswith("| trec"))
  cells = [x.strip() for x in row.strip("|").split("|")]
  points = [x.split(" [")[0] for x in cells]  # the figures without their 95% intervals
  assert points[:10] == ["trec", "4", "50.0", "50.0", "0.0", "3 (75%)", "1 / 1", "1.00", "4.00",
                         "4.0"]
  assert cells[10:] == ["5", "50", "50", "3 / 4"]
  assert cells[9] == "4.0 [4.0, 4.0]"  # exact-finite costs 4x local on every item (paired)
  assert (tmp_path / "faithful_classification_accuracy.png").stat().st_size > 0
