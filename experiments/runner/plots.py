"""PNG plots for study summaries (matplotlib, Agg backend; the `study` extra)."""

from __future__ import annotations

from pathlib import Path
from typing import Sequence


def _plt():
  import matplotlib

  matplotlib.use("Agg")
  import matplotlib.pyplot as plt

  return plt


def grouped_bars(path: Path, groups: Sequence[str], series: dict[str, Sequence[float]], *,
                 title: str, ylabel: str, errors: dict[str, Sequence[float]] | None = None) -> str:
  """Bars of each series side by side per group; returns the file name (for a markdown link)."""
  plt = _plt()
  n = max(1, len(series))
  width = 0.8 / n
  fig, ax = plt.subplots(figsize=(min(16, max(6, 0.3 * len(groups) * (n + 1))), 4.5))
  for j, (name, values) in enumerate(series.items()):
    xs = [i + (j - (n - 1) / 2) * width for i in range(len(groups))]
    ax.bar(xs, values, width, label=name,
           yerr=(errors or {}).get(name), capsize=2 if errors else 0)
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
          xlabel: str, ylabel: str, logx: bool = False, logy: bool = False) -> str:
  """One line per series over xs; returns the file name."""
  plt = _plt()
  fig, ax = plt.subplots(figsize=(6.5, 4))
  for name, values in series.items():
    ax.plot(xs[:len(values)], values, marker="o", label=name)
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
