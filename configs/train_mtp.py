"""Training run of the MTP head shipped for the embedded SmolLM2-135M-Instruct.

Run:    python -m infernix_jax.train --config=configs/train_mtp.py
Smoke:  python -m infernix_jax.train --config=configs/train_mtp.py:smoke   (CI, < 1 minute)
Override any field: --config.steps=200 --config.workdir=/tmp/mtp
"""

import ml_collections

VARIANTS = ("", "smoke")  # get_config's variants ("": the default)


def base() -> ml_collections.ConfigDict:
  """Fields shared by the drafter training runs."""
  c = ml_collections.ConfigDict()
  c.drafter = "mtp"             # network kind trained: mtp | block
  c.eval_drafter = "mtp"        # registered drafter its evaluations draft with (takes weights)
  c.model = ""                  # target GGUF file ("" = the embedded SmolLM2-135M-Instruct;
  # "tiny-random" = a random 2-layer model with its vocabulary, for smoke runs)
  c.layers = 1                  # drafter depth (block drafter; the MTP head has one layer)
  c.init_from_target = True     # drafter layers start as copies of the target's last layers
  c.k = 4                       # drafts per round trained (and evaluated)
  c.seed = 0                    # corpus sampling, initialisation, batch sampling
  # Self-distillation corpus: prompts per family of the training mix (prompts.FAMILIES).
  c.train_mix = {"json": 48, "tool": 24, "label": 12, "chat": 48}
  c.validation_mix = {"json": 6}  # evaluation prompts (constrained ones are evaluated)
  c.corpus_lanes = 4            # engine lanes generating the corpus (more do not help on CPU)
  c.corpus_max_tokens = 0       # cap on each prompt's generation budget (0 = the mix's own)
  c.cache_dir = ""              # corpus cache ("" = $INFERNIX_JAX_CACHE or ~/.cache/infernix_jax)
  # Optimisation.
  c.steps = 300
  c.batch_sequences = 4         # sequences per step (one length bucket)
  c.anchors = 48                # anchors (rounds) sampled per sequence
  c.prompt_anchor_share = 0.5   # share of anchors in the prompt (KL only; the rest in the
  # target's own continuation, KL + CE)
  c.learning_rate = 1e-3
  c.warmup_steps = 40
  c.final_lr_fraction = 0.1
  c.weight_decay = 0.01
  c.grad_clip = 1.0
  c.ce_weight = 0.5             # weight of CE on the sequence's own token beside the KL
  # Bookkeeping.
  c.log_every = 10
  c.eval_every = 150            # acceptance on the validation prompts (0 = never)
  c.eval_lanes = 4
  c.eval_capacity = 1024
  c.eval_max_tokens = 48
  c.checkpoint_every = 50
  c.workdir = "runs/train_mtp"  # orbax checkpoints + history (resumed when present)
  c.export = "infernix_jax/models/drafters/trained/smollm2-135m-instruct.mtp.safetensors"
  return c


def smoke(c: ml_collections.ConfigDict) -> ml_collections.ConfigDict:
  """The same pipeline at toy size: a tiny random target with the embedded model's
  vocabulary, a few prompts, a few steps, one evaluation (CI runs it)."""
  c.model = "tiny-random"
  c.train_mix = {"json": 2, "label": 2}
  c.corpus_max_tokens = 8
  c.validation_mix = {"json": 1}
  c.corpus_lanes = 4
  c.steps = 4
  c.batch_sequences = 2
  c.anchors = 8
  c.warmup_steps = 1
  c.log_every = 2
  c.eval_every = 4
  c.eval_lanes = 1
  c.eval_max_tokens = 8
  c.checkpoint_every = 2
  c.workdir = c.workdir + "_smoke"
  c.export = ""
  return c


def get_config(variant: str = "") -> ml_collections.ConfigDict:
  c = base()
  if variant == "smoke":
    return smoke(c)
  if variant:
    raise ValueError(f"unknown variant {variant!r} (use '' or 'smoke')")
  return c
