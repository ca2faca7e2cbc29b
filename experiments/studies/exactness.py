"""Exactness demonstration: the acceptance rule of DESIGN.md section 5 against the naive rule
that drops an illegal draft and draws a bonus from p in its place.

Cells (axis `drafter`):
  counterexample/dense, counterexample/sparse
      the design's a/b/x counter-example through the acceptance reference (p(a)=p(b)=0.5,
      p(x)=0; q(a)=q(x)=0.5): the exact rule gives a, b = 0.5, 0.5, the naive one 0.75, 0.25.
  <registered drafter>[/sampling]
      the engine on the tiny peaky random target with a toy vocabulary and a choice
      constraint, T = 1: the empirical distribution of whole outputs against the FP64
      enumeration of ordinary decoding, for masked q on and off.
Each with `rule` exact or drop-illegal; chi-square p-value and total-variation distance.
"""

from __future__ import annotations

import collections
from pathlib import Path
from typing import Iterator

import numpy as np

from experiments.runner import plots, stats

CHOICES = (b"abc", b"ab", b"ba1", b"cab", b"x{y}")
PROMPT = (1, 1, 2, 1, 1, 2, 1)


def units(c) -> int:
  return 1


def skip(c) -> str | None:
  if c.drafter.startswith("counterexample") and not c.masked_q:
    return "the counter-example has no mask on q"
  return None


def group(c) -> tuple:
  return (c.drafter, c.rule)


def _tv(expected: dict, observed: collections.Counter, n: int) -> float:
  keys = set(expected) | set(observed)
  return 0.5 * sum(abs(expected.get(k, 0.0) - observed.get(k, 0) / n) for k in keys)


def _k(c) -> int:
  """K of the engine cells (older configs held it as `k`)."""
  return int(c.drafter_options.k) if "drafter_options" in c else int(c.k)


def _engine(c):
  from infernix_jax.runtime.build import EngineSpec, Target, build_engine
  from infernix_jax.testing import exact_oracle as h

  from experiments.studies.decode import drafter_options

  cfg, model = h.tiny_model()
  name, _, mode = c.drafter.partition("/")
  pool = {**c.drafter_options.to_dict(), "model": h.tiny_model(seed=1),
          "sampling": mode == "sampling"}
  spec = EngineSpec(drafter=name, drafter_options=drafter_options(name, pool),
                    jump_forward=False, lanes=c.lanes, capacity=32, masked_q=c.masked_q,
                    acceptance=c.rule)
  return build_engine(spec, target=Target(cfg=cfg, model=model, vocab=h.toy_vocab(),
                                          name="tiny")).engine


def run_cell(c, ctx) -> Iterator[dict]:
  from infernix_jax import constrain as ic
  from infernix_jax.runtime import GenerationRequest, SamplingOptions
  from infernix_jax.testing import exact_oracle as h

  if c.drafter.startswith("counterexample"):
    counts = h.counter_example(c.counter_samples, c.drafter.split("/")[1], c.rule == "drop-illegal",
                               seed=c.seed)
    expected = {("a",): 0.5, ("b",): 0.5}
    samples = [("a",)] * int(counts[0]) + [("b",)] * int(counts[1]) + [("x",)] * int(counts[2])
  else:
    cfg, model = h.tiny_model()
    expected = ctx.get("oracle", c.max_tokens, lambda: h.exact_distribution(
        cfg, model, PROMPT, h.toy_vocab(), c.max_tokens, 1.0, choices=CHOICES))
    eng = _engine(c)
    spec = ic.OutputConstraint.choice([x.decode() for x in CHOICES])
    results = eng.generate([GenerationRequest(PROMPT, max_tokens=c.max_tokens, constraint=spec,
                                              sampling=SamplingOptions(temperature=1.0,
                                                                       seed=c.seed + s))
                            for s in range(c.samples)])
    errors = [r.error for r in results if r.error]
    if errors:
      raise RuntimeError(f"{len(errors)} requests failed: {errors[0]}")
    samples = [tuple(r.token_ids) for r in results]
  observed = collections.Counter(samples)
  impossible = sum(v for k, v in observed.items() if k not in expected)
  pvalue = 0.0 if impossible else h.chi_square_pvalue(expected, samples)
  top = sorted(expected, key=lambda k: -expected[k])[:8]
  yield {"kind": "measurement", "samples": len(samples), "pvalue": pvalue,
         "tv": _tv(expected, observed, len(samples)), "impossible": impossible,
         # Every output's law and count: the summary resamples the TV distance from them.
         "law": [[list(k), float(v)] for k, v in sorted(expected.items())],
         "counts": [[list(k), int(v)] for k, v in sorted(observed.items())],
         "top": [{"output": list(k), "expected": expected[k],
                  "observed": observed.get(k, 0) / len(samples)} for k in top]}


def _distributions(path: Path, by: dict) -> str:
  """Expected vs sampled frequencies of the top outputs, one panel per drafter x masked q
  where both rules ran; returns the file name ("" when no cell ran both)."""
  from experiments.runner.plots import _plt

  panels = [(d, m) for (d, m, rule) in by if rule == "exact" and (d, m, "drop-illegal") in by]
  if not panels:
    return ""
  plt = _plt()
  cols = min(3, max(1, len(panels)))
  rows = -(-len(panels) // cols)
  fig, axes = plt.subplots(rows, cols, figsize=(4.2 * cols, 3.2 * rows), squeeze=False)
  for ax, (d, m) in zip(axes.flat, panels):
    exact, naive = by[(d, m, "exact")], by[(d, m, "drop-illegal")]
    labels = [" ".join(map(str, t["output"])) or "()" for t in exact["top"]]
    got_naive = {tuple(t["output"]): t["observed"] for t in naive["top"]}
    xs = np.arange(len(labels))
    ax.bar(xs - 0.27, [t["expected"] for t in exact["top"]], 0.27, label="exact law")
    for shift, rec, freqs, name in (
        (0.0, exact, [t["observed"] for t in exact["top"]], "exact rule"),
        (0.27, naive, [got_naive.get(tuple(t["output"]), 0.0) for t in exact["top"]],
         "drop-illegal rule")):
      bounds = [frequency_interval(f, rec["samples"]) for f in freqs]
      ax.bar(xs + shift, freqs, 0.27, label=name, yerr=plots._yerr(freqs, bounds), capsize=1.5,
             error_kw={"elinewidth": 0.7})
    ax.set_xticks(xs)
    ax.set_xticklabels(labels, rotation=45, ha="right", fontsize=6)
    ax.set_title(d if d.startswith("counter") else f"{d}, {'masked' if m else 'plain'} q",
                 fontsize=9)
  for ax in list(axes.flat)[len(panels):]:
    ax.axis("off")
  axes.flat[0].legend(fontsize=7)
  fig.tight_layout()
  fig.savefig(path, dpi=110)
  plt.close(fig)
  return path.name


def law_and_counts(r: dict) -> tuple[np.ndarray, np.ndarray] | None:
  """(law [C], counts [C]) over the outputs of a measurement, aligned; None where the record
  cannot give them. Records with `law` and `counts` give them whole; older records kept the
  8 most likely outputs only, which is whole when those hold the law's entire mass (the rest
  of the samples then have probability 0 and count as one category: the TV is unchanged)."""
  n = r["samples"]
  if "law" in r and "counts" in r:
    law = {tuple(k): p for k, p in r["law"]}
    counts = {tuple(k): v for k, v in r["counts"]}
  else:
    law = {tuple(t["output"]): t["expected"] for t in r["top"]}
    if sum(law.values()) < 1 - 1e-9:
      return None
    counts = {tuple(t["output"]): round(t["observed"] * n) for t in r["top"]}
    counts[("<outside the law>",)] = n - sum(counts.values())
  names = sorted(set(law) | set(counts), key=str)
  return (np.array([law.get(k, 0.0) for k in names]),
          np.array([counts.get(k, 0) for k in names], float))


def tv_interval(r: dict) -> tuple[float, float, float]:
  """The TV distance of a measurement with its 95% bootstrap interval over its samples (the
  recorded TV alone where the record lacks the whole law)."""
  whole = law_and_counts(r)
  if whole is None:
    return r["tv"], float("nan"), float("nan")
  law, counts = whole
  return stats.bootstrap_counts(counts, lambda k: 0.5 * float(np.abs(law - k / k.sum()).sum()))


def frequency_interval(observed: float, n: int) -> tuple[float, float]:
  """95% bootstrap interval of an output's sampled frequency over n samples."""
  k = round(observed * n)
  return stats.bootstrap_counts([k, n - k], lambda c: c[0] / c.sum())[1:]


def headline(records, c) -> str:
  """The index's headline: per counter-example, the TV distance to the exact distribution of
  the exact rule and of the naive rule, each with its interval over samples."""
  meas = [r for r in records if r.get("kind") == "measurement"]
  by = {(r.get("overrides", {}).get("drafter", c.drafter),
         r.get("overrides", {}).get("rule", c.rule)): r for r in meas}
  out = []
  for drafter in dict.fromkeys(d for d, _ in by):
    if not drafter.startswith("counter") or (drafter, "exact") not in by:
      continue
    text = f"{drafter}: exact rule {stats.fmt(tv_interval(by[(drafter, 'exact')]), 4)}"
    if (drafter, "drop-illegal") in by:
      text += f" vs drop-illegal {stats.fmt(tv_interval(by[(drafter, 'drop-illegal')]), 4)}"
    out.append(text)
  return "TV distance to the exact distribution, " + "; ".join(out) if out else ""


def summarize(records, c, out: Path) -> str:
  meas = [r for r in records if r.get("kind") == "measurement"]
  ov = lambda r: r.get("overrides", {})  # noqa: E731
  rows, groups, series = [], [], {"exact rule": [], "drop-illegal rule": []}
  bounds = {k: [] for k in series}
  by = {(ov(r).get("drafter", c.drafter), ov(r).get("masked_q", c.masked_q),
         ov(r).get("rule", c.rule)): r for r in meas}
  tvs = {key: tv_interval(r) for key, r in by.items()}
  for (drafter, masked_q, rule), r in by.items():
    verdict = "passes" if r["pvalue"] > c.alpha else "REJECTED"
    rows.append([drafter, "-" if drafter.startswith("counter") else ("on" if masked_q else "off"),
                 rule, r["samples"], f"{r['pvalue']:.3g}", verdict,
                 stats.fmt(tvs[(drafter, masked_q, rule)], 4)])
  for drafter, masked_q in dict.fromkeys((d, m) for d, m, _ in by):
    groups.append(drafter if drafter.startswith("counter")
                  else f"{drafter} {'masked' if masked_q else 'plain'} q")
    for rule, key in (("exact", "exact rule"), ("drop-illegal", "drop-illegal rule")):
      t = tvs.get((drafter, masked_q, rule), (0.0, float("nan"), float("nan")))
      series[key].append(t[0])
      bounds[key].append(t[1:])
  partial = any(np.isnan(t[1]) for t in tvs.values())
  parts = [
      "Chi-square goodness of fit of the sampled outputs against the exact distribution "
      f"(bins with expected count < 5 pooled; alpha = {c.alpha}), and the total-variation "
      "distance between the empirical and the exact distribution. Counter-example cells run "
      "the acceptance reference on the design's a/b/x example; the others run the engine on "
      "the tiny random target (toy vocabulary, choice constraint "
      f"{[x.decode() for x in CHOICES]}, T = 1, {c.max_tokens} tokens, K = {_k(c)}) against "
      "FP64 enumeration of ordinary decoding.", "",
      "Intervals: 95% percentile bootstrap over the cell's samples (2,000 resamples of the "
      "output counts, seed 0). "
      + ("Cells whose record holds only the 8 most likely outputs, covering less than the "
         "whole law, show the TV alone (runs from now on record every output); their "
         "per-output frequencies carry intervals in the plot below. " if partial else "")
      + "The two rules run the same seeds, but the records keep counts, not outputs per "
      "seed, so the rules' TVs are resampled apart, not in pairs.", "",
      plots.table(["drafter", "masked q", "rule", "samples", "p-value", "verdict",
                   "TV distance"], rows, "lllrrlr"), ""]
  if rows:
    name = plots.grouped_bars(out / "exactness_tv.png", groups, series, intervals=bounds,
                              title="Distance to the exact distribution", ylabel="TV distance")
    parts += [f"![TV distance]({name})", ""]
    name = _distributions(out / "exactness_distributions.png", by)
    if name:
      parts += [f"![output distributions]({name})", "",
                "Above: the probability of the most likely outputs under the exact "
                "distribution beside their sampled frequency under each rule (with its 95% "
                "bootstrap interval over the samples).", ""]
    parts += ["The naive rule is wrong exactly where a sampled q puts mass on illegal tokens "
              "(the counter-example, and sampling drafters with masked q off); with masked q "
              "on, or a one-hot q, no draft it would drop survives, so both rules agree."]
  return "\n".join(parts)
