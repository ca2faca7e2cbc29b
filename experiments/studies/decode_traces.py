"""The per-token trace pages of a decode summary: one HTML page per kept trace, linked from a
table of the traced requests."""

from __future__ import annotations

from pathlib import Path

from experiments.runner import plots


def _label(ov: dict) -> str:
  from experiments.studies import decode

  return decode.label(ov)


TRACES = "traces"  # the folder of a summary's trace pages


def pages(records, ov, out: Path) -> list[str]:
  """One page per kept trace (`trace_first` requests of each cell) under out/traces/, and a
  table linking them with their accepted length and token origins."""
  from infernix_jax import trace_page

  for stale in sorted((out / TRACES).glob("*.html")):  # pages of an earlier report
    stale.unlink()
  kept = [r for r in records if r.get("kind") == "trace"]
  if not kept:
    return []
  rows = []
  for n, r in enumerate(kept):
    facts = trace_page.summary(r["trace"])
    rest = {k: v for k, v in ov.get(r["cell"], r.get("overrides", {})).items()
            if not k.startswith("drafter.")}  # the trace names the drafter (with jump-forward)
    cell = " ".join(x for x in (f"{facts['drafter']} K={facts['k']}", _label(rest))
                    if x != "base")
    name = f"{TRACES}/{n:03d}-{_slug(cell)}.html"
    trace_page.write([r["trace"]], out / name, title=f"{cell}: {r['item']}")
    origins = ", ".join(f"{k} {v}" for k, v in sorted(facts["origins"].items()))
    rows.append([f"[{cell}]({name})", r["item"], f"{facts['accepted_length']:.2f}",
                 facts["tokens"], origins])
  return ["### Traces", "",
          "The first requests of each cell decoded with a per-token trace (`trace_first`): "
          "each page colours every output token by its origin and shows, per position, the "
          "drafts, the target's top candidates and the legal-set size. Traced requests run in "
          "the cell's timed call (tracing costs about 2% of tokens/s: "
          "`docs/results/trace_overhead.md`).", "",
          plots.table(["cell (page)", "prompt", "accepted length", "tokens", "origins"], rows,
                      "llrrl"), ""]


def _slug(text: str) -> str:
  return "".join(ch if ch.isalnum() else "-" for ch in text).strip("-")[:60] or "base"
