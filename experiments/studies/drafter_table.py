"""The reading of a drafter table (a decode config with `reading = "drafters"`): the main
table of accepted lengths, and each comparison a reader asks of it as a paired ratio over the
prompts both cells ran, with its 95% bootstrap interval.

A cell is known by its `Row` (drafter, tree, K, jump-forward, masked q, sampled drafts,
constraint, temperature), read from its overrides. The main table is K = the config's K,
masked q on, drafts as the drafter's default, jump-forward on exactly where the constraint is
(jump-forward alone is drafter "none" with it). Cells of the config's sweep that have no
records (not run yet, or failed: the report's header lists both) print as "-"; records of
cells outside the sweep (another design's) are left out.
"""

from __future__ import annotations

import collections
import dataclasses

import numpy as np

from experiments.runner import projection, stats, sweep
from experiments.studies import decode

BASELINE = "ngram"  # the comparison every drafter is read against (with jump-forward)
DSPARK_PEERS = ("dspark", "dflash", "eagle3")


@dataclasses.dataclass(frozen=True)
class Row:
  """What a cell measures, from its overrides and the config's values."""

  name: str
  tree: bool
  k: int
  jump: bool
  masked_q: bool
  sampled: bool
  constrained: bool
  temperature: float


def row_of(ov: dict, c) -> Row:
  d = c.drafter
  return Row(name=ov.get("drafter.name", d.name),
             tree=bool(ov.get("drafter.options.tree", d.options.get("tree", False))),
             k=int(ov.get("drafter.options.k", decode.config_k(d))),
             jump=bool(ov.get("drafter.jump_forward", d.jump_forward)),
             masked_q=bool(ov.get("masked_q", c.masked_q)),
             sampled=bool(ov.get("drafter.options.sampling", d.options.get("sampling", False))),
             constrained=bool(ov.get("constrained", c.constrained)),
             temperature=float(ov.get("temperature", c.temperature)))


def main_row(name: str, tree: bool, constrained: bool, temperature: float, k: int) -> Row:
  """The main table's cell of a drafter in a setting."""
  return Row(name, tree, k, constrained, True, False, constrained, temperature)


def _figure_sums(unit: list) -> tuple[float, float]:
  """(accepted drafts + rounds, rounds) of one prompt's requests: accepted length's sums."""
  return (float(sum(r["accepted"] + r["rounds"] for r in unit)),
          float(sum(r["rounds"] for r in unit)))


class Table:
  """The measured cells of a sweep by `Row`, and paired comparisons between them."""

  def __init__(self, records, c):
    planned = sweep.cells(c)
    ids = {cell.id for cell in planned}
    self.c = c
    self.k = decode.config_k(c.drafter)
    self.planned = [row_of(cell.overrides, c) for cell in planned]
    self.rows: dict[Row, list] = collections.defaultdict(list)
    self._values: dict[Row, tuple] = {}
    self.left_out = 0
    for r in records:
      if r.get("kind") != "request":
        continue
      if r["cell"] not in ids:
        self.left_out += 1
        continue
      self.rows[row_of(r.get("overrides", {}), c)].append(r)

  def names(self) -> list[str]:
    """Drafters of the sweep in its order ("none" last)."""
    out = list(dict.fromkeys(row.name for row in self.planned))
    return [n for n in out if n != "none"] + [n for n in out if n == "none"]

  def has(self, row: Row) -> bool:
    return row in self.planned

  def value(self, row: Row) -> tuple[float, float, float] | None:
    """Accepted length with its 95% interval over prompts (`decode._accepted_interval`'s
    draws, through `stats.bootstrap_ratio`), None without records."""
    if not self.rows.get(row):
      return None
    if row not in self._values:
      num, den = zip(*map(_figure_sums, stats.by_unit(self.rows[row], "item")))
      self._values[row] = stats.bootstrap_ratio(num, den)
    return self._values[row]

  def cell(self, row: Row) -> str:
    """The accepted length with its interval; '-' for a planned cell without records, ''
    for none planned."""
    if not self.has(row):
      return ""
    v = self.value(row)
    return stats.fmt(v) if v else "-"

  def paired(self, a: Row, b: Row, difference: bool = False):
    """(figure of a vs b over the prompts both ran, prompts) with its paired interval, or
    None where either cell has no records or they share no prompt."""
    if not (self.rows.get(a) and self.rows.get(b)):
      return None
    pairs = stats.paired(self.rows[a], self.rows[b], "item")
    if not pairs:
      return None
    sums = np.array([[*_figure_sums(x), *_figure_sums(y)] for x, y in pairs]).T
    how = stats.paired_difference_of_sums if difference else stats.paired_ratio_of_sums
    return how(*sums), len(pairs)

  def ratio(self, a: Row, b: Row) -> str:
    got = self.paired(a, b)
    return f"{stats.fmt(got[0])} ({got[1]})" if got else "-"


def _shape(name: str, tree: bool) -> str:
  if name == "none":
    return "jump-forward alone"
  return f"{name} {'tree' if tree else 'chain'}"


SETTINGS = ((True, 0.0), (True, 0.7), (False, 0.0), (False, 0.7))


def _setting(constrained: bool, t: float) -> str:
  return f"{'constrained' if constrained else 'free'} T={t:g}"


def _main_rows(t: Table) -> list[tuple[str, bool]]:
  """(drafter, tree) of the main table, chains before trees of each drafter."""
  out = []
  for name in t.names():
    for tree in (False, True):
      if any(t.has(main_row(name, tree, con, temp, t.k)) for con, temp in SETTINGS):
        out.append((name, tree))
  return out


def _winner(t: Table, temperature: float = 0.0):
  """(best main row under the constraint at `temperature`, its runner-up), by accepted
  length, among the rows with records."""
  ran = [main_row(n, tree, True, temperature, t.k) for n, tree in _main_rows(t)]
  ran = sorted((row for row in ran if t.value(row)), key=lambda row: -t.value(row)[0])
  return (ran + [None, None])[:2]


def headline(records, c) -> str:
  """Under the constraint at T = 0: the best drafter against n-gram + jump-forward, paired
  ('' before both have records)."""
  t = Table(records, c)
  best, _ = _winner(t)
  base = main_row(BASELINE, False, True, 0.0, t.k)
  got = t.paired(best, base) if best else None
  if not got or best == base:
    return ""
  return (f"under the constraint at T=0, K={t.k}: {_shape(best.name, best.tree)} "
          f"{stats.fmt(t.value(best))} tokens per round against n-gram + jump-forward's "
          f"{stats.fmt(t.value(base))}, {stats.fmt(got[0])}x paired over {got[1]} prompts "
          "(95% intervals)")


def _winner_text(t: Table) -> list[str]:
  best, second = _winner(t)
  base = main_row(BASELINE, False, True, 0.0, t.k)
  if best is None:
    return ["No cell under the constraint at T = 0 has run yet.", ""]
  out = [f"**Under the constraint at T = 0, K = {t.k}, the longest accepted length is "
         f"{_shape(best.name, best.tree)}'s, {stats.fmt(t.value(best))} tokens per round**"]
  if best != base and t.paired(best, base):
    (ratio, n), (diff, _) = t.paired(best, base), t.paired(best, base, difference=True)
    out[-1] += (f": {stats.fmt(ratio)}x n-gram + jump-forward's {stats.fmt(t.value(base))}, "
                f"{stats.fmt(diff)} tokens per round more (paired over the {n} prompts both "
                "ran).")
  else:
    out[-1] += "."
  if second is not None and t.paired(best, second):
    ratio, n = t.paired(best, second)
    verdict = ("ahead of it" if ratio[1] > 1 else
               "not distinguishable from it at this size" if not np.isnan(ratio[1]) else
               "one prompt: no interval")
    out[-1] += (f" The runner-up, {_shape(second.name, second.tree)}, has "
                f"{stats.fmt(t.value(second))}: the winner is {stats.fmt(ratio)}x it over "
                f"{n} prompts, {verdict}.")
  return out + [""]


def reading(records, c) -> list[str]:
  """The summary's reading of the table: markdown lines."""
  t = Table(records, c)
  k = t.k
  rows = _main_rows(t)
  lines = ["## The table", "",
           f"Accepted length (tokens per round) at K = {k} with its 95% interval over prompts; "
           "jump-forward is on under the constraint (without one it forces nothing), masked q "
           "on (it matters where q is sampled: dflash2, and sampled drafts in the ablation "
           "below); a tree has K nodes, the verify budget of a chain of K. '-': not run yet or "
           "failed (listed above).", "",
           "| drafter | " + " | ".join(_setting(*s) for s in SETTINGS) + " |",
           "|---|" + "---:|" * len(SETTINGS)]
  for name, tree in rows:
    lines.append(f"| {_shape(name, tree)} | "
                 + " | ".join(t.cell(main_row(name, tree, *s, k)) for s in SETTINGS) + " |")
  lines += ["", "Comparisons below are paired: the ratio of two cells' accepted lengths over "
            "the prompts both ran (the count in parentheses), resampling whole prompts on both "
            "sides at once, so a prompt's own difficulty cancels.", ""]
  lines += ["### Which drafter wins under the constraint", ""] + _winner_text(t)
  base = {temp: main_row(BASELINE, False, True, temp, k) for temp in (0.0, 0.7)}
  lines += ["| drafter | against n-gram + jump-forward, T=0 | T=0.7 |", "|---|---:|---:|"]
  for name, tree in rows:
    lines.append(f"| {_shape(name, tree)} | " + " | ".join(
        "(the baseline)" if (name, tree) == (BASELINE, False)
        else t.ratio(main_row(name, tree, True, temp, k), base[temp]) for temp in (0.0, 0.7))
        + " |")
  lines += ["", "### What the constraint does to each drafter", "",
            "Accepted length constrained / free on the same prompts (paired). Under the "
            "constraint jump-forward is on; the last column turns it off, so the constraint's "
            "own effect on the drafts shows (T = 0, chains).", "",
            "| drafter | T=0 | T=0.7 | T=0, jump-forward off |", "|---|---:|---:|---:|"]
  for name, tree in rows:
    if name == "none":
      continue
    off = Row(name, tree, k, False, True, False, True, 0.0)
    free0 = main_row(name, tree, False, 0.0, k)
    lines.append(f"| {_shape(name, tree)} | "
                 + " | ".join(t.ratio(main_row(name, tree, True, temp, k),
                                      main_row(name, tree, False, temp, k))
                              for temp in (0.0, 0.7))
                 + f" | {t.ratio(off, free0) if t.has(off) else ''} |")
  lines += [""] + _jump_and_trees(t, rows)
  lines += _k_and_masked_q(t)
  lines += _dspark(t)
  lines += _projection(t, c)
  if t.left_out:
    lines += [f"{t.left_out} request records of cells outside this design were left out.", ""]
  return lines


def _jump_and_trees(t: Table, rows) -> list[str]:
  k = t.k
  lines = ["### What jump-forward adds", "",
           "Constrained, T = 0: jump-forward on / off (paired), and in tokens per round. "
           "Jump-forward alone (no drafter) has accepted length 1 without it by definition.", "",
           "| drafter | on / off | on - off (tokens per round) |", "|---|---:|---:|"]
  for name, tree in rows:
    on = main_row(name, tree, True, 0.0, k)
    if name == "none":
      lines.append(f"| {_shape(name, tree)} | {t.cell(on)} (vs 1) | |")
      continue
    off = Row(name, tree, k, False, True, False, True, 0.0)
    if not t.has(off):
      continue
    diff = t.paired(on, off, difference=True)
    lines.append(f"| {_shape(name, tree)} | {t.ratio(on, off)} | "
                 f"{stats.fmt(diff[0]) if diff else '-'} |")
  lines += ["", "### What trees add", "",
            f"Tree / chain at the same verify budget (K = {k} nodes against K = {k} drafts), "
            "paired, per setting; the last rows give a budget of 7 where it ran.", "",
            "| drafter | " + " | ".join(_setting(*s) for s in SETTINGS) + " |",
            "|---|" + "---:|" * len(SETTINGS)]
  for name, tree in rows:
    if tree:
      lines.append(f"| {name} (K={k}) | " + " | ".join(
          t.ratio(main_row(name, True, *s, k), main_row(name, False, *s, k))
          for s in SETTINGS) + " |")
  for name in t.names():
    tree7, chain7 = main_row(name, True, True, 0.0, 7), main_row(name, False, True, 0.0, 7)
    if t.has(tree7) and t.has(chain7) and k != 7:
      lines.append(f"| {name} (K=7) | {t.ratio(tree7, chain7)} | | | |")
  return lines + [""]


def _k_and_masked_q(t: Table) -> list[str]:
  k = t.k
  ks = sorted({row.k for row in t.planned if row.k not in (k, 7)})
  lines = []
  drafters = [n for n in t.names() if any(t.has(main_row(n, False, True, 0.0, x)) for x in ks)]
  if drafters:
    lines += ["### Draft length K", "",
              f"Chains, constrained, T = 0: accepted length at each K, and against K = {k} "
              "(paired).", "",
              "| drafter | " + " | ".join(f"K={x}" for x in sorted({*ks, k})) + " | "
              + " | ".join(f"K={x} / K={k}" for x in ks) + " |",
              "|---|" + "---:|" * (len(ks) * 2 + 1)]
    for name in drafters:
      at = {x: main_row(name, False, True, 0.0, x) for x in {*ks, k}}
      lines.append(f"| {name} | " + " | ".join(t.cell(at[x]) for x in sorted(at)) + " | "
                   + " | ".join(t.ratio(at[x], at[k]) for x in ks) + " |")
    lines.append("")
  masked = [row for row in t.planned if not row.masked_q]
  if masked:
    lines += ["### Masked q", "",
              "Constrained, T = 0.7, chains of the drafters whose q is sampled: masked q on / "
              "off (paired); for drafters that also draft greedily, sampled drafts (masked q) "
              "/ greedy drafts (the main table's cell).", "",
              "| drafter | masked q on | off | on / off | sampled / greedy |",
              "|---|---:|---:|---:|---:|"]
    for off in masked:
      on = dataclasses.replace(off, masked_q=True)
      greedy = dataclasses.replace(on, sampled=False)
      vs = t.ratio(on, greedy) if on.sampled and t.has(greedy) else ""
      name = off.name + (" sampled drafts" if off.sampled else "")
      lines.append(f"| {name} | {t.cell(on)} | {t.cell(off)} | {t.ratio(on, off)} | {vs} |")
    lines.append("")
  return lines


def _dspark(t: Table) -> list[str]:
  if not all(n in t.names() for n in DSPARK_PEERS):
    return []
  k = t.k
  said = []
  for peer in DSPARK_PEERS[1:]:
    got = t.paired(main_row("dspark", False, True, 0.0, k), main_row(peer, False, True, 0.0, k))
    if got:
      said.append(f"{stats.fmt(got[0])}x {peer}'s over {got[1]} prompts")
  lines = ["### DSpark, DFlash and EAGLE-3 on the same cells", "",
           ("Chains under the constraint at T = 0: DSpark's accepted length is "
            + " and ".join(said) + "." if said else
            "DSpark has no cell with records beside DFlash's or EAGLE-3's yet (its weights "
            "ship with the drafter; a cell without them fails with the path it looked for)."),
           "",
           "Accepted length of each in every main-table setting, and DSpark against each "
           "(paired; chains, and trees where both grow them).", "",
           "| cell | dspark | dflash | eagle3 | dspark / dflash | dspark / eagle3 |",
           "|---|---:|---:|---:|---:|---:|"]
  for tree in (False, True):
    for s in SETTINGS:
      at = {n: main_row(n, tree, *s, k) for n in DSPARK_PEERS}
      if not t.has(at["dspark"]):
        continue
      lines.append(f"| {'tree' if tree else 'chain'} {_setting(*s)} | "
                   + " | ".join(t.cell(at[n]) for n in DSPARK_PEERS) + " | "
                   + " | ".join(t.ratio(at["dspark"], at[n]) if t.has(at[n]) else ""
                                for n in DSPARK_PEERS[1:]) + " |")
  return lines + [""]


def _projection(t: Table, c) -> list[str]:
  """Projected speedups of the main table's constrained cells (`decode._projection_rows`)."""
  chosen = [main_row(name, tree, True, temp, t.k) for temp in (0.0, 0.7)
            for name, tree in _main_rows(t)]
  chosen = [row for row in chosen if t.rows.get(row)]
  if not chosen:
    return []
  cells, ov, by_cell = [], {}, {}
  for row in chosen:
    first = t.rows[row][0]
    cells.append(first["cell"])
    ov[first["cell"]] = first.get("overrides", {})
    by_cell[first["cell"]] = t.rows[row]
  rows = decode._projection_rows(cells, ov, by_cell, c)
  if not rows:
    return []
  from experiments.runner import plots

  return ["### Projected speedups under the constraint", "",
          f"Decode speedup over ordinary decoding if the measured acceptance (K = {t.k}) held "
          "on an H200 and a TPU v5e for the three model presets: the roofline model of "
          "`experiments/runner/projection.py` (its docstring states the assumptions; a model, "
          "not a measurement), the interval carried from the accepted length's.", "",
          plots.table(["cell", *[f"{hw.name} {shape.name}" for hw, shape
                                 in projection.columns()]], rows), ""]
