"""JSONSchemaBench ("Generating Structured Outputs from Language Models: Benchmark and
Studies", arXiv:2501.10868) and its MaskBench on this engine (study "jsonschemabench").

  python -m experiments.run --config=configs/jsonschemabench.py --publish   (about 30 min)
  python -m experiments.run --config=configs/jsonschemabench.py:smoke       (CI, seconds)

One cell per (table, subset, backend); a killed run resumes at the first cell not done.
"""

import ml_collections

VARIANTS = ("", "smoke")  # get_config's variants ("": the default)


def get_config(variant: str = "") -> ml_collections.ConfigDict:
  c = ml_collections.ConfigDict()
  c.study = "jsonschemabench"
  c.title = "JSONSchemaBench: coverage, compliance, efficiency and per-mask time"
  c.question = (
      "How many real-world JSON schemas do our backends compile strictly, do their matchers "
      "judge MaskBench instances right, and what do grammar compile, TTFT, TPOT and one token "
      "mask cost, beside the JSONSchemaBench paper and MaskBench?")
  c.description = (
      "A reproduction of JSONSchemaBench (arXiv:2501.10868) on this engine: coverage and "
      "compliance per subset for our xgrammar path (exact checker), llguidance and auto; "
      "grammar compile time, TTFT and TPOT through the engine with the constraint on and off; "
      "and MaskBench's time per token mask with the Qwen3 vocabulary, each table beside the "
      "published figures.")
  c.table = "coverage"                   # coverage | efficiency | mask (the grid sweeps it)
  c.subset = "Github_easy"               # a JSONSchemaBench subset (the grid sweeps it)
  c.backend = "xgrammar"                 # xgrammar | llguidance | auto | off (efficiency only)
  c.data_dir = "../shared/data"          # shared data folder, repo-relative
  c.coverage_schemas = 0                 # seeded sample of schemas per subset (0 = all)
  c.walk_budget = 5000                   # serialization search steps per instance
  c.efficiency_schemas = 12              # prompts per subset through the engine
  c.model = ""                           # "" = embedded SmolLM2-135M-Instruct; "tiny-random"
  c.max_tokens = 48                      # output tokens per efficiency request at most
  c.capacity = 1024                      # KV positions of the engine's lane
  c.mask_schemas = 40                    # sampled schemas per subset for per-mask times
  c.mask_tokenizer = "tokenizers/qwen3/tokenizer.json"  # under data_dir: MaskBench's big V
  c.seed = 0                             # sampling seed (schemas, prompts)
  c.publish_dir = "docs/results/jsonschemabench"
  g = c.grid = ml_collections.ConfigDict()
  g.table = ("coverage", "efficiency", "mask")
  g.subset = ("Github_trivial", "Github_easy", "Github_medium", "Glaiveai2K")
  g.backend = ("xgrammar", "llguidance", "auto", "off")
  if variant == "smoke":
    c.coverage_schemas = 2
    c.efficiency_schemas = 1
    c.mask_schemas = 2
    c.seed = 2                           # a draw whose schemas have MaskBench instances
    c.model = "tiny-random"
    c.max_tokens = 4
    c.capacity = 512
    c.publish_dir = ""
    g.subset = ("Github_trivial",)
  elif variant:
    raise ValueError(f"unknown variant {variant!r}: smoke")
  return c
