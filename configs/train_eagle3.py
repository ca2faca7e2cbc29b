"""Training run of the EAGLE-3 head shipped for the embedded SmolLM2-135M-Instruct.

Run:    python -m infernix_jax.train.eagle3 --config=configs/train_eagle3.py
Smoke:  python -m infernix_jax.train.eagle3 --config=configs/train_eagle3.py:smoke   (CI)
Override any field: --config.steps=200 --config.draft_vocab=4096 --config.corpus_fraction=0.1
The corpus is configs/corpus.py's (built, or reused from its cache, first).
"""

import ml_collections

from configs import corpus as corpus_config

VARIANTS = ("", "smoke")


def get_config(variant: str = "") -> ml_collections.ConfigDict:
  if variant not in VARIANTS:
    raise ValueError(f"unknown variant {variant!r} (use '' or 'smoke')")
  c = ml_collections.ConfigDict()
  c.corpus = corpus_config.get_config(variant)  # the teacher-scored corpus (its own fields)
  c.corpus_fraction = 1.0       # train on the first fraction of the corpus (learning curves)
  c.draft_vocab = 8192          # Vd: the most used target ids (reduced draft vocabulary)
  c.k = 4                       # unrolled draft steps trained (the training-time test)
  c.step_weights = (1.0, 0.8, 0.64, 0.51)  # loss weight of each unrolled step
  c.init_from_target = True     # layer from the target's last, LM head from its columns
  c.seed = 0
  c.steps = 1600                # the shipped head: 1000 steps, then resumed to 1600 (a warm
  # restart of the cosine schedule; training_log.json's history.segments records it)
  c.batch_sequences = 4         # sequences per step (one length bucket)
  c.batch_bucket = 128          # bucket width in tokens: a step's sequences are padded to
  # it (each width used compiles the step once)
  c.anchors = 48                # anchors per sequence
  c.answer_anchor_share = 0.75  # share of anchors whose drafts are answer tokens
  c.learning_rate = 1e-3
  c.warmup_steps = 50
  c.final_lr_fraction = 0.1
  c.weight_decay = 0.01
  c.grad_clip = 1.0
  c.ce_weight = 0.2             # CE of the true answer token beside the teacher's distribution
  c.log_every = 25
  c.checkpoint_every = 100
  c.eval_at_end = True          # accepted length through the engine on validation prompts
  c.validation_mix = {"json": 6}
  c.eval_lanes = 4
  c.eval_capacity = 1024
  c.eval_max_tokens = 64
  c.workdir = "runs/train_eagle3"  # orbax checkpoints + history (resumed when present)
  c.export = "infernix_jax/models/drafters/trained/smollm2-135m-instruct.eagle3"
  if variant == "smoke":
    c.draft_vocab = 512
    c.steps = 4
    c.batch_sequences = 2
    c.batch_bucket = 768          # the corpus's max_len: one shape, one step compile per run
    c.anchors = 8
    c.warmup_steps = 1
    c.log_every = 2
    c.checkpoint_every = 2
    c.validation_mix = {"json": 1}
    c.eval_lanes = 1
    c.eval_max_tokens = 8
    c.workdir = c.workdir + "_smoke"
    c.export = ""
  return c
