"""Acceptance under constraints: drafters x constraint x masked q x jump-forward x temperature
on the embedded SmolLM2 (study "decode").

  python -m experiments.run --config=configs/acceptance.py            main grid
  python -m experiments.run --config=configs/acceptance.py:k          K sweep
  python -m experiments.run --config=configs/acceptance.py:backend    constraint backends
  python -m experiments.run --config=configs/acceptance.py:trees      token trees vs chains
  python -m experiments.run --config=configs/acceptance.py:flagship --shard=i/6   the table
  python -m experiments.run --config=configs/acceptance.py:smoke      tiny random target (CI)

Workload items come from the validation split of the trained drafters' prompt mix where the
ids line up (JSON schemas, BFCL questions), so no drafter saw them in training.

The flagship table (`:flagship`, 74 cells, `flagship`) is planned, not run yet, at about 3.7 h
on this 2-core CPU in 6 shards of at most 40 min each (54 min at the slowest rate seen). The
estimate: the committed partial run of the table's former design
(docs/results/acceptance_flagship/run/, 3 shards, same target, lanes and 48-token budget) ran
2,528 requests in 6,301 s over its 30 running cells, each cell's closing line giving its
seconds and requests: 2.49 s a request of cell wall clock, engine builds and warm-ups
included (1.92-3.44 s by shard; a least-squares fit over cells gives 2.74 s a request and
-21 s a cell). A flagship cell runs at most 73 requests (grown in batches of 20, 17, 12, 12,
12 until its interval is 0.1 wide, capped at 72; the batch crossing the cap runs whole), so
every cell at its cap takes 74 x 73 x 2.49 s = 3.7 h, and a shard of 13 cells
13 x 73 x 2.49 s = 39 min (13 x 73 x 3.44 s = 54 min). Cells that reach the width stop
earlier. The plan holds on a machine as quiet as the former run's: one check of this design
(n-gram + jump-forward, constrained, T = 0, one item of each workload) on this machine at a
load of 6 took 201 s, 104 s of it XLA compilation and 57 s the 5 requests' timed call.
"""

import ml_collections

# get_config's variants ("": the default)
VARIANTS = ("", "k", "backend", "trees", "flagship", "traces", "smoke")


def base() -> ml_collections.ConfigDict:
  c = ml_collections.ConfigDict()
  c.study = "decode"
  c.title = "Acceptance under constraints"
  c.question = (
      "How many tokens per round does each drafter get accepted under a grammar, and how "
      "much do the constraint, masked q and jump-forward change it?")
  c.description = (
      "Accepted length and acceptance per draft position of every drafter, with the "
      "grammar's constraint on and off, masked q on and off, grammar jump-forward on and off, "
      "greedy and sampled. No published benchmark measures acceptance length under "
      "constraints across drafters; this one does, on the embedded SmolLM2-135M-Instruct.")
  c.model = ""                    # "" = embedded SmolLM2; "tiny-random"; or a GGUF path
  c.workloads = ("jsonschema:Github_easy", "bfcl:simple_python", "regex:dates")
  c.per_workload = 4              # prompts per workload (per batch, with a target width)
  c.target_width = 0.0            # > 0: a cell grows in batches of new prompts until the 95%
  c.max_units = 0                 #   interval of its accepted length is this wide, or it has
                                  #   run max_units requests (0 = fixed per_workload)
  c.trace_first = 0               # per cell, the first N requests keep a per-token trace
  c.split = "validation"          # items in the drafters' validation split ("" = any)
  c.seed = 0
  c.max_tokens = 48               # 0 = each item's own budget
  c.lanes = 4
  c.capacity = 1024
  c.bridge = "stages"
  c.masked_q = True
  c.constrained = True
  c.backend = "auto"
  c.temperature = 0.0
  c.drafter = ml_collections.ConfigDict(dict(
      name="ngram",         # a registered drafter (infernix_jax.drafters.names())
      options={"k": 4},     # drafter options; each drafter takes its own fields of them
      jump_forward=False))  # grammar jump-forward drafts (around "none": the jump drafter)
  c.plugins = ()                  # modules imported first (they register drafters, backends)
  c.publish_dir = "docs/results/acceptance"
  return c


def get_config(variant: str = "") -> ml_collections.ConfigDict:
  c = base()
  g = c.grid = ml_collections.ConfigDict()
  if variant in ("", "main"):
    g.drafter = ml_collections.ConfigDict()
    g.drafter.name = ("none", "ngram", "mtp", "dflash", "dflash2")
    g.drafter.jump_forward = (False, True)
    g.masked_q = (True, False)
    g.constrained = (True, False)
    g.temperature = (0.0, 0.7)
  elif variant == "k":
    c.publish_dir = "docs/results/acceptance_k"
    c.title = "Acceptance under constraints: draft length K"
    c.question = (
        "How does the draft length K change accepted length and acceptance by draft "
        "position under constraints?")
    g.drafter = ml_collections.ConfigDict()
    g.drafter.name = ("ngram", "mtp", "dflash")
    g.drafter.options = ml_collections.ConfigDict()
    g.drafter.options.k = (2, 4, 8)
    c.drafter.jump_forward = True
  elif variant == "backend":
    c.publish_dir = "docs/results/acceptance_backend"
    c.title = "Acceptance under constraints: constraint backends"
    c.question = (
        "Does the constraint backend (xgrammar, llguidance or auto) change acceptance or "
        "speed?")
    c.workloads = ("jsonschema:Github_easy", "regex:dates")
    c.drafter.jump_forward = True
    g.drafter = ml_collections.ConfigDict()
    g.drafter.name = ("ngram", "mtp")
    g.backend = ("xgrammar", "llguidance")
  elif variant == "trees":
    c.publish_dir = "docs/results/acceptance_trees"
    c.title = "Acceptance under constraints: token trees against chains"
    c.question = (
        "At an equal verify budget (a chain of 7 drafts or a tree of 7 nodes), how much "
        "longer are the accepted paths of token trees under a grammar?")
    c.drafter.jump_forward = True
    c.drafter.options = {"k": 7, "tree": False}
    g.drafter = ml_collections.ConfigDict()
    g.drafter.name = ("ngram", "suffix")
    g.drafter.options = ml_collections.ConfigDict()
    g.drafter.options.tree = (False, True)
    g.constrained = (True, False)
    g.temperature = (0.0, 0.7)
  elif variant == "flagship":
    flagship(c)
  elif variant == "traces":
    # What speculation did, token by token: n-gram + jump-forward against jump-forward alone
    # on the same prompts, every request traced (pages linked from the summary).
    c.publish_dir = "docs/results/acceptance_traces"
    c.title = "Acceptance under constraints: per-token traces"
    c.question = (
        "Where, token by token, do n-gram drafts and grammar jump-forward get accepted or "
        "corrected under each workload's constraint?")
    c.per_workload = 2
    c.trace_first = 6  # every request of a cell
    c.drafter.jump_forward = True
    g.drafter = ml_collections.ConfigDict()
    g.drafter.name = ("none", "ngram")
  elif variant == "smoke":
    c.model = "tiny-random"
    c.workloads = ("regex:dates",)
    c.per_workload = 2
    c.split = ""
    c.max_tokens = 6
    c.lanes = 2
    c.capacity = 256
    c.drafter.options.weights = "random"  # trained drafters untrained on the random target
    c.drafter.jump_forward = True
    c.trace_first = 1
    c.target_width = 0.001  # unreachable: each cell grows by one batch to its cap
    c.max_units = 4
    c.publish_dir = ""
    g.constrained = (True, False)
  else:
    raise ValueError(f"unknown variant {variant!r}: main, {', '.join(VARIANTS[1:])}")
  return c


# The flagship table. Its design, and the time plan that sized it:
#
# Cells (`flagship_cells`): 74, a union of sub-grids (`c.grids`) with no cell that repeats
# another or changes nothing:
#   main table, 54 cells: every drafter that drafts (FLAGSHIP_DRAFTERS), as a chain and, where
#     its options have a `tree` field, as a tree of K nodes (the same verify budget as a chain
#     of K), constrained and free, T = 0 and 0.7, K = 4; jump-forward on under the constraint
#     (without one it forces nothing) and masked q on (it matters only for sampled q); plus
#     grammar jump-forward alone ("none" + jump) under the constraint. Plain decoding has
#     accepted length 1 by definition: no cell.
#   jump-forward off, 7 cells: each drafter's chain, constrained, T = 0.
#   masked q off, 5 cells: the drafters whose q is sampled at T = 0.7 under the constraint
#     (dflash2 always samples; eagle3 and dspark with sampling=true, masked q on and off, so
#     their sampled drafting also stands against their greedy row of the main table).
#   K = 2 and 8, 4 cells, and trees against chains at a verify budget of 7, 4 cells: for
#     FLAGSHIP_BEST, constrained, T = 0.
# Sampled drafts are drawn at the target's temperature (0.7).
# Batches: 4 items a workload while each lasts (8 regex items, 5 GBNF items): 20, 17, 12, ...
# Time plan: the module docstring (74 cells x at most 73 requests x 2.49 s = 3.7 h).
FLAGSHIP_SHARDS = 6  # shards of 12-13 cells, at most 39 min each at the committed rate
# Drafters of the registry that draft but are not rows: "jump" is jump-forward alone (the
# none + jump row), "draft" a separate draft model (none is shipped for the embedded target;
# unset, it drafts with the target itself).
NOT_IN_TABLE = ("jump", "draft")
# The two drafters of the K and tree-budget ablations: the longest accepted lengths under the
# constraint at T = 0, K = 4 in the committed results: EAGLE-3 (2.00, tree 2.05, in
# docs/results/drafters.md; 1.93 [1.88, 1.99] as a tree with jump-forward in the partial
# flagship) and n-gram + jump-forward (1.83 in drafters.md; 1.71 in acceptance/summary.md,
# ahead of MTP + jump-forward's 1.68), which is also the baseline every drafter is compared to.
FLAGSHIP_BEST = ("eagle3", "ngram")
FLAGSHIP_WORKLOADS = (
    "jsonschema:Github_easy",  # JSON Schema (JSONSchemaBench), validation split
    "bfcl:simple_python",      # BFCL tool calls, validation split
    "regex:dates",             # a regex (ISO 8601 dates)
    "labels:clinc150",         # choice over 150 intents (not in the drafters' training mix)
    "gbnf:list")               # a GBNF grammar (a bulleted list)


def flagship_drafters() -> tuple[tuple[str, ...], tuple[str, ...], dict[str, bool]]:
  """(drafters of the table, those that grow trees, drafter -> whether it samples q only
  with sampling=true) from the drafter registry: every drafter that drafts (but
  NOT_IN_TABLE), trees where its options have a `tree` field, sampled q where they have
  `sampling` (a switch) or `temperature` without one (always sampled), as the decode study's
  `samples` decides."""
  from infernix_jax import drafters as registry

  names = tuple(n for n in registry.names()
                if registry.entry(n).drafts and n not in NOT_IN_TABLE)
  trees = tuple(n for n in names if "tree" in registry.fields(n))
  sampled = {n: "sampling" in registry.fields(n) for n in names
             if "sampling" in registry.fields(n) or "temperature" in registry.fields(n)}
  return names, trees, sampled


def _grid(axes: dict) -> ml_collections.ConfigDict:
  """A grid from {dotted field: values}."""
  g = ml_collections.ConfigDict()
  for path, values in axes.items():
    *parents, leaf = path.split(".")
    node = g
    for part in parents:
      if part not in node:
        node[part] = ml_collections.ConfigDict()
      node = node[part]
    node[leaf] = tuple(values)
  return g


def flagship(c: ml_collections.ConfigDict) -> None:
  """The flagship table's fields and sub-grids on `c` (see the comment above)."""
  names, trees, sampled = flagship_drafters()
  c.publish_dir = "docs/results/acceptance_flagship"
  c.title = "Acceptance under constraints: the table"
  c.question = (
      "Under a grammar, which drafter gets the most tokens accepted per round, by how much "
      "over n-gram + jump-forward, and what do the constraint, jump-forward, trees, masked q "
      "and K change?")
  c.description = (
      "Accepted length (tokens per round) of every drafter that drafts, as a chain and as a "
      "token tree, under each workload's constraint and without it, greedy and at T = 0.7, "
      "K = 4, with ablations of jump-forward, masked q, K and the tree's verify budget; on "
      "the embedded SmolLM2-135M-Instruct. No published benchmark measures accepted length "
      "under constraints across drafters; this one does, with paired intervals.")
  c.reading = "drafters"          # the summary reads the table (experiments/studies/drafter_table.py)
  c.featured = True               # the results index lists it first
  c.shards = FLAGSHIP_SHARDS      # planned --shard=i/n split (the time plan above)
  c.workloads = FLAGSHIP_WORKLOADS
  c.per_workload = 4              # items a workload per batch (while it lasts)
  c.target_width = 0.1            # accepted length's 95% interval: +-0.05
  c.max_units = 72                # requests a cell at most (the batch crossing it runs whole)
  c.drafter.jump_forward = False
  c.drafter.options = {"k": 4, "tree": False, "sampling": False, "temperature": 1.0}
  del c.grid
  g = c.grids = ml_collections.ConfigDict()
  hot = {"temperature": (0.7,), "drafter.options.temperature": (0.7,)}  # drafts at T too
  for t_name, t in (("t0", {"temperature": (0.0,)}), ("t07", hot)):
    for constrained in (True, False):
      where = {**t, "constrained": (constrained,), "drafter.jump_forward": (constrained,)}
      side = "constrained" if constrained else "free"
      chains = names + (("none",) if constrained else ())  # none + jump: jump-forward alone
      g[f"main_{t_name}_{side}_chain"] = _grid({**where, "drafter.name": chains})
      g[f"main_{t_name}_{side}_tree"] = _grid({**where, "drafter.name": trees,
                                               "drafter.options.tree": (True,)})
  g.jump_off = _grid({"drafter.name": names})  # constrained, T = 0, jump-forward off
  switch = tuple(n for n in names if sampled.get(n))
  always = tuple(n for n in names if n in sampled and not sampled[n])
  on = {**hot, "drafter.jump_forward": (True,), "masked_q": (True, False)}
  if always:
    g.masked_q = _grid({**on, "drafter.name": always})
  if switch:
    g.masked_q_sampled = _grid({**on, "drafter.name": switch,
                                "drafter.options.sampling": (True,)})
  best = {"drafter.name": FLAGSHIP_BEST, "drafter.jump_forward": (True,)}
  g.k = _grid({**best, "drafter.options.k": (2, 4, 8)})
  g.trees_budget7 = _grid({**best, "drafter.name": tuple(n for n in FLAGSHIP_BEST if n in trees),
                           "drafter.options.k": (7,), "drafter.options.tree": (False, True)})
