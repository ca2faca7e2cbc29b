"""PNG plots for study summaries (matplotlib, Agg backend; the `study` extra)."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Sequence

Interval = tuple[float, float]  # (low, high) of one value, in the value's units


def _plt():
  import matplotlib

  matplotlib.use("Agg")
  import matplotlib.pyplot as plt

  return plt


def _yerr(values: Sequence[float], bounds: Sequence[Interval] | None):
  """matplotlib's asymmetric yerr [2, n] (distance below, distance above) of `values` from
  their (low, high) bounds; None without bounds. A bound that is NaN (an interval of one
  unit) draws no bar; a percentile interval that misses its point (possible for a skewed
  statistic) is drawn up to the point on that side.

  Raises:
    ValueError: a different number of bounds than values.
  """
  if bounds is None:
    return None
  if len(bounds) != len(values):
    raise ValueError(f"{len(bounds)} intervals for {len(values)} values: give one (low, high) "
                     "per value")
  below, above = [], []
  for v, (lo, hi) in zip(values, bounds):
    if any(x is None or math.isnan(x) for x in (v, lo, hi)):
      below.append(0.0)
      above.append(0.0)
      continue
    below.append(max(v - lo, 0.0))
    above.append(max(hi - v, 0.0))
  return [below, above]


def grouped_bars(path: Path, groups: Sequence[str], series: dict[str, Sequence[float]], *,
                 title: str, ylabel: str,
                 intervals: dict[str, Sequence[Interval]] | None = None) -> str:
  """Bars of each series side by side per group, with error bars where `intervals` gives a
  series its (low, high) per value (asymmetric, e.g. a bootstrap interval; a NaN bound draws
  none); returns the file name (for a markdown link)."""
  plt = _plt()
  n = max(1, len(series))
  width = 0.8 / n
  fig, ax = plt.subplots(figsize=(min(16, max(6, 0.3 * len(groups) * (n + 1))), 4.5))
  for j, (name, values) in enumerate(series.items()):
    xs = [i + (j - (n - 1) / 2) * width for i in range(len(groups))]
    yerr = _yerr(values, (intervals or {}).get(name))
    ax.bar(xs, values, width, label=name, yerr=yerr, capsize=2 if yerr else 0,
           error_kw={"elinewidth": 0.8})
  ax.set_xticks(range(len(groups)))
  ax.set_xticklabels(groups, rotation=30, ha="right", fontsize=8)
  ax.set_ylabel(ylabel)
  ax.set_title(title)
  ax.legend(fontsize=7)
  fig.tight_layout()
  fig.savefig(path, dpi=110)
  plt.close(fig)
  return Path(path).name


def lines(path: Path, xs: Sequence, series: dict[str, Sequence[float]], *, title: str,
          xlabel: str, ylabel: str, logx: bool = False, logy: bool = False,
          intervals: dict[str, Sequence[Interval]] | None = None, dodge: float = 0.0) -> str:
  """One line per series over xs, with error bars where `intervals` gives a series its
  (low, high) per value (as in `grouped_bars`); `dodge` shifts each series right of the one
  before by that many x units (bars of series at the same x stay apart on a linear axis);
  returns the file name."""
  plt = _plt()
  fig, ax = plt.subplots(figsize=(6.5, 4))
  n = len(series)
  for j, (name, values) in enumerate(series.items()):
    yerr = _yerr(values, (intervals or {}).get(name))
    shift = (j - (n - 1) / 2) * dodge
    ax.errorbar([x + shift for x in xs[:len(values)]], values, yerr=yerr, marker="o",
                label=name, capsize=2 if yerr else 0, elinewidth=0.8)
  if logx:
    ax.set_xscale("log")
  elif len(xs) <= 16:
    ax.set_xticks(list(xs))
  if logy:
    ax.set_yscale("log")
  ax.set_xlabel(xlabel)
  ax.set_ylabel(ylabel)
  ax.set_title(title)
  ax.legend(fontsize=7)
  ax.grid(alpha=0.3)
  fig.tight_layout()
  fig.savefig(path, dpi=110)
  plt.close(fig)
  return Path(path).name


def table(header: Sequence[str], rows: Sequence[Sequence], align: str = "") -> str:
  """A markdown table; `align` gives one of l/r per column (default: first left, rest right)."""
  align = align or "l" + "r" * (len(header) - 1)
  out = ["| " + " | ".join(header) + " |",
         "|" + "|".join("---" if a == "l" else "---:" for a in align) + "|"]
  out += ["| " + " | ".join(str(c) for c in row) + " |" for row in rows]
  return "\n".join(out)
