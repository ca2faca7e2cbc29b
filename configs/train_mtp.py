"""Training run of the MTP head shipped for the embedded SmolLM2-135M-Instruct.

Run:    python -m infernix_jax.train --config=configs/train_mtp.py
Smoke:  python -m infernix_jax.train --config=configs/train_mtp.py:smoke   (CI, < 1 minute)
Override any field: --config.steps=200 --config.draft_vocab=0 --config.workdir=/tmp/mtp
The corpus is configs/corpus.py's (built, or reused from its cache, first).
"""

import ml_collections

from configs import corpus as corpus_config

VARIANTS = ("", "smoke")  # get_config's variants ("": the default)


def base(variant: str = "", drafter: str = "mtp", eval_drafter: str = "") -> (
    ml_collections.ConfigDict):
  """Fields shared by the drafter training runs (`variant` "smoke": the same pipeline at toy
  size on a tiny random target with the embedded model's vocabulary): `drafter` names the
  network kind trained, its run directory and its exported weights file."""
  c = ml_collections.ConfigDict()
  c.drafter = drafter           # network kind trained: mtp | block | dspark
  c.eval_drafter = eval_drafter or drafter  # registered drafter its evaluations draft with
  c.corpus = corpus_config.get_config(variant)  # the teacher-scored corpus (its own fields)
  c.corpus_fraction = 1.0       # train on the first fraction of the corpus
  c.draft_vocab = 8192          # Vd: the head scores the most used target ids (0 = all)
  c.layers = 1                  # drafter depth (block drafter; the MTP head has one layer)
  c.init_from_target = True     # drafter layers start as copies of the target's last layers
  c.k = 4                       # drafts per round trained (and evaluated)
  c.position_weights = (1.0, 1.0, 1.0, 1.0)  # loss weight of each draft position
  c.seed = 0                    # initialisation, batch sampling
  # Optimisation.
  c.steps = 1200
  c.batch_sequences = 4         # sequences per step (one length bucket)
  c.batch_bucket = 128          # bucket width in tokens: a step's sequences are padded to
  # it (each width used compiles the step once)
  c.anchors = 48                # anchors (rounds) sampled per sequence
  c.answer_anchor_share = 0.75  # share of anchors whose drafts are answer tokens (KL + CE;
  # the rest anywhere, KL only)
  c.learning_rate = 1e-3
  c.warmup_steps = 50
  c.final_lr_fraction = 0.1
  c.weight_decay = 0.01
  c.grad_clip = 1.0
  c.ce_weight = 0.2             # weight of CE on the sequence's own token beside the KL
  # Bookkeeping.
  c.log_every = 25
  c.validation_mix = {"json": 6}  # evaluation prompts (constrained ones are evaluated)
  c.eval_every = 600            # acceptance on the validation prompts (0 = never)
  c.eval_lanes = 4
  c.eval_capacity = 1024
  c.eval_max_tokens = 64
  c.checkpoint_every = 100
  c.workdir = f"runs/train_{drafter}"  # orbax checkpoints + history (resumed when present)
  c.export = f"infernix_jax/models/drafters/trained/smollm2-135m-instruct.{drafter}.safetensors"
  if variant == "smoke":
    c.draft_vocab = 512
    c.steps = 4
    c.batch_sequences = 2
    c.batch_bucket = 768          # the corpus's max_len: one shape, one step compile per run
    c.anchors = 8
    c.warmup_steps = 1
    c.log_every = 2
    c.validation_mix = {"json": 1}
    c.eval_every = 4
    c.eval_lanes = 1
    c.eval_max_tokens = 8
    c.checkpoint_every = 2
    c.workdir += "_smoke"
    c.export = ""
  elif variant:
    raise ValueError(f"unknown variant {variant!r} (use '' or 'smoke')")
  return c


def get_config(variant: str = "") -> ml_collections.ConfigDict:
  return base(variant)
