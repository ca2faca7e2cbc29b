"""Measurements of the trie reproduction study (run by `experiments.studies.trie`).

Each function takes the study config and `rec(**fields)`, which records one measurement
{vocab, set, k, engine, metric, value} (see report.py for the tables built from them), and
yields a short label after each work item (one engine on one set, one set on one vocabulary,
one K of the dispatch sweep), so the study's progress bar can count them; `work_items` says
how many a section has.
"""

from __future__ import annotations

import time
from typing import Iterator

import numpy as np

from experiments.studies.trie import engines, enum_sets, vocabs

SECTIONS = ("equivalence", "dispatch", "main", "extra", "gen")


def _extra_sets(cfg, data) -> dict[str, list[str]]:
  """The `extra` section's sets: ICD-10-CM billable codes and the shared label sets."""
  sets = {}
  for extra in cfg.extra_sets:
    sets.update({"icd10cm": enum_sets.icd10cm_billable()} if extra == "icd10cm"
                else enum_sets.label_sets(data))
  return sets


def _equivalence_sets(cfg, data) -> dict[str, list[str]]:
  from experiments.studies.trie import equivalence as eq

  sets = {"tools+extras": enum_sets.tool_names(300, seed=cfg.seed) + eq.EXTRAS}
  sets.update({k: v for k, v in enum_sets.label_sets(data).items() if k == "banking77"})
  sets["icd10cm/50"] = enum_sets.icd10cm_billable()[::50]
  return sets


def work_items(cfg, data) -> int:
  """How many labels `run_section` yields for `cfg.section` (its progress bar's total)."""
  labels = enum_sets.label_sets(data)  # only the label files present
  if cfg.section == "equivalence":
    return len(cfg.gen_vocabs) * (2 + ("banking77" in labels))
  if cfg.section == "dispatch":
    return len(cfg.dispatch_k)
  if cfg.section == "main":
    return len(cfg.k_values) * len(cfg.engines)
  if cfg.section == "extra":
    return 3 * sum(1 if e == "icd10cm" else len(labels) for e in cfg.extra_sets)
  if cfg.section == "gen":
    return len(cfg.gen_vocabs) * len(cfg.gen_k) * 2
  return 1  # an unknown section: its cell fails when it runs, with the error recorded


def run_section(cfg, rec, data, vocab) -> Iterator[str]:
  """The section `cfg.section` of the study (`vocab`: the loaded `cfg.main_vocab`)."""
  rng = np.random.default_rng(cfg.seed)
  if cfg.section == "equivalence":
    yield from equivalence(cfg, rec, data)
  elif cfg.section == "dispatch":
    yield from dispatch_sweep(cfg, rec, vocab)
  elif cfg.section == "main":
    for k in cfg.k_values:
      values = enum_sets.tool_names(int(k), seed=cfg.seed)
      yield from measure_set(cfg, rec, cfg.main_vocab, vocab, "tools", values, cfg.engines,
                             batch=int(k) in tuple(cfg.batch_k), rng=rng)
  elif cfg.section == "extra":
    for name, values in _extra_sets(cfg, data).items():
      yield from measure_set(cfg, rec, cfg.main_vocab, vocab, name, values,
                             ("trie", f"xgrammar-{cfg.xgr_step_variant}", "llguidance"), rng=rng)
  elif cfg.section == "gen":
    for vname in cfg.gen_vocabs:
      gv = vocab if vname == cfg.main_vocab else vocabs.load(vname, data)
      for k in cfg.gen_k:
        values = enum_sets.tool_names(int(k), seed=cfg.seed)
        yield from measure_set(cfg, rec, vname, gv, "tools-gen", values,
                               ("trie", f"xgrammar-{cfg.xgr_step_variant}"), rng=rng)
  else:
    raise ValueError(f"section={cfg.section!r}: known {', '.join(SECTIONS)}")


def _engine(name, vocab):
  if name == "trie":
    return engines.TrieEngine(vocab)
  if name.startswith("xgrammar-"):
    return engines.XGrammarEngine(vocab, name.split("-", 1)[1])
  if name == "llguidance":
    return engines.LLGuidanceEngine(vocab)
  raise ValueError(name)


def _batch_states(paths, rng, b):
  states = []
  for _ in range(b):
    p = paths[rng.integers(len(paths))]
    states.append(p[:rng.integers(len(p))])   # a prefix that did not take EOS
  return states


def measure_set(cfg, rec, vocab_name, vocab, set_name, values, engine_names, *, steps=True,
                batch=False, rng=None, steps_only=False) -> Iterator[str]:
  """All measures of one (vocabulary, set) for the given engines (``steps_only``: per-step and
  batch costs after a single compile); yields a label after each engine."""
  k = len(values)
  base = dict(vocab=vocab_name, set=set_name, k=k)
  trie_eng = engines.TrieEngine(vocab)
  compiled_trie = trie_eng.compile(values)
  paths = engines.greedy_paths(compiled_trie, vocab, values, cfg.paths, rng)
  states = {b: _batch_states(paths, rng, b) for b in cfg.batch_sizes} if batch else {}
  for name in engine_names:
    _measure_engine(cfg, rec, base, vocab, values, name, trie_eng, paths, states,
                    steps=steps, steps_only=steps_only)
    yield f"{vocab_name} {set_name} K={k} {name}"


def _measure_engine(cfg, rec, base, vocab, values, name, trie_eng, paths, states, *, steps,
                    steps_only):
  """One engine's measures on one (vocabulary, set) (`states`: batch states by B, or none)."""
  k = base["k"]
  if name.startswith("xgrammar") and (k > cfg.xgr_max_k or (
      k > 10000 and name.split("-", 1)[1] not in cfg.xgr_big_variants)):
    rec(**base, engine=name, metric="skipped", value=f"K > xgr_max_k={cfg.xgr_max_k}")
    return
  if name == "llguidance" and k > cfg.llg_max_k:
    return
  eng = _engine(name, vocab)
  cold_index = eng.index_seconds()
  t0, c0 = time.perf_counter(), time.process_time()
  try:
    compiled = eng.compile(values)
  except Exception as e:  # noqa: BLE001  (a peer failing to compile is a result)
    rec(**base, engine=name, metric="error", value=str(e)[:200])
    return
  cold, cold_cpu = time.perf_counter() - t0, time.process_time() - c0
  if not steps_only:
    rec(**base, engine=name, metric="index_s", value=cold_index)
    if hasattr(eng, "index_cpu_seconds"):
      rec(**base, engine=name, metric="index_cpu_s", value=eng.index_cpu_seconds)
    rec(**base, engine=name, metric="compile_cold_s", value=cold_index + cold)
  warm, warm_cpu = [], []
  for _ in range(0 if steps_only else cfg.warm_repeats if k <= 10000 or name == "trie" else 1):
    t0, c0 = time.perf_counter(), time.process_time()
    compiled = eng.compile(values)
    warm.append(time.perf_counter() - t0)
    warm_cpu.append(time.process_time() - c0)
  if warm:  # the median, and each repeat (the study's intervals resample them)
    rec(**base, engine=name, metric="compile_warm_s", value=float(np.median(warm)),
        repeats=[float(x) for x in warm])
    # CPU seconds of this process: robust to other jobs sharing the cores (wall time is not)
    rec(**base, engine=name, metric="compile_warm_cpu_s", value=float(np.median(warm_cpu)),
        repeats=[float(x) for x in warm_cpu])
  mem = eng.memory_bytes(compiled)
  if mem >= 0:
    rec(**base, engine=name, metric="memory_bytes", value=int(mem))
  if name == "trie":
    a = compiled.automaton
    rec(**base, engine=name, metric="nodes", value=int(a.n_nodes))
    rec(**base, engine=name, metric="legal_pairs", value=int(a.ids.size))
    rec(**base, engine=name, metric="ids_bytes", value=int(a.ids.nbytes))  # paper's measure
    rec(**base, engine=name, metric="r", value=float(a.prefix_sharing))
    rec(**base, engine=name, metric="index_bytes",
        value=int(engines.trie.get_index(vocab).memory_bytes()))
    rec(**base, engine=name, metric="step_loop_s", value=trie_eng.loop_seconds(compiled, paths))
  is_step_peer = name in ("trie", "llguidance", f"xgrammar-{cfg.xgr_step_variant}")
  if steps and is_step_peer:
    # Several passes over all states; the pass with the lowest median is kept (the usual
    # microbenchmark rule: other jobs on the shared cores only ever add time).
    passes = [eng.step_seconds(compiled, paths) for _ in range(cfg.step_passes)]
    s = min(passes, key=np.median)
    rec(**base, engine=name, metric="step_median_s", value=float(np.median(s)))
    rec(**base, engine=name, metric="step_mean_s", value=float(np.mean(s)))
    rec(**base, engine=name, metric="step_p99_s", value=float(np.percentile(s, 99)))
  if is_step_peer:
    for b, st in states.items():
      rec(**base, engine=name, metric=f"batch{b}_s",
          value=eng.batch_seconds(compiled, st, cfg.batch_reps))


def equivalence(cfg, rec, data) -> Iterator[str]:
  """Proposition 1 on each study vocabulary: random-walk mask comparison with XGrammar."""
  from experiments.studies.trie import equivalence as eq

  sets = _equivalence_sets(cfg, data)
  for vname in cfg.gen_vocabs:
    vocab = vocabs.load(vname, data)
    for name, values in sets.items():
      r = eq.random_walks(vocab, values, cfg.equivalence_walks, cfg.seed)
      for metric, value in r.items():
        rec(vocab=vname, set=name, k=len(values), engine="trie-vs-xgrammar", metric=metric,
            value=value)
      yield f"{vname} {name} equivalence"


def dispatch_sweep(cfg, rec, vocab) -> Iterator[str]:
  """Warm compile CPU time of the trie vs the project's XGrammar choice path at small K.

  The smallest K where the trie compiles faster is the ``auto`` dispatch threshold (the trie's
  per-step cost is at or below XGrammar's at every K).
  """
  trie_eng, xgr = engines.TrieEngine(vocab), engines.XGrammarEngine(vocab, "gbnf")
  trie_eng.compile(["warm"])
  xgr.index_seconds()
  for k in cfg.dispatch_k:
    values = enum_sets.tool_names(int(k), seed=cfg.seed)
    for eng in (trie_eng, xgr):
      cpu = []
      for _ in range(cfg.dispatch_repeats):
        c0 = time.process_time()
        eng.compile(values)
        cpu.append(time.process_time() - c0)
      rec(vocab=cfg.main_vocab, set="dispatch", k=int(k), engine=eng.name,
          metric="compile_warm_cpu_s", value=float(np.median(cpu)),
          repeats=[float(x) for x in cpu])
    yield f"dispatch K={k}"
