"""Grammar-faithful sampling on a bounded Dyck grammar: how far the local law is from μ*.

A bounded Dyck language is finite, so its token trie (every tokenization of every member)
gives every law exactly from one pass of the target over the trie:
  μ*(y)     ∝ p(y)·p(EOS | y)              (sampling_law="exact-finite"; Doob transform)
  μ_proj(y) = Π_i p(y_i | y<i) / Z(y<i)     (sampling_law="local": renormalized per position)
  onestep: the Doob transform with Φ replaced by its one-step estimate (the legal mass of
           p(· | y)), `ExactFiniteLaw.onestep`
Cells (axes `grammar`, `prompt`) report each law's exact total-variation distance to μ* over
strings, the engine's empirical distance of each law's samples to μ* (with the sampling-noise
floor of as many draws from μ* itself), the cost of exact-finite against local, and the
accepted length of the configured drafter under each law.
"""

from __future__ import annotations

import collections
from pathlib import Path
from typing import Iterator

import numpy as np

from experiments.runner import plots, stats
from experiments.studies.decode import accepted_length

PAPER = ("Nie et al., \"Future Validity is the Missing Statistic: From Impossibility to "
         "Φ-Estimation for Grammar-Faithful Speculative Decoding\" (arXiv:2605.07698): TV gap of "
         "the local law up to 0.996 on Dyck grammars with Qwen3-8B; a one-step Φ estimator cuts "
         "it by 14% (under 1% overhead), exact dynamic programming by 97%.")


LAWS = ("local", "onestep", "exact-finite")


GRAMMAR_NAMES = {
    'root ::= ("(" inner ")"){1,2}\ninner ::= ("(" ")"){0,2}': "parentheses",
    'root ::= ("(" inner ")" | "[" inner "]"){1,2}\ninner ::= ("(" ")" | "[" "]"){0,1}':
        "two bracket kinds",
    'root ::= ("(" inner ")"){1,2}\ninner ::= ("(" ")"){0,1}': "parentheses (small)",
}


def units(c) -> int:
  return len(LAWS) * c.samples


def group(c) -> tuple:
  return (c.grammar,)


def _llm(c, ctx):
  from infernix_jax import LLM

  def make():
    llm = LLM(c.model, drafter=c.drafter, k=c.k, lanes=c.lanes, capacity=256, layout="stacked")
    llm.engine.warmup(laws=True)  # the timed runs sample other laws
    return llm

  return ctx.get("llm", (c.model, c.drafter, c.k, c.lanes), make)


def _local_law(law) -> np.ndarray:
  """log μ_proj of each member node (−inf elsewhere), from the law's node arrays."""
  trie = law.trie
  n = trie.size
  logz = np.full(n, -np.inf)  # log of the legal mass at each node: children + EOS
  for node in range(n):
    kids = list(trie.children[node].values())
    terms = [law.edge[k] for k in kids] + ([law.eos[node]] if trie.member[node] else [])
    logz[node] = np.logaddexp.reduce(terms) if terms else -np.inf
  step = np.zeros(n)  # log of the renormalized edge into each node
  nonroot = np.arange(1, n)
  step[nonroot] = law.edge[nonroot] - logz[trie.parent[nonroot]]
  path = np.zeros(n)
  for d in range(1, int(trie.depth.max(initial=0)) + 1):
    idx = np.flatnonzero(trie.depth == d)
    path[idx] = path[trie.parent[idx]] + step[idx]
  out = np.full(n, -np.inf)
  members = np.flatnonzero(trie.member)
  out[members] = path[members] + law.eos[members] - logz[members]
  return out


def _law_logp(law) -> np.ndarray:
  """log of a Doob-transformed law's member probabilities, token by token from the root (−inf
  off members): a law whose Φ is estimated is not p(y)·p(EOS | y) / Φ(root)."""
  trie = law.trie
  out = np.full(trie.size, -np.inf)
  logp = np.zeros(trie.size)
  for d in range(1, int(trie.depth.max(initial=0)) + 1):
    for node in np.flatnonzero(trie.depth == d):
      parent = int(trie.parent[node])
      tokens, lp, _ = law.next_logprobs(parent)
      logp[node] = logp[parent] + float(lp[list(tokens).index(int(trie.token[node]))])
  for node in np.flatnonzero(trie.member):
    _, _, lp_eos = law.next_logprobs(int(node))
    out[node] = logp[node] + lp_eos
  return out


def _by_string(trie, vocab, logp: np.ndarray) -> dict[bytes, float]:
  out: dict[bytes, float] = collections.defaultdict(float)
  for i in np.flatnonzero(trie.member):
    out[vocab.decode(trie.path(int(i)))] += float(np.exp(logp[i]))
  return dict(out)


def _tv(a: dict, b: dict) -> float:
  return 0.5 * sum(abs(a.get(k, 0.0) - b.get(k, 0.0)) for k in set(a) | set(b))


def _empirical(texts) -> dict:
  counts = collections.Counter(texts)
  return {k: v / len(texts) for k, v in counts.items()}


def run_cell(c, ctx) -> Iterator[dict]:
  import time

  from infernix_jax import constrain as ic
  from infernix_jax import faithful
  from infernix_jax.faithful.law import ExactFiniteLaw
  from infernix_jax.runtime import FinishReason, compile_count

  with compile_count.counting() as warm:
    llm = _llm(c, ctx)
  constraint = ic.OutputConstraint.grammar(c.grammar)
  prepared = llm.prepare(c.prompt, grammar=c.grammar, max_tokens=c.max_tokens)
  prompt_ids = list(prepared.request.prompt_ids)
  t0 = time.perf_counter()
  trie = faithful.build(llm.compiler.compile(constraint).new_session(), llm.vocab,
                        max_nodes=c.max_nodes, name="the Dyck grammar")
  trie_s = time.perf_counter() - t0
  law = ExactFiniteLaw.compute(llm.engine.graphdef, llm.engine.state, llm.cfg, prompt_ids,
                               trie, llm.vocab, c.temperature)
  star = _by_string(trie, llm.vocab, law.path_logp() + law.eos - law.log_phi[0])
  proj = _by_string(trie, llm.vocab, _local_law(law))
  one = law.onestep()
  onestep = _by_string(trie, llm.vocab, _law_logp(one))
  rng = np.random.default_rng(c.seed)
  floor = np.mean([_tv(star, _empirical([llm.vocab.decode(law.sample(rng))
                                         for _ in range(c.samples)])) for _ in range(5)])
  runs = {}
  for name in LAWS:
    asks = [dict(prompt=c.prompt, grammar=c.grammar, max_tokens=c.max_tokens,
                 temperature=c.temperature, seed=c.seed + i, sampling_law=name)
            for i in range(c.samples)]
    with compile_count.counting() as timed:
      t1 = time.perf_counter()
      done = llm.generate_batch(asks)
      wall = time.perf_counter() - t1
    for ask, d in zip(asks, done):
      yield {"kind": "request", "law": name, "seed": ask["seed"], "text": d.text,
             "finish": d.finish_reason,
             "rounds": d.stats["rounds"], "accepted": d.stats["accepted"],
             "drafted": d.stats["drafted"], "tokens": len(d.token_ids)}
    complete = [d for d in done if d.finish_reason == FinishReason.STOP.value]
    runs[name] = {"samples": len(done), "complete": len(complete),
                  "tv_to_star": _tv(star, _empirical([d.text.encode() for d in complete]))
                  if complete else None,
                  "seconds_per_request": wall / len(done), **timed.record(),
                  "accepted_length": accepted_length([d.stats for d in done])}
  top = sorted(star, key=lambda k: -star[k])[:10]
  yield {"kind": "measurement", "nodes": trie.size, "members": int(trie.member.sum()),
         "strings": len(star), "trie_seconds": trie_s, "law_cost": law.cost.to_dict(),
         "tv_exact": _tv(proj, star), "tv_onestep": _tv(onestep, star),
         "noise_floor": float(floor), "runs": runs, **warm.record("warmup_"),
         # The whole μ* over strings (a few dozen): the summary resamples each law's engine
         # samples against it.
         "star": [[k.decode(errors="replace"), p] for k, p in sorted(star.items())],
         "top": [{"text": k.decode(errors="replace"), "star": star[k],
                  "local": proj.get(k, 0.0)} for k in top]}


def engine_tv(star: dict[str, float], texts) -> tuple[float, float, float]:
  """TV distance of the empirical law of `texts` (completed samples) to μ* (`star`: string ->
  probability, every member), with its 95% bootstrap interval over the samples."""
  names = sorted(set(star) | set(texts))
  index = {k: i for i, k in enumerate(names)}
  want = np.array([star.get(k, 0.0) for k in names])
  counts = np.zeros(len(names))
  for t in texts:
    counts[index[t]] += 1
  return stats.bootstrap_counts(counts, lambda k: 0.5 * float(np.abs(want - k / k.sum()).sum()))


def law_intervals(cell_requests: list[dict], measurement: dict) -> dict[str, dict]:
  """Per law: 'tv' (the engine's TV to μ*, resampled over completed samples; the point alone
  where the record lacks the whole μ*) and 'accepted_length' ((accepted drafts + rounds) /
  rounds, resampled over requests), each (point, low, high)."""
  star = dict(map(tuple, measurement["star"])) if "star" in measurement else None
  out = {}
  for law in LAWS:
    rs = [r for r in cell_requests if r["law"] == law]
    done = [r["text"] for r in rs if r["finish"] == "stop"]
    tv = measurement["runs"][law]["tv_to_star"]
    out[law] = {
        "tv": engine_tv(star, done) if star and done else
        (float("nan") if tv is None else tv, float("nan"), float("nan")),
        "accepted_length": stats.bootstrap(rs, accepted_length) if rs else
        (measurement["runs"][law]["accepted_length"], float("nan"), float("nan"))}
  return out


def headline(records, c) -> str:
  """The index's headline: the local law's exact TV distance to μ* (computed, no sampling),
  and the engine's exact-finite samples' TV to μ* with its interval where recorded."""
  meas = [r for r in records if r.get("kind") == "measurement"]
  if not meas:
    return ""
  by_cell: dict = collections.defaultdict(list)
  for r in records:
    if r.get("kind") == "request":
      by_cell[r.get("cell")].append(r)
  worst = max(meas, key=lambda r: r["tv_exact"])
  fin = law_intervals(by_cell.get(worst.get("cell"), []), worst)["exact-finite"]["tv"]
  return (f"the local law is up to {worst['tv_exact']:.3f} in TV from μ* (exact, over "
          f"{len(meas)} grammar/prompt cells); the engine's exact-finite samples there: "
          f"{stats.fmt(fin, 3)}")


def summarize(records, c, out: Path) -> str:
  meas = [r for r in records if r.get("kind") == "measurement"]
  by_cell: dict = collections.defaultdict(list)
  for r in records:
    if r.get("kind") == "request":
      by_cell[r.get("cell")].append(r)
  rows, groups = [], []
  series = {"local (exact)": [], "onestep (exact)": [], "local (engine)": [],
            "onestep (engine)": [], "exact-finite (engine)": [], "noise floor": []}
  bounds = {k: [] for k in series}
  fmt = lambda v: "-" if v is None else f"{v:.3f}"  # noqa: E731
  nan = (float("nan"), float("nan"))
  for r in meas:
    ov = r.get("overrides", {})
    grammar, prompt = ov.get("grammar", c.grammar), ov.get("prompt", c.prompt)
    runs = r["runs"]
    loc, fin = runs["local"], runs["exact-finite"]
    ci = law_intervals(by_cell.get(r.get("cell"), []), r)
    name = GRAMMAR_NAMES.get(grammar, grammar[:30])
    rows.append([name, prompt[:40], r["strings"], r["members"], r["nodes"],
                 fmt(r["tv_exact"]), fmt(r["tv_onestep"]), stats.fmt(ci["local"]["tv"], 3),
                 stats.fmt(ci["onestep"]["tv"], 3), stats.fmt(ci["exact-finite"]["tv"], 3),
                 fmt(r["noise_floor"]),
                 f"{loc['seconds_per_request']:.2f}", f"{fin['seconds_per_request']:.2f}",
                 f"{r['law_cost'].get('seconds', 0.0):.1f}",
                 stats.fmt(ci["local"]["accepted_length"]),
                 stats.fmt(ci["exact-finite"]["accepted_length"])])
    groups.append(f"{name}, {prompt[:18]}")
    for key, value, bound in (("local (exact)", r["tv_exact"], nan),
                              ("onestep (exact)", r["tv_onestep"], nan),
                              ("local (engine)", loc["tv_to_star"], ci["local"]["tv"][1:]),
                              ("onestep (engine)", runs["onestep"]["tv_to_star"],
                               ci["onestep"]["tv"][1:]),
                              ("exact-finite (engine)", fin["tv_to_star"],
                               ci["exact-finite"]["tv"][1:]),
                              ("noise floor", r["noise_floor"], nan)):
      series[key].append(value or 0.0)
      bounds[key].append(bound)
  whole = all("star" in r for r in meas)
  parts = [
      f"The embedded SmolLM2-135M-Instruct, T = {c.temperature}, drafter {c.drafter} (K = "
      f"{c.k}), {c.samples} engine samples per law and cell. TV distances to μ* are over output "
      "strings (every tokenization summed). The exact columns come from the target's "
      "probabilities at every node of the token trie; the engine columns are the empirical "
      "distance of each law's completed samples to μ*, whose floor is the distance of as many "
      "draws from μ* itself. The engine computes Φ once per (constraint, prompt, T) and keeps "
      "it, so its seconds per request spread that one computation (the 'Φ computation' column, "
      "measured apart) over the samples.", "",
      "Intervals: the exact columns are computed, not sampled, so they have none. Accepted "
      "lengths ((accepted drafts + verify rounds) / verify rounds over a law's requests) "
      "carry a 95% percentile "
      "bootstrap interval over requests (2,000 resamples, seed 0; one prompt per cell, each "
      "request its own seed). "
      + ("The engine TVs carry one over completed samples (resampled from their counts "
         "against the recorded μ*)." if whole else
         "The engine TVs are points alone: resampling them needs the whole μ* in the cell's "
         "record, which this run kept only as its 10 most probable strings (runs from now on "
         "record it); the noise floor is their reference."), "",
      "Grammars: " + "; ".join(f"{v}: `{k}`".replace("\n", " ") for k, v in
                               GRAMMAR_NAMES.items()) + ".", "",
      plots.table(["grammar", "prompt", "strings", "tokenizations", "trie nodes",
                   "TV local (exact)", "TV onestep (exact)", "TV local (engine)",
                   "TV onestep (engine)", "TV exact-finite (engine)", "noise floor",
                   "s/request local", "s/request exact-finite", "Φ computation s",
                   "accepted length local", "accepted length exact-finite"], rows,
                  "llrrrrrrrrrrrrrr"), ""]
  if rows:
    name = plots.grouped_bars(out / "faithful_tv.png", groups, series, intervals=bounds,
                              title="Distance to μ* on bounded Dyck grammars",
                              ylabel="TV distance")
    parts += [f"![TV distance]({name})", ""]
    for r in meas[:1]:
      parts += ["Most probable strings of the first cell under μ* and their probability under "
                "the local law:", "",
                plots.table(["string", "μ*", "μ_proj"],
                            [[f"`{t['text']}`", f"{t['star']:.3f}", f"{t['local']:.3f}"]
                             for t in r["top"]], "lrr"), ""]
    gaps = [(r["tv_exact"], r["tv_onestep"]) for r in meas if r["tv_exact"] > 0]
    if gaps:
      cut = float(np.mean([1 - o / e for e, o in gaps]))
      verb = "cuts" if cut >= 0 else "raises"
      parts += [f"Across the cells, onestep {verb} the local law's exact distance to μ* by "
                f"{abs(100 * cut):.0f}% on average (cell by cell: "
                + ", ".join(f"{e:.3f} -> {o:.3f}" for e, o in gaps)
                + "); exact-finite's empirical distance is at the sampling-noise floor.", ""]
  parts += [f"The paper's numbers: {PAPER} Ours differ in model (SmolLM2-135M, not Qwen3-8B), "
            "in the languages (small bounded Dyck grammars whose every tokenization is "
            "enumerated) and in method: here μ* is exact, from one pass of the target over the "
            "token trie."]
  return "\n".join(parts)
