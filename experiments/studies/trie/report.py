"""The trie study's tables and PNG plots (paper values beside ours), for the runner's summary
and for docs/results/trie.md, rebuilt from the earlier layered runs' JSON lines:

  python -m experiments.studies.trie.report [RESULTS.jsonl ...] [--out docs/results/trie.md]

Without files it reads LAYERED (docs/results/trie/layered/run*.jsonl, in name order). Later
files (and later lines) override earlier measurements of the same key, so a full run can be
layered over a reduced one.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from experiments.studies.trie import PAPER as PAPER_TITLE
from experiments.studies.trie import ROOT

# The raw lines of the runs measured before the study runner existed (docs/results/trie.md).
LAYERED = ROOT / "docs/results/trie/layered"

# Published values of the paper (Qwen3-8B, A100 host CPU; section 5, appendices H and M).
PAPER = {
    "trie_step_us": 0.65,                                  # Table 4, flat in K
    "xgr_step_us": {10: 9.5, 100: 5.4, 1000: 5.8},          # Table 4 / section 5.1
    "llg_step_us": "73-141",                               # Table 18
    "trie_compile_ms": {10: "30-40", 100: "30-40", 1000: "33", 10000: "40", 100000: "67"},
    "xgr_compile_ms": {1000: "246 (warm)", 10000: "1207 (warm)", 100000: "2700"},
    "llg_compile_ms": {100: "0.6", 10000: "24"},
    "batch128_us": {"trie": 10.0, "xgrammar": 783.0, "llguidance": 3700.0},  # Table 19, K=1000
    "trie_mem_mb": {10000: 0.9, 100000: 8.0},             # Table 10
    "r": {"tools": 0.40, "icd10cm": 0.19},                 # Table 14
}
GOALS = {"warm10k_ms": 100.0, "warm100k_ms": 1000.0, "step_us": 2.0, "batch128_ms": 0.3}

INTRO = """# Trie automaton for large finite sets: reproduction

Reproduces the latency study of {paper}, section 5 and
appendices C, G, H, M, with this repository's trie backend (`infernix_jax/constrain/trie/`,
numpy-vectorized Python) against XGrammar 0.2.8 and LLGuidance 1.9.1 on the same vocabulary,
in the same process, one thread each. The raw lines below were measured before the study
runner existed (new runs: `python -m experiments.run --config=configs/trie.py`, report in
`docs/results/trie/`); this report is rebuilt from them with

    python -m experiments.studies.trie.report docs/results/trie/layered/*.jsonl --out docs/results/trie.md

(This report layers, in order: `run1` full sweep with every peer (XGrammar up to K = 10,000),
`run2_trie` dispatch sweep + trie sweep, `run3_xgr_large` XGrammar regex at K = 50,000 and
100,000, `run4_final` trie + XGrammar regex + LLGuidance in one run (K <= 10,000 for XGrammar),
`run5_steps` / `run6_steps` per-step and batch only, 3 passes each, `run7_equivalence`
Proposition 1 on the five vocabularies; later files override
earlier measurements of the same key. Per-step and batch ratios below therefore come from one
run per engine pair at each K; compile ratios of trie vs XGrammar regex and LLGuidance from
`run4_final`.)

**Machine and noise.** 2 CPU cores shared with several other jobs (load average 8-12 during
the run), so wall-clock times are inflated by waiting for a core, by up to ~7x in a spot
check. Compile times are therefore also given as CPU seconds of this process
(`time.process_time`, all engines compile on one thread), which is the number to compare
with the goals; per-step figures are medians over ~1,000 states (preemption lands in the tail,
p99 shown). Ratios between engines measured in the same run are meaningful; absolute numbers
against the paper's 96-core EPYC are not.

**What is measured.** Compile: the trie from a warm per-vocabulary index (built once, cached,
reported separately) or a cold one; XGrammar regex union, JSON enum schema and the project's
exact-bytes GBNF choice, with a warm tokenizer index; LLGuidance grammar construction + first
mask. Per step: one mask computation into a W-word buffer at every state that generates a
sampled value (the trie: lookup + copy, `TrieAutomaton.fill`; XGrammar: a fresh matcher per
value; LLGuidance: a deep copy of one fresh matcher per value, so its lazily built lexer
states are shared across values as in a serving process), 3 passes, the pass with the lowest
median kept. Batch: one mask for each of B
rows at random generation states. Memory: the per-constraint tables. r = trie nodes / total
characters (paper App. H.7).

**Correctness.** Proposition 1 is tested, not assumed: `tests/constrain/test_trie_xgrammar.py`
compares the trie's mask with XGrammar's bit for bit at every state of 1,000 random walks
(Qwen3 and SmolLM2 vocabularies; tool names, Banking77, ICD-10-CM codes, values that prefix
others, 2-4-byte UTF-8); `test_trie_automaton.py` checks every node against brute-force
enumeration; `test_trie_session.py` checks lookahead/preview/commit/forced tokens against the
XGrammar-backed session.
"""


FINDINGS = """## Findings (run of 2026-11-29; numbers from the tables below)

* **Compile.** With the per-vocabulary index warm, the trie compiles K = 10,000 synthetic tool
  names in ~32 ms CPU and K = 100,000 in ~0.3 s CPU (goals: 100 ms and 1 s). XGrammar needs
  ~1.4 s CPU at K = 10,000 (45x) and ~60 s at K = 100,000 (200x); its JSON-enum and GBNF
  forms behave alike. Wall times on the shared machine were ~4x the CPU times (126 ms and
  0.9 s). The index build (Qwen3: ~0.33 s CPU, 33 MB) is paid once per vocabulary. Unlike the
  paper's flat 30-67 ms, our per-schema cost grows with the trie size (that is the paper's
  O(N_chars * l) traversal term; its flat curve is the K-independent Aho-Corasick build, which
  we cache and report apart).
* **LLGuidance compiles as fast** (within +-10% of the trie at every K) because its compile is
  lazy (grammar + first mask only); it pays later: 6.5-20 us per step (4-11x the trie; 34-184
  us with a fresh matcher per value, as in our first run) and ~4 ms per batch of 128 (27-47x).
* **Per step** the trie's lookup + copy is flat in K at 1.5-1.8 us (median; the 2 us goal),
  above the paper's Rust 0.65 us: most of it is clearing the caller's 19 KB W-word row plus
  interpreter overhead. XGrammar 0.2.8 on this CPU is at parity for K <= 5,000 (1.3-1.65 us,
  0.1-0.25 us faster; the paper measured 5.8 us for it) and then grows: 5.1 us at 10k, 37 us
  at 50k, 100 us at 100k.
* **Batch** B = 128 at realistic states: the trie's vectorized fill takes 0.09-0.15 ms at every
  K up to 100,000 (goal 0.3 ms); XGrammar 0.15 ms at K = 1,000 but 9.9 ms at 10,000 and 0.6 s
  at 100,000; LLGuidance ~4.1 ms (paper: trie 10 us, XGrammar 783 us, LLGuidance 3.7 ms). The
  host's batched lookahead for trie rows (`trie.fill_batch`) vectorizes the K draft positions
  as well.
* **Memory** reproduces the paper's measure (legal ids x 4 bytes): 1.0 MB at K = 10,000 and
  8.8 MB at K = 100,000 (paper 0.9 and 8 MB). Everything we keep (next nodes, mask words,
  pointers, trie arrays) is ~6x that: 6.5 and 53 MB, against XGrammar's 37 and 392 MB.
* **Prefix sharing** r: tools 0.37 at K = 1,000 (paper 0.40), ICD-10-CM billable codes 0.21
  (paper 0.19), label sets 0.54-0.79 (paper 0.59-0.90).
* **Equivalence** (Proposition 1): 0 mismatching masks over ~3,800-7,200 states per
  (vocabulary, set) on SmolLM2, Qwen3, cl100k, Llama-3 and o200k.
* **Other vocabularies** (SmolLM2, cl100k, Llama-3, o200k): same picture, trie 36-42 ms CPU vs
  XGrammar 1.2-1.4 s at K = 10,000; per step 1.1-1.9 us.
* **Dispatch**: the trie's warm compile overtakes the XGrammar choice at K ~ 20 and is 1.6x
  faster at 32, 3x at 100; `auto` routes choices of >= 32 values to the trie.
* **Not met**: "beat both on every axis" holds against XGrammar for compile at every K >= 20,
  per step from K = 10,000 and in batch from K = 10,000 (parity below), and against
  LLGuidance per step and in batch at every K; it does not hold for per-step cost against
  XGrammar at K <= 5,000 (0.1-0.25 us slower) nor for compile against LLGuidance's lazy
  compile (parity, +-10%). The wall-clock compile goal at K = 10,000 (126 ms) was missed on
  the shared machine; its CPU time (32 ms) meets it.
"""


def load(paths) -> dict:
  """{(vocab, set, k, engine, metric): value} with later records overriding earlier ones."""
  out = {}
  for p in paths:
    for line in Path(p).read_text().splitlines():
      if line.strip():
        r = json.loads(line)
        out[(r["vocab"], r["set"], r["k"], r["engine"], r["metric"])] = r["value"]
  return out


def _get(d, *key, scale=1.0, fmt="{:.3g}"):
  v = d.get(key)
  if v is None or isinstance(v, str):
    return "—" if v is None else "skip"
  return fmt.format(v * scale)


def _ks(d, vocab, set_):
  return sorted({k for (v, s, k, _, _) in d if v == vocab and s == set_})


def _ids_mb(d, main, k) -> str:
  b = d.get((main, "tools", k, "trie", "ids_bytes"))
  pairs = d.get((main, "tools", k, "trie", "legal_pairs"))
  if b is None and pairs is not None:
    b = 4 * pairs   # int32 ids
  return "—" if b is None else f"{b / 1e6:.2f}"


def tables(d, main="qwen3") -> list[str]:
  """The markdown sections (list of lines)."""
  L = []
  ks = _ks(d, main, "tools")
  L += ["## Compile time (synthetic tool names, Qwen3 vocabulary)", "",
        "Milliseconds. *cold* includes building the per-vocabulary index (trie) or tokenizer "
        "info (XGrammar) or LLTokenizer (LLGuidance); *warm* reuses it (median of repeats). "
        "LLGuidance compile = grammar construction + first mask, as in the paper.", "",
        "| K | r | trie cold | trie warm | trie warm CPU | XGr regex warm | XGr regex CPU | "
        "XGr JSON enum warm | XGr GBNF warm | LLGuidance warm | LLGuidance CPU | paper trie | "
        "paper XGr |",
        "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
  for k in ks:
    g = lambda e, m: _get(d, main, "tools", k, e, m, scale=1e3)  # noqa: E731
    L.append(f"| {k:,} | {_get(d, main, 'tools', k, 'trie', 'r', fmt='{:.2f}')} | "
             f"{g('trie', 'compile_cold_s')} | {g('trie', 'compile_warm_s')} | "
             f"{g('trie', 'compile_warm_cpu_s')} | {g('xgrammar-regex', 'compile_warm_s')} | "
             f"{g('xgrammar-regex', 'compile_warm_cpu_s')} | {g('xgrammar-json', 'compile_warm_s')} | "
             f"{g('xgrammar-gbnf', 'compile_warm_s')} | {g('llguidance', 'compile_warm_s')} | "
             f"{g('llguidance', 'compile_warm_cpu_s')} | "
             f"{PAPER['trie_compile_ms'].get(k, '')} | {PAPER['xgr_compile_ms'].get(k, '')} |")
  idx = [d.get((main, "tools", k, "trie", "index_s")) for k in ks]
  idx = [x for x in idx if isinstance(x, float)]
  icpu = [d.get((v, s_, k, "trie", "index_cpu_s")) for (v, s_, k, e, m) in d
          if v == main and m == "index_cpu_s" and e == "trie"]
  if idx:
    L += ["", f"Trie index build (once per vocabulary, cached): median "
              f"{sorted(idx)[len(idx) // 2] * 1e3:.0f} ms wall over {len(idx)} cold builds"
              + (f", {sorted(icpu)[len(icpu) // 2] * 1e3:.0f} ms CPU." if icpu else ".")]
  L += ["", "## Per-step mask cost (lookup + copy into the caller's W-word buffer)", "",
        "Microseconds per state, over the states that generate sampled values (longest-token "
        "tokenization, EOS included). *trie loop* = mean of a tight loop of `fill` calls "
        "without a per-call timer.", "",
        "| K | trie median | trie p99 | trie loop | XGrammar median | LLGuidance median | "
        "paper trie | paper XGr |", "|---:|---:|---:|---:|---:|---:|---:|---:|"]
  for k in ks:
    g = lambda e, m: _get(d, main, "tools", k, e, m, scale=1e6)  # noqa: E731
    L.append(f"| {k:,} | {g('trie', 'step_median_s')} | {g('trie', 'step_p99_s')} | "
             f"{g('trie', 'step_loop_s')} | {g('xgrammar-regex', 'step_median_s')} | "
             f"{g('llguidance', 'step_median_s')} | {PAPER['trie_step_us']} | "
             f"{PAPER['xgr_step_us'].get(k, '')} |")
  bks = sorted({k for (v, s, k, e, m) in d if v == main and s == "tools" and m == "batch128_s"})
  bs = sorted({int(m[5:-2]) for (v, s, k, e, m) in d if m.startswith("batch") and v == main})
  if bks:
    L += ["", "## Batch fill (one mask for each of B rows at random generation states)", "",
          "Microseconds per batch step, single thread for every engine (trie: one vectorized "
          "`fill_many`; XGrammar: `BatchGrammarMatcher` with 1 thread; LLGuidance: `LLExecutor(1)`). "
          "Paper (K=1,000, B=128): trie 10, XGrammar 783, LLGuidance 3,700.", "",
          "| K | B | trie | XGrammar | LLGuidance |", "|---:|---:|---:|---:|---:|"]
    for k in bks:
      for b in bs:
        g = lambda e: _get(d, main, "tools", k, e, f"batch{b}_s", scale=1e6)  # noqa: E731
        L.append(f"| {k:,} | {b} | {g('trie')} | {g('xgrammar-regex')} | {g('llguidance')} |")
  L += ["", "## Memory", "",
        "Per-constraint tables (transitions + mask words + dense rows), bytes as MB. The shared "
        "index is reported once per vocabulary.", "",
        "*legal ids MB* is the paper's measure (sum of |valid[n]| x 4 bytes); *trie MB* is "
        "everything this implementation keeps (ids, next nodes, mask words, trie arrays).", "",
        "| K | trie nodes | legal pairs | legal ids MB | trie MB | XGrammar compiled MB | "
        "paper trie MB |",
        "|---:|---:|---:|---:|---:|---:|---:|"]
  for k in ks:
    L.append(f"| {k:,} | {_get(d, main, 'tools', k, 'trie', 'nodes', fmt='{:,.0f}')} | "
             f"{_get(d, main, 'tools', k, 'trie', 'legal_pairs', fmt='{:,.0f}')} | "
             f"{_ids_mb(d, main, k)} | "
             f"{_get(d, main, 'tools', k, 'trie', 'memory_bytes', scale=1e-6, fmt='{:.2f}')} | "
             f"{_get(d, main, 'tools', k, 'xgrammar-regex', 'memory_bytes', scale=1e-6, fmt='{:.2f}')} | "
             f"{PAPER['trie_mem_mb'].get(k, '')} |")
  ib = d.get((main, "tools", ks[0], "trie", "index_bytes")) if ks else None
  if ib:
    L += ["", f"Index memory ({main}): {ib / 1e6:.1f} MB."]
  others = sorted({s for (v, s, k, e, m) in d
                   if v == main and s not in ("tools", "tools-gen", "dispatch")})
  if others:
    L += ["", "## Other enum sets (Qwen3)", "",
          "| set | K | r (ours) | r (paper) | trie warm ms | XGrammar warm ms | LLGuidance ms | "
          "trie step us | XGrammar step us | LLGuidance step us | trie MB |",
          "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for s in others:
      for k in _ks(d, main, s):
        g = lambda e, m, sc: _get(d, main, s, k, e, m, scale=sc)  # noqa: E731
        L.append(f"| {s} | {k:,} | {_get(d, main, s, k, 'trie', 'r', fmt='{:.2f}')} | "
                 f"{PAPER['r'].get(s, '')} | {g('trie', 'compile_warm_s', 1e3)} | "
                 f"{g('xgrammar-regex', 'compile_warm_s', 1e3)} | "
                 f"{g('llguidance', 'compile_warm_s', 1e3)} | {g('trie', 'step_median_s', 1e6)} | "
                 f"{g('xgrammar-regex', 'step_median_s', 1e6)} | "
                 f"{g('llguidance', 'step_median_s', 1e6)} | "
                 f"{_get(d, main, s, k, 'trie', 'memory_bytes', scale=1e-6, fmt='{:.2f}')} |")
  gen = sorted({v for (v, s, k, e, m) in d if s == "tools-gen"})
  if gen:
    L += ["", "## Generalization across vocabularies (synthetic tools)", "",
          "| vocabulary | K | index build ms | index CPU ms | trie warm ms | trie warm CPU ms | "
          "trie step us | XGrammar warm ms | XGrammar CPU ms | XGrammar step us |",
          "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for v in gen:
      for k in _ks(d, v, "tools-gen"):
        g = lambda e, m, sc: _get(d, v, "tools-gen", k, e, m, scale=sc)  # noqa: E731
        L.append(f"| {v} | {k:,} | {g('trie', 'index_s', 1e3)} | {g('trie', 'index_cpu_s', 1e3)} | "
                 f"{g('trie', 'compile_warm_s', 1e3)} | {g('trie', 'compile_warm_cpu_s', 1e3)} | "
                 f"{g('trie', 'step_median_s', 1e6)} | {g('xgrammar-regex', 'compile_warm_s', 1e3)} | "
                 f"{g('xgrammar-regex', 'compile_warm_cpu_s', 1e3)} | "
                 f"{g('xgrammar-regex', 'step_median_s', 1e6)} |")
  dk = _ks(d, main, "dispatch")
  if dk:
    L += ["", "## Dispatch threshold (`backend=\"auto\"`)", "",
          "Warm compile CPU ms of the trie vs the project's XGrammar-backed choice (exact-bytes "
          "GBNF), median of repeats. `auto` routes a choice to the trie from the smallest K "
          "where the trie compiles faster for that K and every larger one measured; the trie's "
          "per-step cost is at or below XGrammar's at every K (table above).", "",
          "| K | trie | XGrammar GBNF | XGrammar / trie |", "|---:|---:|---:|---:|"]
    faster = []
    for k in dk:
      a = d.get((main, "dispatch", k, "trie", "compile_warm_cpu_s"))
      b = d.get((main, "dispatch", k, "xgrammar-gbnf", "compile_warm_cpu_s"))
      if isinstance(a, float) and isinstance(b, float):
        L.append(f"| {k} | {a * 1e3:.3f} | {b * 1e3:.3f} | {b / a:.2f} |")
        faster.append((k, a < b))
    thr = next((k for i, (k, _) in enumerate(faster) if all(f for _, f in faster[i:])), None)
    L += ["", f"Measured crossover: K = {thr} (the library default `trie.DEFAULT_THRESHOLD` "
              "is set from this)."]
  eq = sorted({(v, s_, k) for (v, s_, k, e, m) in d if e == "trie-vs-xgrammar"})
  if eq:
    L += ["", "## Proposition 1 on every study vocabulary", "",
          "Trie mask vs XGrammar mask (exact-bytes GBNF of the same set), compared bit for bit "
          "at every state of 1,000 random walks per row (`experiments/studies/trie/equivalence.py`; "
          "the unit tests do the same for Qwen3 and SmolLM2).", "",
          "| vocabulary | set | K | states compared | distinct trie nodes | mismatches |",
          "|---|---|---:|---:|---:|---:|"]
    for v, s_, k in eq:
      g = lambda m: d.get((v, s_, k, "trie-vs-xgrammar", m))  # noqa: E731
      L.append(f"| {v} | {s_} | {k:,} | {g('states'):,} | {g('distinct_nodes'):,} | "
               f"{g('mismatches')} |")
  L += ["", "## Goals against this run", ""] + goals(d, main)
  return L


def goals(d, main) -> list[str]:
  def v(k, e, m):
    x = d.get((main, "tools", k, e, m))
    return x if isinstance(x, float) else None

  rows = ["| goal | measured | met |", "|---|---:|---|"]
  w10, w100 = v(10000, "trie", "compile_warm_s"), v(100000, "trie", "compile_warm_s")
  c10, c100 = v(10000, "trie", "compile_warm_cpu_s"), v(100000, "trie", "compile_warm_cpu_s")
  for name, val, lim in (("warm compile K=10k <= 100 ms (wall)", w10, GOALS["warm10k_ms"]),
                         ("warm compile K=10k <= 100 ms (CPU)", c10, GOALS["warm10k_ms"]),
                         ("warm compile K=100k <= 1 s (wall)", w100, GOALS["warm100k_ms"]),
                         ("warm compile K=100k <= 1 s (CPU)", c100, GOALS["warm100k_ms"])):
    rows.append(f"| {name} | {'—' if val is None else f'{val * 1e3:.1f} ms'} | "
                f"{'—' if val is None else ('yes' if val * 1e3 <= lim else 'no')} |")
  steps = [v(k, "trie", "step_median_s") for k in _ks(d, main, "tools")]
  steps = [s for s in steps if s is not None]
  if steps:
    mx = max(steps) * 1e6
    rows.append(f"| per-step <= 2 us at every K (median per K) | max {mx:.2f} us, min "
                f"{min(steps) * 1e6:.2f} us | {'yes' if mx <= GOALS['step_us'] else 'no'} |")
  b = [v(k, "trie", "batch128_s") for k in _ks(d, main, "tools")]
  b = [x for x in b if x is not None]
  if b:
    mx = max(b) * 1e3
    rows.append(f"| batch B=128 <= 0.3 ms | max {mx:.3f} ms | "
                f"{'yes' if mx <= GOALS['batch128_ms'] else 'no'} |")
  return rows


def plots(d, out_dir: Path, main="qwen3") -> list[str]:
  """Writes PNG plots; returns their file names."""
  import matplotlib

  matplotlib.use("Agg")
  import matplotlib.pyplot as plt

  ks = _ks(d, main, "tools")
  names = []

  def series(e, m, scale):
    xs, ys = [], []
    for k in ks:
      y = d.get((main, "tools", k, e, m))
      if isinstance(y, float):
        xs.append(k)
        ys.append(y * scale)
    return xs, ys

  fig, ax = plt.subplots(figsize=(7, 4.5))
  for e, lab in (("trie", "trie (warm index)"), ("xgrammar-regex", "XGrammar regex"),
                 ("xgrammar-json", "XGrammar JSON enum"), ("xgrammar-gbnf", "XGrammar GBNF"),
                 ("llguidance", "LLGuidance (lazy: grammar + first mask)")):
    xs, ys = series(e, "compile_warm_cpu_s", 1e3)
    if xs:
      ax.plot(xs, ys, marker="o", label=lab)
  icpu = [v for (vv, s_, k, e, m), v in d.items()
          if vv == main and e == "trie" and m == "index_cpu_s" and isinstance(v, float)]
  if icpu:
    ax.axhline(sorted(icpu)[len(icpu) // 2] * 1e3, color="tab:blue", ls=":", lw=1,
               label="trie index build (once per vocabulary)")
  ax.plot([10, 100, 1000, 10000, 100000], [35, 35, 33, 40, 67], "k--", label="paper trie (Rust)")
  ax.plot([1000, 10000], [246, 1207], "k:", marker="x", label="paper XGrammar (warm)")
  ax.set(xscale="log", yscale="log", xlabel="K (synthetic tool names)",
         ylabel="warm compile, CPU ms", title=f"Compile time vs K ({main}; CPU time, 1 thread)")
  ax.legend(fontsize=8)
  fig.tight_layout()
  fig.savefig(out_dir / "trie_compile.png", dpi=110)
  names.append("trie_compile.png")
  plt.close(fig)

  fig, ax = plt.subplots(figsize=(7, 4.5))
  for e, lab in (("trie", "trie"), ("xgrammar-regex", "XGrammar"), ("llguidance", "LLGuidance")):
    xs, ys = series(e, "step_median_s", 1e6)
    if xs:
      ax.plot(xs, ys, marker="o", label=f"{lab} (median)")
  ax.axhline(PAPER["trie_step_us"], color="k", ls="--", label="paper trie 0.65 us")
  ax.plot([10, 100, 1000], [9.5, 5.4, 5.8], "k:", marker="x", label="paper XGrammar")
  ax.axhline(2.0, color="r", ls="-.", lw=0.8, label="goal 2 us")
  ax.set(xscale="log", yscale="log", xlabel="K", ylabel="us per step",
         title=f"Per-step mask cost vs K ({main})")
  ax.legend(fontsize=8)
  fig.tight_layout()
  fig.savefig(out_dir / "trie_step.png", dpi=110)
  names.append("trie_step.png")
  plt.close(fig)

  bks = sorted({k for (v, s, k, e, m) in d if v == main and s == "tools" and m == "batch128_s"})
  if bks:
    fig, ax = plt.subplots(figsize=(7, 4.5))
    bs = sorted({int(m[5:-2]) for (v, s, k, e, m) in d if m.startswith("batch") and v == main})
    styles = ["-", "--", ":", "-."]
    for i, k in enumerate(bks):
      for e, lab, col in (("trie", "trie", "tab:blue"), ("xgrammar-regex", "XGrammar", "tab:orange"),
                          ("llguidance", "LLGuidance", "tab:green")):
        ys = [d.get((main, "tools", k, e, f"batch{b}_s")) for b in bs]
        pts = [(b, y * 1e6) for b, y in zip(bs, ys) if isinstance(y, float)]
        if pts:
          ax.plot(*zip(*pts), marker="o", color=col, ls=styles[i % len(styles)],
                  label=f"{lab} K={k:,}")
    ax.plot([128], [10], "k*", ms=10, label="paper trie B=128")
    ax.plot([128], [783], "kx", ms=10, label="paper XGrammar B=128")
    ax.plot([128], [3700], "k+", ms=12, label="paper LLGuidance B=128")
    ax.set(xscale="log", yscale="log", xlabel="B", ylabel="us per batch step",
           title=f"Batch mask fill ({main})")
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(out_dir / "trie_batch.png", dpi=110)
    names.append("trie_batch.png")
    plt.close(fig)
  return names


def method_lines() -> list[str]:
  """What is measured, how, and the correctness checks (INTRO without its run history)."""
  text = INTRO.split("**What is measured.**", 1)[1]
  return [f"Reproduces the compile, per-step and batch mask study of {PAPER_TITLE}: section 5 "
          "and appendices C, G, H, M.", "",
          "Compile times are also given as CPU seconds of this process (`time.process_time`; "
          "every engine compiles on one thread), robust to other jobs sharing the cores; "
          "per-step figures are medians over the sampled states (p99 shown). Ratios between "
          "engines of one run are meaningful; absolute numbers against the paper's 96-core "
          "EPYC are not.", "", "**What is measured.**" + text.rstrip()]


def render(d, plot_names) -> list[str]:
  """The whole markdown report (lines)."""
  lines = ["<!-- generated by experiments/studies/trie/report.py from the raw JSON lines -->", ""]
  return (lines + INTRO.format(paper=PAPER_TITLE).splitlines() + [""] + FINDINGS.splitlines() + [""]
          + [f"![{n}]({n})" for n in plot_names] + [""] + tables(d))


def main():
  ap = argparse.ArgumentParser()
  ap.add_argument("results", nargs="*", help="JSON lines files (default: LAYERED's run*.jsonl)")
  ap.add_argument("--out", default="docs/results/trie.md")
  ap.add_argument("--plots", default="docs/results")
  args = ap.parse_args()
  paths = args.results or sorted(LAYERED.glob("run*.jsonl"))
  if not paths:
    ap.error(f"no run*.jsonl in {LAYERED}: name the JSON lines files to read")
  d = load(paths)
  out = Path(args.out)
  out.parent.mkdir(parents=True, exist_ok=True)
  names = plots(d, Path(args.plots))
  out.write_text("\n".join(render(d, names)) + "\n")
  print(out)


if __name__ == "__main__":
  main()
