"""The flagship drafter table: its cells (a union of sub-grids with no cell that changes
nothing), its shards, and its summary's paired readings on synthetic run records against a
direct numpy computation."""

from __future__ import annotations

import json
import re

import ml_collections
import numpy as np
import pytest

from experiments.runner import stats, sweep
from experiments.studies import decode, drafter_table
from infernix_jax import drafters
from tests.experiments import _configs

FLAGSHIP_CELLS = 74  # 54 main + 7 jump-forward off + 5 masked q + 4 K + 4 tree budget


@pytest.fixture(scope="module")
def flagship():
  c = _configs.load("acceptance", "flagship")
  return c, sweep.cells(c)


def test_flagship_cells_each_change_something(flagship):
  c, cells = flagship
  assert len(cells) == len({x.id for x in cells}) == FLAGSHIP_CELLS
  rows = [drafter_table.row_of(x.overrides, c) for x in cells]
  for x, row in zip(cells, rows):
    where = x.id
    assert not (row.jump and not row.constrained), f"jump-forward without a constraint: {where}"
    if not row.masked_q:  # masked q off only where a sampled q meets a mask
      assert row.constrained and row.temperature > 0 and decode.samples(x.config), where
    assert decode.skip(x.config) is None, where
    if row.tree:
      assert "tree" in drafters.fields(row.name) and not row.sampled, where
    assert row.name != "none" or (row.jump and row.constrained), where  # plain decoding: 1
    spec = decode.engine_spec(x.config)  # every cell's drafter options validate
    drafters.options(spec.drafter, spec.drafter_options)
  # The rows: every registered drafter that drafts (jump-forward alone is none + jump; a
  # separate draft model has none shipped), chains, trees where the options have `tree`.
  table = {n for n in drafters.names() if drafters.entry(n).drafts} - {"jump", "draft"}
  assert {"dspark", "eagle3", "dflash2"} <= table
  assert {r.name for r in rows} == table | {"none"}
  k = decode.config_k(c.drafter)
  for name in table:
    for tree in (False, True):
      for constrained in (True, False):
        for t in (0.0, 0.7):
          want = not tree or "tree" in drafters.fields(name)
          assert (drafter_table.main_row(name, tree, constrained, t, k) in rows) == want
  # Ablations: jump-forward off for each chain (constrained, T = 0), masked q off for the
  # sampled drafters only, K 2 / 8 and the budget of 7 for the two named drafters.
  assert {r.name for r in rows if r.constrained and not r.jump} == table
  assert {(r.name, r.sampled) for r in rows if not r.masked_q} == {
      ("dflash2", False), ("eagle3", True), ("dspark", True)}
  from configs.acceptance import FLAGSHIP_BEST
  assert {(r.name, r.k) for r in rows if r.k != k} == {
      (n, x) for n in FLAGSHIP_BEST for x in (2, 8, 7)}
  assert len({x.config.workloads for x in cells}) == 1 and len(c.workloads) == 5


def test_flagship_shards_balance_and_stay_put(flagship):
  c, cells = flagship
  from configs.acceptance import FLAGSHIP_SHARDS

  shards = [sweep.shard(cells, i, FLAGSHIP_SHARDS) for i in range(FLAGSHIP_SHARDS)]
  sizes = [len(s) for s in shards]
  assert max(sizes) - min(sizes) <= 1 and sum(sizes) == len(cells)
  assert sorted(x.index for s in shards for x in s) == list(range(len(cells)))
  # The same shard from the config a run directory records (JSON), and on every call.
  back = sweep.cells(ml_collections.ConfigDict(json.loads(json.dumps(c.to_dict()))))
  for i, s in enumerate(shards):
    assert [x.id for x in sweep.shard(back, i, FLAGSHIP_SHARDS)] == [x.id for x in s]


def _records(c, cells, scales, prompts=30, seed=0):
  """Request records of the cells `scales` names (Row -> scale): prompt p has a difficulty
  shared by every cell (accepted drafts ~ Binomial(4 rounds, difficulty x scale / 2)), so
  pairing by prompt matters; each cell's closing record follows its requests."""
  by_row = {drafter_table.row_of(x.overrides, c): x for x in cells}
  rng = np.random.default_rng(seed)
  difficulty = rng.uniform(0.1, 0.8, size=prompts)
  out = []
  for row, scale in scales.items():
    cell = by_row[row]
    for p in range(prompts):
      rounds = int(rng.integers(10, 30))
      accepted = int(rng.binomial(4 * rounds, min(1.0, difficulty[p] * scale) / 2))
      out.append({"kind": "request", "cell": cell.id, "overrides": cell.overrides,
                  "item": f"p{p}", "workload": "w", "accepted": accepted, "rounds": rounds,
                  "drafted": 4 * rounds, "prompt_tokens": 100, "tokens": accepted + rounds,
                  "per_round": [[4, 1]] * rounds, "valid": None, "finish_reason": "length",
                  "jump_forward_tokens": 0})
    out.append({"kind": "cell", "cell": cell.id, "status": "ok", "overrides": cell.overrides})
  return out


def _oracle(records, a_cell, b_cell, seed=0, resamples=2000):
  """Accepted length ratio and difference of cell a vs b over their common prompts, with the
  percentile interval of a direct bootstrap over prompts (both cells' prompt drawn at once)."""
  def sums(cell):
    out = {}
    for r in records:
      if r.get("kind") == "request" and r["cell"] == cell:
        n, d = out.get(r["item"], (0, 0))
        out[r["item"]] = (n + r["accepted"] + r["rounds"], d + r["rounds"])
    return out

  a, b = sums(a_cell), sums(b_cell)
  common = [p for p in a if p in b]
  an, ad = np.array([a[p] for p in common], float).T
  bn, bd = np.array([b[p] for p in common], float).T
  rows = np.random.default_rng(seed).integers(0, len(common), size=(resamples, len(common)))
  fa, fb = an[rows].sum(1) / ad[rows].sum(1), bn[rows].sum(1) / bd[rows].sum(1)
  pa, pb = an.sum() / ad.sum(), bn.sum() / bd.sum()
  return ((pa / pb, *np.percentile(fa / fb, [2.5, 97.5])),
          (pa - pb, *np.percentile(fa - fb, [2.5, 97.5])), len(common))


def test_summary_reads_the_table_with_paired_intervals(flagship, tmp_path):
  c, cells = flagship
  k = decode.config_k(c.drafter)
  main = lambda name, tree=False, constrained=True, t=0.0: drafter_table.main_row(  # noqa
      name, tree, constrained, t, k)
  jump_off = drafter_table.Row("ngram", False, k, False, True, False, True, 0.0)
  scales = {main("ngram"): 1.0, main("eagle3", True): 1.4, main("eagle3"): 1.3,
            main("mtp"): 0.9, main("eagle3", True, False): 1.1, jump_off: 0.8}
  records = _records(c, cells, scales)
  ids = {row: x.id for x in cells for row in [drafter_table.row_of(x.overrides, c)]}
  # The winner's cell has one prompt the baseline never ran: it is left out of the pairing.
  extra = dict(next(r for r in records if r.get("cell") == ids[main("eagle3", True)]),
               item="only-here", accepted=200, rounds=20)
  # A request of a cell of another design is left out of every figure.
  stale = dict(extra, cell="constrained=True,drafter.name=eagle3,drafter.options.k=4",
               accepted=0)
  records = [extra, stale] + records
  text = "\n".join(drafter_table.reading(records, c))

  ratio, diff, n = _oracle(records, ids[main("eagle3", True)], ids[main("ngram")])
  assert n == 30
  best = [r for r in records if r.get("cell") == ids[main("eagle3", True)]
          and r.get("kind") == "request"]
  assert (f"the longest accepted length is eagle3 tree's, "
          f"{stats.fmt(decode._accepted_interval(best))} tokens per round**: "
          f"{stats.fmt(ratio)}x n-gram + jump-forward's") in text
  assert f"{stats.fmt(diff)} tokens per round more (paired over the 30 prompts" in text
  runner_up, _, _ = _oracle(records, ids[main("eagle3", True)], ids[main("eagle3")])
  assert f"The runner-up, eagle3 chain" in text and f"{stats.fmt(runner_up)}x it" in text
  # Against the baseline, per drafter; the constraint's paired ratio; jump-forward's.
  against = _row(text, "| mtp chain |", after="### Which drafter wins")
  assert against[1] == f"{stats.fmt(_oracle(records, ids[main('mtp')], ids[main('ngram')])[0])} (30)"
  constraint = _row(text, "| eagle3 tree |", after="### What the constraint does")
  free = ids[main("eagle3", True, False)]
  assert constraint[1] == f"{stats.fmt(_oracle(records, ids[main('eagle3', True)], free)[0])} (30)"
  jump = _row(text, "| ngram chain |", after="### What jump-forward adds")
  on_off, on_minus_off, _ = _oracle(records, ids[main("ngram")], ids[jump_off])
  assert jump[1:3] == [f"{stats.fmt(on_off)} (30)", stats.fmt(on_minus_off)]
  # Cells planned but not run read '-': DSpark's among them, beside DFlash's and EAGLE-3's.
  table = _row(text, "| dspark chain |", after="## The table")
  assert table[1:] == ["-"] * 4
  assert "### DSpark, DFlash and EAGLE-3 on the same cells" in text
  assert "1 request records of cells outside this design were left out" in text
  # Projected speedups of the constrained cells that ran, on both accelerators.
  proj = text.split("### Projected speedups under the constraint")[1]
  assert "H200 Qwen3-8B" in proj and "TPU v5e SmolLM2-135M-Instruct" in proj
  assert proj.count("\n| ") == 1 + 4  # header + the four constrained T=0 cells that ran
  # The headline of the index, and the study's summary built around the reading.
  assert drafter_table.headline(records, c).startswith(
      f"under the constraint at T=0, K={k}: eagle3 tree")
  summary = decode.summarize(records, c, tmp_path)
  assert summary.index("## The table") < summary.index("## Every cell")
  assert "### Effect of one axis" not in summary


def _row(text: str, start: str, after: str) -> list[str]:
  """The cells of the first table row beginning with `start` after the heading `after`."""
  part = text.split(after, 1)[1]
  line = next(l for l in part.splitlines() if l.startswith(start))
  return [x.strip() for x in line.strip().strip("|").split("|")]
