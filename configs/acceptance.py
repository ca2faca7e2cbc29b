"""Acceptance under constraints: drafters x constraint x masked q x jump-forward x temperature
on the embedded SmolLM2 (study "decode").

  python -m experiments.run --config=configs/acceptance.py            main grid
  python -m experiments.run --config=configs/acceptance.py:k          K sweep
  python -m experiments.run --config=configs/acceptance.py:backend    constraint backends
  python -m experiments.run --config=configs/acceptance.py:trees      token trees vs chains
  python -m experiments.run --config=configs/acceptance.py:smoke      tiny random target (CI)

Workload items come from the validation split of the trained drafters' prompt mix where the
ids line up (JSON schemas, BFCL questions), so no drafter saw them in training.
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
    # The full acceptance table: every drafter with a shipped draft model, each axis, each
    # K, cells sized to +-0.05 on accepted length (or 96 requests): 672 cells, 294 that run
    # (the rest repeat another). Days on a CPU: shard it (--shard=i/25 gives 10-13 running
    # cells a shard, or a SLURM array of 25) and merge the shards with experiments.report.
    c.publish_dir = "docs/results/acceptance_flagship"
    c.title = "Acceptance under constraints: the full table"
    c.target_width = 0.1
    c.max_units = 96
    c.per_workload = 8
    c.drafter.options = {"k": 4, "tree": False}
    g.drafter = ml_collections.ConfigDict()
    g.drafter.name = ("none", "ngram", "suffix", "mtp", "eagle3", "dflash", "dflash2")
    g.drafter.jump_forward = (False, True)
    g.drafter.options = ml_collections.ConfigDict()
    g.drafter.options.k = (2, 4, 8)
    g.drafter.options.tree = (False, True)  # skipped for drafters that propose chains only
    g.masked_q = (True, False)
    g.constrained = (True, False)
    g.temperature = (0.0, 0.7)
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
