"""Does faithfulness cost speed? Accepted length of each drafter under exact-finite vs local.

`sampling_law="exact-finite"` samples μ*(y) ∝ p(y)·[y ∈ L] over a finite language (greedy: its
most probable member); the engine verifies drafts against p*, the target with a per-position
bias towards Φ. A drafter proposes tokens of the target's own distribution (n-gram lookup,
trained heads) or of the grammar (jump-forward), so the bias may lower its acceptance. Each
cell (axes `constraint`, `drafter`, `temperature`) decodes the same requests (prompts and
seeds) under both laws and reports accepted length (tokens per target verify round),
acceptance rate and decode tokens/s. exact-finite computes Φ once per (constraint, prompt,
T) and the engine caches it: an untimed warm pass fills the cache and records that one-off
cost apart from the timed decode passes.
"""

from __future__ import annotations

import dataclasses
import json
import statistics
import time
from collections.abc import Iterator, Sequence
from pathlib import Path

from experiments.runner import plots, stats
from experiments.studies.decode import accepted_length

LAWS = ("local", "exact-finite")


@dataclasses.dataclass(frozen=True)
class Constraint:
  """A finite constraint of the study and its prompts.

  Attributes:
    kind: "choice", "grammar" or "json_schema" (an `OutputConstraint` constructor).
    source: the choices (tuple), GBNF text or schema text.
    prompts: user messages; greedy cells use the first `greedy_prompts`, sampled cells the
      first `sampled_prompts` (each with `seeds` seeds).
    tolerance: exact-finite sampling's `law_tolerance`: 0 computes Φ over the whole token
      trie (μ* exactly); > 0 expands it best first to that certified total variation of μ*
      (a language whose every tokenization would exceed the trie's budgets).
    about: a short description for the summary.
  """

  kind: str
  source: object
  prompts: tuple[str, ...]
  tolerance: float
  about: str

  def spec(self):
    from infernix_jax import constrain as ic
    if self.kind == "choice":
      return ic.OutputConstraint.choice(list(self.source))
    if self.kind == "grammar":
      return ic.OutputConstraint.grammar(self.source)
    return ic.OutputConstraint.json_schema(self.source, max_whitespace=0)


def _tools() -> tuple[str, ...]:
  from experiments.studies.trie.enum_sets import tool_names
  return tuple(tool_names(30))


_TOOL_REQUESTS = (
    "Please upload the quarterly invoice to our billing system.",
    "Delete the old project called Apollo.",
    "Fetch the latest message Google sent us about the launch.",
    "Send the new user their account details.",
    "Search our Salesforce repositories for the billing module.",
    "Update the topic of the #general channel.",
    "Delete the pending Microsoft payment.",
    "List every document in the shared drive.",
)


def _tool_prompt(request: str) -> str:
  return ("Pick the tool that handles the request.\nTools: " + ", ".join(_tools())
          + f"\nRequest: {request}\nAnswer with the tool name only.")


# Balanced parentheses, depth <= 2 (configs/faithful.py DYCK): 12 strings, 780 token
# sequences, 1,400 trie nodes on SmolLM2's vocabulary.
DYCK = 'root ::= ("(" inner ")"){1,2}\ninner ::= ("(" ")"){0,2}'

UNITS = ("celsius", "fahrenheit", "kelvin")
LEVELS = ("low", "medium", "high", "critical")
SCHEMA = json.dumps({"type": "object",
                     "properties": {"unit": {"enum": list(UNITS)},
                                    "level": {"enum": list(LEVELS)}},
                     "required": ["unit", "level"], "additionalProperties": False})

_READINGS = (
    "Reactor core at 900 kelvin, alarms sounding.",
    "Living room thermostat shows 21 degrees Celsius.",
    "Freezer reads -5 Fahrenheit, slightly warmer than usual.",
    "Engine oil at 130 Celsius and rising fast.",
    "Greenhouse at 75 Fahrenheit, all normal.",
    "Liquid nitrogen line at 77 kelvin, stable.",
    "Server rack exhaust at 60 Celsius, fans at full speed.",
    "Outdoor sensor: 101 Fahrenheit, heat warning issued.",
)


def _reading_prompt(reading: str) -> str:
  return (f"Classify the sensor reading as JSON with \"unit\" ({', '.join(UNITS)}) and "
          f"\"level\" ({', '.join(LEVELS)}).\nReading: {reading}")


CONSTRAINTS = {
    "tools": lambda: Constraint(
        "choice", _tools(), tuple(_tool_prompt(r) for r in _TOOL_REQUESTS), 0.01,
        "choice over 30 synthetic tool names (`enum_sets.tool_names(30)`, listed in the "
        "prompt; over 100,000 trie nodes counting every tokenization, so T = 1 samples best "
        "first within a certified TV of 0.01 of μ*)"),
    "dyck": lambda: Constraint(
        "grammar", DYCK,
        ("Write a short sequence of balanced parentheses.",
         "Write a deeply nested sequence of brackets.",
         "Give an example of a balanced parenthesis string.",
         "Output two groups of matched parentheses.",
         "Show a Dyck word of depth two.",
         "Write balanced parentheses and nothing else.",
         "Produce a well-formed parenthesis expression.",
         "Type some properly closed parentheses."), 0.0,
        "bounded Dyck grammar (`configs/faithful.py` DYCK: 12 strings, 1,400 trie nodes)"),
    "json": lambda: Constraint(
        "json_schema", SCHEMA, tuple(_reading_prompt(r) for r in _READINGS), 0.01,
        "enum-only JSON object {unit: 3 values, level: 4 values}, max_whitespace = 0 (over "
        "100,000 trie nodes: T = 1 samples within a certified TV of 0.01 of μ*)"),
    "colors": lambda: Constraint(
        "choice", ("dark red", "light green", "navy blue", "bright yellow"),
        ("Name a colour for a warning sign.", "Name a colour for the sea."), 0.05,
        "choice over 4 two-word colours (smoke)"),
}

# Registry name -> (drafter, jump_forward) of `LLM`.
DRAFTERS = {
    "ngram": ("ngram", False),
    "jump": ("jump", True),
    "ngram+jump": ("ngram", True),
    "mtp": ("mtp", False),
    "dflash": ("dflash", False),
}


def requests(c) -> list[tuple[int, int]]:
  """The (prompt index, seed) pairs of a cell: one per prompt when greedy, `seeds` per prompt
  when sampling."""
  if c.temperature <= 0:
    return [(i, c.seed) for i in range(c.greedy_prompts)]
  return [(i, c.seed + s) for i in range(c.sampled_prompts) for s in range(c.seeds)]


def units(c) -> int:
  return len(LAWS) * len(requests(c))


def group(c) -> tuple:
  return (c.drafter,)


def _llm(c, ctx):
  """The cell's LLM (one per drafter); every LLM of the process shares one law cache: a law
  depends on the target, the constraint, the prompt and T only, and each drafter's LLM loads
  the same target, so Φ is computed once per (constraint, prompt, T) for all drafters."""
  from infernix_jax import LLM
  from infernix_jax.faithful import LawCache
  laws = ctx.get("laws", (c.model,), lambda: LawCache(size=256))
  name, jump = DRAFTERS[c.drafter]

  def make():
    llm = LLM(c.model, drafter=name, k=c.k, jump_forward=jump, lanes=c.lanes,
              capacity=c.capacity, layout="stacked")
    llm.engine.warmup(laws=True)
    return llm

  llm = ctx.get("llm", (c.model, c.drafter, c.k, c.lanes, c.capacity), make)
  llm.engine.law_cache = laws  # shared by every drafter's engine
  return llm


def run_cell(c, ctx) -> Iterator[dict]:
  """The cell's requests per law, and a measurement: per law the timed pass's wall and CPU
  seconds and XLA compilations (`xla_compiles`, `xla_compile_s`), with those of the engine's
  build, warm-up and untimed pass (`warmup_xla_compiles`, `warmup_xla_compile_s`)."""
  from infernix_jax.runtime import compile_count

  con = CONSTRAINTS[c.constraint]()
  spec = con.spec()
  asks = requests(c)

  def prepare(law: str, max_tokens: int):
    return [llm.prepare(con.prompts[i], constraint=spec, max_tokens=max_tokens,
                        temperature=c.temperature, seed=seed, sampling_law=law,
                        law_tolerance=con.tolerance if law != "local" and c.temperature > 0
                        else 0.0).request for i, seed in asks]

  # Warm pass (untimed): the same requests once, so the timed pass below compiles nothing
  # beyond `warmup()` and finds Φ in the law cache; the reports of the requests that computed
  # Φ (cache misses) give its one-off cost.
  phi = []
  with compile_count.counting() as warm:
    llm = _llm(c, ctx)
    for law in LAWS:
      done = llm.engine.generate(prepare(law, c.max_tokens))
      if law == "local":
        continue
      for (i, _), r in zip(asks, done):
        rep = r.constraint
        if rep is not None and rep.law_seconds > 0:
          phi.append({"prompt": i, "seconds": rep.law_seconds, "forwards": rep.law_forwards,
                      "tokens": rep.law_tokens, "nodes": rep.law_trie_nodes,
                      "tv_bound": rep.law_tv_bound, "stop": rep.law_stop})
  timed = {}
  for law in LAWS:
    reqs = prepare(law, c.max_tokens)
    with compile_count.counting() as compiles:
      t0, cpu0 = time.perf_counter(), time.process_time()
      done = llm.engine.generate(reqs)
      wall, cpu = time.perf_counter() - t0, time.process_time() - cpu0
    for (i, seed), r in zip(asks, done):
      rep = r.constraint
      yield {"kind": "request", "law": law, "prompt": i, "seed": seed, "text": r.text,
             "finish": r.finish_reason.value, "tokens": len(r.token_ids),
             "rounds": len(r.rounds), "drafted": r.drafted, "accepted": r.accepted,
             "jump_forward_tokens": rep.jump_forward_tokens if rep else 0,
             "tv_bound": rep.law_tv_bound if rep else 0.0,
             "error": r.error}
    timed[law] = {"wall_seconds": wall, "cpu_seconds": cpu,
                  "tokens": sum(len(r.token_ids) for r in done), **compiles.record()}
  yield {"kind": "measurement", "timed": timed, "phi": phi, **warm.record("warmup_")}


# --- summary -------------------------------------------------------------------------------
def acceptance_rate(reqs: Sequence[dict]) -> float:
  """Accepted drafts / drafted tokens over requests (0 when nothing was drafted)."""
  drafted = sum(r["drafted"] for r in reqs)
  return sum(r["accepted"] for r in reqs) / drafted if drafted else 0.0


NO_INTERVAL = (float("nan"),) * 3


def cells(records: Sequence[dict], c) -> list[dict]:
  """One dict per (constraint, drafter, temperature) cell: per law its accepted length,
  acceptance rate (each also as `<name>_ci`, (point, low, high) with a 95% bootstrap interval
  over prompts: a prompt's seeds are drawn together), tokens/s, completion; the exact/local
  ratio (`ratio_ci`: paired over prompts, both laws' requests of a drawn prompt together,
  from `pairs`, the (exact-finite, local) request lists per prompt); the paired share of
  requests with the same output; and the one-off Φ costs recorded in the cell."""
  by_cell: dict[str, dict] = {}
  for r in records:
    if r.get("kind") not in ("request", "measurement"):
      continue
    ov = r.get("overrides", {})
    key = r["cell"]
    cell = by_cell.setdefault(key, {
        "constraint": ov.get("constraint", c.constraint), "drafter": ov.get("drafter", c.drafter),
        "temperature": float(ov.get("temperature", c.temperature)),
        "requests": {law: [] for law in LAWS}, "timed": {}, "phi": []})
    if r["kind"] == "request":
      cell["requests"][r["law"]].append(r)
    else:
      cell["timed"], cell["phi"] = r["timed"], r["phi"]
  out = []
  for cell in by_cell.values():
    laws = {}
    for law in LAWS:
      reqs = cell["requests"][law]
      t = cell["timed"].get(law, {})
      units = stats.by_unit(reqs, "prompt")
      laws[law] = {"accepted_length": accepted_length(reqs),
                   "acceptance_rate": acceptance_rate(reqs),
                   "accepted_length_ci": stats.bootstrap(units, accepted_length)
                   if units else NO_INTERVAL,
                   "acceptance_rate_ci": stats.bootstrap(units, acceptance_rate)
                   if units else NO_INTERVAL,
                   "tokens_per_second": t["tokens"] / t["wall_seconds"]
                   if t.get("wall_seconds") else 0.0,
                   "seconds_per_request": t["wall_seconds"] / len(reqs)
                   if reqs and t.get("wall_seconds") else 0.0,
                   "complete": sum(r["finish"] == "stop" for r in reqs), "n": len(reqs)}
    loc, fin = laws["local"]["accepted_length"], laws["exact-finite"]["accepted_length"]
    pairs = {(r["prompt"], r["seed"]): r["text"] for r in cell["requests"]["local"]}
    same = [pairs.get((r["prompt"], r["seed"])) == r["text"]
            for r in cell["requests"]["exact-finite"]]
    pairs = stats.paired(cell["requests"]["exact-finite"], cell["requests"]["local"], "prompt")
    out.append({**{k: cell[k] for k in ("constraint", "drafter", "temperature", "phi")},
                "laws": laws, "ratio": fin / loc if loc else 0.0, "pairs": pairs,
                "ratio_ci": stats.paired_ratio(pairs, accepted_length) if pairs and loc
                else NO_INTERVAL,
                "same_output": sum(same) / len(same) if same else 0.0})
  order = {d: i for i, d in enumerate(DRAFTERS)}
  out.sort(key=lambda x: (x["constraint"], x["temperature"], order.get(x["drafter"], 99)))
  return out


def phi_costs(rows: Sequence[dict]) -> dict[tuple[str, float], list[dict]]:
  """The Φ computations per (constraint, temperature), one per prompt (the first cell that
  computed it; the law cache serves every later drafter)."""
  out: dict[tuple[str, float], dict[int, dict]] = {}
  for row in rows:
    mine = out.setdefault((row["constraint"], row["temperature"]), {})
    for p in row["phi"]:
      mine.setdefault(p["prompt"], p)
  return {k: [v[i] for i in sorted(v)] for k, v in out.items()}


def request_seconds(rows: Sequence[dict], constraint: str, temperature: float) -> float:
  """Median over drafters of an exact-finite request's decode seconds (0 when unmeasured)."""
  secs = [r["laws"]["exact-finite"]["seconds_per_request"] for r in rows
          if r["constraint"] == constraint and r["temperature"] == temperature
          and r["laws"]["exact-finite"]["seconds_per_request"] > 0]
  return statistics.median(secs) if secs else 0.0


def fmt(v: float, digits: int = 2) -> str:
  return f"{v:.{digits}f}"


def headline(records, c) -> str:
  """The index's headline: exact-finite / local accepted length pooled over every (cell,
  prompt) pair."""
  pooled = [p for row in cells(records, c) if row["ratio"] > 0 for p in row["pairs"]]
  if not pooled:
    return ""
  ratio = stats.paired_ratio(pooled, accepted_length)
  return (f"exact-finite / local accepted length {stats.fmt(ratio)} (paired over "
          f"{len(pooled)} cell prompts)")


def summarize(records, c, out: Path) -> str:
  rows = cells(records, c)
  costs = phi_costs(rows)
  phi_col = {}
  for key, ps in costs.items():
    if ps:
      phi_col[key] = (statistics.median(p["seconds"] for p in ps), len(ps))
  table_rows, groups = [], []
  series = {"local": [], "exact-finite": []}
  bounds = {"local": [], "exact-finite": []}
  for row in rows:
    loc, fin = row["laws"]["local"], row["laws"]["exact-finite"]
    med = phi_col.get((row["constraint"], row["temperature"]))
    table_rows.append([
        row["constraint"], row["drafter"], fmt(row["temperature"], 0), loc["n"],
        stats.fmt(loc["accepted_length_ci"]), stats.fmt(fin["accepted_length_ci"]),
        stats.fmt(row["ratio_ci"]) if row["ratio"] else fmt(row["ratio"]),
        stats.fmt(loc["acceptance_rate_ci"]), stats.fmt(fin["acceptance_rate_ci"]),
        fmt(loc["tokens_per_second"], 1), fmt(fin["tokens_per_second"], 1),
        fmt(fin["tokens_per_second"] / loc["tokens_per_second"])
        if loc["tokens_per_second"] else "-",
        f"{100 * row['same_output']:.0f}%",
        f"{loc['complete']}/{fin['complete']}",
        f"{med[0]:.1f}" if med else "-"])
    groups.append(f"{row['constraint']} {row['drafter']} T={row['temperature']:g}")
    for law in series:
      series[law].append(row["laws"][law]["accepted_length"])
      bounds[law].append(row["laws"][law]["accepted_length_ci"][1:])
  parts = [
      (f"The embedded SmolLM2-135M-Instruct, K = {c.k}, {c.lanes} lanes, max_tokens = "
       f"{c.max_tokens}. Greedy cells decode {c.greedy_prompts} prompts; sampled cells (T = 1) "
       f"{c.sampled_prompts} prompts x {c.seeds} seeds. Both laws decode the same requests "
       "(prompt, seed), so every comparison is paired. Accepted length = tokens per target "
       "verify round, (accepted drafts + rounds) / rounds over the cell's requests; acceptance "
       "rate = accepted / drafted; tokens/s = output tokens / wall seconds of the timed "
       "`engine.generate` call of all the cell's requests (prefill included; every shape "
       "compiled and Φ cached by an untimed warm pass of the same requests, so neither is in "
       "it). 'Φ s' is the median one-off cost per prompt of computing exact-finite's law for "
       "that (constraint, T), recorded in the warm pass of the first drafter and shared by "
       "every drafter after it (the law depends on the target, constraint, prompt and T "
       "only). The 2 CPU cores were shared with another job during the run: compare tokens/s "
       "within a row (the two laws run back to back), not across rows. Accepted lengths do "
       "not depend on timing. Outputs are short (3-30 tokens) and prefill is included, so a "
       "law whose outputs are shorter shows fewer tokens/s at the same cost per round."),
      "",
      ("Intervals: 95% percentile bootstrap over prompts (2,000 resamples, seed 0): a "
       "prompt's requests (its seeds, at T = 1) are drawn together and the accepted length "
       "and acceptance rate are recomputed as ratios over the drawn requests; the ratio "
       "resamples prompts with both laws' requests at once (paired). Tokens/s comes from one "
       "timed call per law and cell, so it has no interval."),
      "",
      "Constraints: " + "; ".join(f"**{k}**: {CONSTRAINTS[k]().about}"
                                  for k in dict.fromkeys(r["constraint"] for r in rows)) + ".",
      ("Drafters: ngram (prompt lookup, n <= 3), jump (grammar jump-forward alone: forced "
       "tokens only), ngram+jump (jump-forward drafts where the grammar forces tokens, n-gram "
       "elsewhere), mtp and dflash (the trained drafters shipped for the embedded model, "
       "without jump-forward)."), "",
      plots.table(["constraint", "drafter", "T", "requests", "acc. length local",
                   "acc. length exact-finite", "ratio", "acc. rate local",
                   "acc. rate exact-finite", "tok/s local", "tok/s exact-finite",
                   "tok/s ratio", "same output", "complete (local/exact)", "Φ s (one-off)"],
                  table_rows, "lllrrrrrrrrrrrr"), ""]
  if costs:
    cost_rows = []
    for (name, t), ps in sorted(costs.items()):
      if not ps:
        continue
      secs = [p["seconds"] for p in ps]
      per_request = request_seconds(rows, name, t)
      cost_rows.append([
          name, fmt(t, 0), len(ps), fmt(statistics.median(secs), 1),
          f"{min(secs):.1f}-{max(secs):.1f}", fmt(sum(secs), 1),
          int(statistics.median(p["nodes"] for p in ps)),
          int(statistics.median(p["forwards"] for p in ps)),
          f"{max(p['tv_bound'] for p in ps):.4f}" if t > 0 else "- (argmax exact)",
          ", ".join(sorted({p["stop"] for p in ps})),
          fmt(per_request) if per_request else "-",
          fmt(statistics.median(secs) / per_request, 0) if per_request else "-"])
    parts += [("One-off Φ cost of exact-finite per (constraint, T), one computation per "
               "prompt (greedy: best-first search until the argmax is certified; T = 1: the "
               "whole trie when the constraint's tolerance is 0, else best first until μ* "
               "restricted to the members found is within the certified TV bound shown), "
               "against the decode time of one exact-finite request (the cell's timed wall "
               "seconds / its requests, median over drafters):"), "",
              plots.table(["constraint", "T", "prompts", "median s", "range s", "total s",
                           "median trie nodes", "median target calls", "max TV bound",
                           "stop", "decode s/request", "Φ / request"], cost_rows,
                          "lrrrrrrrrlrr"), ""]
  if rows:
    name = plots.grouped_bars(out / "faithful_acceptance.png", groups, series,
                              intervals=bounds,
                              title="Accepted length (tokens per verify round), K = "
                                    f"{c.k}, 95% over prompts", ylabel="accepted length")
    parts += [f"![accepted length]({name})", ""]
    parts.append(answer(rows, costs))
  return "\n".join(parts)


def answer(rows: Sequence[dict], costs: dict) -> str:
  """The study's answer in numbers: the exact/local ratios of accepted length (overall, per
  temperature, per drafter) and of tokens/s, and the one-off Φ cost in request decode times."""
  rows = [r for r in rows if r["ratio"] > 0]
  if not rows:
    return "No cell has both laws measured."
  def med(xs) -> float:
    return statistics.median(xs) if xs else 0.0

  def where(r) -> str:
    return f"{r['constraint']}/{r['drafter']}/T={r['temperature']:g}"

  def lengths(d: str, law: str) -> float:
    return med([r["laws"][law]["accepted_length"] for r in rows if r["drafter"] == d])

  ratios = [r["ratio"] for r in rows]
  worst = min(rows, key=lambda r: r["ratio"])
  best = max(rows, key=lambda r: r["ratio"])
  temps = sorted({r["temperature"] for r in rows})
  drafters = list(dict.fromkeys(r["drafter"] for r in rows))
  text = (f"Answer: over {len(rows)} (constraint, drafter, T) cells, exact-finite's accepted "
          f"length is {med(ratios):.2f}x local's at the median (range {worst['ratio']:.2f}x at "
          f"{where(worst)} to {best['ratio']:.2f}x at {where(best)}; below 0.995x in "
          f"{sum(x < 0.995 for x in ratios)} cells, above 1.005x in "
          f"{sum(x > 1.005 for x in ratios)}); by temperature: "
          + ", ".join(f"T = {t:g} {med([r['ratio'] for r in rows if r['temperature'] == t]):.2f}x"
                      for t in temps)
          + "; by constraint: "
          + ", ".join(f"{k} {med([r['ratio'] for r in rows if r['constraint'] == k]):.2f}x"
                      for k in dict.fromkeys(r["constraint"] for r in rows))
          + "; by drafter (median accepted length local -> exact-finite): "
          + ", ".join(f"{d} {med([r['ratio'] for r in rows if r['drafter'] == d]):.2f}x "
                      f"({lengths(d, 'local'):.2f} -> {lengths(d, 'exact-finite'):.2f})"
                      for d in drafters) + ".")
  pooled = [p for r in rows for p in r["pairs"]]
  if pooled:
    text += (" Pooled over every (cell, prompt) pair, the ratio is "
             f"{stats.fmt(stats.paired_ratio(pooled, accepted_length))} (paired bootstrap "
             "95% interval, whole (cell, prompt) pairs resampled).")
  speed = [r["laws"]["exact-finite"]["tokens_per_second"] / r["laws"]["local"]["tokens_per_second"]
           for r in rows if r["laws"]["local"]["tokens_per_second"] > 0]
  if speed:
    text += (f" Decode tokens/s under exact-finite is {med(speed):.2f}x local's at the median "
             f"(range {min(speed):.2f}x-{max(speed):.2f}x).")
  secs = [p["seconds"] for ps in costs.values() for p in ps]
  if secs:
    per = [med([p["seconds"] for p in ps]) / request_seconds(rows, name, t)
           for (name, t), ps in costs.items() if ps and request_seconds(rows, name, t) > 0]
    text += (f" The one-off Φ computation costs {min(secs):.1f}-{max(secs):.1f} s per "
             f"(constraint, prompt, T) (median {med(secs):.1f} s)")
    if per:
      text += (f", {min(per):.0f}-{max(per):.0f}x the decode time of one request, paid once "
               "per prompt and reused by every later request with it")
    text += "."
  return text
