"""The published figures the jsonschemabench study is set beside, transcribed from their
sources (a figure the source does not give is None and prints as "not found here").

Sources (the study's summary cites them with these addresses):
  PAPER       arXiv:2501.10868v2, https://arxiv.org/html/2501.10868v2
              Table 4 (section 5.2): declared coverage, empirical coverage and compliance rate
              per dataset and framework (Llama-3.2-1B-Instruct for the open-source engines).
              Table 2 (section 4.2): GCT, TTFT, TPOT with llama.cpp as inference engine
              (Llama-3.1-8B-Instruct, one A100, batch 1, medians). Table 3: the same with Hugging
              Face Transformers, the only engine XGrammar ran on (no LM-only row there).
  MASKBENCH   https://github.com/guidance-ai/jsonschemabench/tree/main/maskbench (README.md,
              the generated results table): time between masks (TBM) per engine, over the
              tokens of the valid instances of ~10k schemas, single-threaded; llguidance 0.6.7,
              xgrammar 0.1.10. The table prints no unit; its magnitudes (LLGuidance's 47 mean,
              llguidance's documented ~50 us per mask) read as microseconds.
"""

from __future__ import annotations

PAPER_URL = "https://arxiv.org/html/2501.10868v2"
MASKBENCH_URL = "https://github.com/guidance-ai/jsonschemabench/tree/main/maskbench"

# Our subset names -> the paper's dataset names. The paper left Github_trivial out of its
# experiments ("too easy", section 3.1), so no coverage or efficiency figure exists for it.
DATASET = {"Github_trivial": None, "Github_easy": "GitHub Easy",
           "Github_medium": "GitHub Medium", "Glaiveai2K": "GlaiveAI"}

FRAMEWORKS = ("Guidance", "XGrammar", "Llamacpp", "Outlines", "OpenAI", "Gemini")

# Table 4: dataset -> framework -> (declared, empirical, compliance rate). Gemini is omitted
# there for datasets where it supports < 1% (GitHub Medium).
COVERAGE = {
    "GlaiveAI": {"LM only": (1.00, 0.90, 0.90), "Guidance": (0.98, 0.96, 0.98),
                 "Llamacpp": (0.98, 0.95, 0.97), "Outlines": (0.99, 0.95, 0.96),
                 "XGrammar": (1.00, 0.93, 0.93), "OpenAI": (0.89, 0.89, 1.00),
                 "Gemini": (0.86, 0.86, 1.00)},
    "GitHub Easy": {"LM only": (1.00, 0.65, 0.65), "Guidance": (0.90, 0.86, 0.96),
                    "Llamacpp": (0.85, 0.75, 0.88), "Outlines": (0.86, 0.59, 0.83),
                    "XGrammar": (0.91, 0.79, 0.87), "OpenAI": (0.30, 0.29, 0.97),
                    "Gemini": (0.08, 0.07, 0.88)},
    "GitHub Medium": {"LM only": (1.00, 0.38, 0.38), "Guidance": (0.79, 0.69, 0.87),
                      "Llamacpp": (0.77, 0.57, 0.74), "Outlines": (0.72, 0.29, 0.40),
                      "XGrammar": (0.79, 0.52, 0.66), "OpenAI": (0.13, 0.12, 0.92),
                      "Gemini": None},
}

# Table 2 (llama.cpp engine): dataset -> framework -> (GCT s, TTFT s, TPOT ms), medians.
EFFICIENCY_LLAMACPP = {
    "GlaiveAI": {"LM only": (None, 0.10, 15.40), "Guidance": (0.00, 0.24, 6.37),
                 "Llamacpp": (0.05, 0.20, 29.98), "Outlines": (3.48, 3.65, 30.33)},
    "GitHub Easy": {"LM only": (None, 0.10, 15.83), "Guidance": (0.00, 0.34, 7.44),
                    "Llamacpp": (0.05, 0.18, 27.22), "Outlines": (3.71, 3.97, 39.78)},
    "GitHub Medium": {"LM only": (None, 0.20, 16.68), "Guidance": (0.01, 0.54, 7.57),
                      "Llamacpp": (0.06, 0.30, 29.08), "Outlines": (8.05, 8.38, 46.57)},
}

# Table 3 (Hugging Face Transformers engine): the GlaiveAI XGrammar row is not in the text
# we could read.
EFFICIENCY_HF = {
    "GlaiveAI": {"Guidance": (0.01, 0.36, 36.92), "XGrammar": None},
    "GitHub Easy": {"Guidance": (0.01, 0.37, 42.03), "XGrammar": (0.12, 0.30, 66.78)},
    "GitHub Medium": {"Guidance": (0.01, 0.55, 44.21), "XGrammar": (0.20, 0.48, 65.51)},
}

# MaskBench README: engine -> (TBM mean, TBM p99) in microseconds, over all ~10k schemas
# (the README gives no per-subset figures).
MASK = {"LLGuidance": (47, 460), "XGrammar (default)": (292, 4936), "llama.cpp": (14523, 57317),
        "XGrammar.cpp": (64805, 615009), "Outlines": (59420, 358041)}
# ... and its grammar compile time (TTFM) mean and p50, microseconds.
TTFM = {"LLGuidance": (1611, 987), "XGrammar (default)": (4137527, 535498)}


def cell(value, digits: int = 2) -> str:
  """A published figure for a table ("not found here" where the source gives none)."""
  if value is None:
    return "not found here"
  return f"{value:,.{digits}f}" if isinstance(value, float) else f"{value:,}"
