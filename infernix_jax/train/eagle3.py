"""An EAGLE-3 training run from a config, on the teacher-scored corpus.

  python -m infernix_jax.train.eagle3 --config=configs/train_eagle3.py          # shipped head
  python -m infernix_jax.train.eagle3 --config=configs/train_eagle3.py:smoke    # CI-sized

Steps: build (or reuse) the scored corpus of `c.corpus` (configs/corpus.py's fields: the
target's tapped features and top-J distributions, no generation); choose the draft
vocabulary, the `draft_vocab` target ids the corpus uses most (its tokens and the target's
most probable next tokens); train the head with optax on `objectives.eagle3_loss` (the
training-time test over K unrolled steps, step losses weighted by `step_weights`); keep
resumable orbax checkpoints in `workdir`; measure accepted length through the engine on the
constrained validation prompts; export the head in the public EAGLE-3 layout (float16)
with the config and the training log beside it.

Batches: S sequences of one length bucket, A anchors each, `answer_anchor_share` of them in
the answer (where drafting happens) and the rest in the prompt; the sampler's randomness is
a function of (seed, step), so a resumed run draws the batches the uninterrupted one would
have. `corpus_fraction` < 1 trains on the first part of the corpus (learning curves).
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np

from infernix_jax.progress import Progress, format_seconds
from infernix_jax.train import corpus, objectives, prompts, teacher_corpus
from infernix_jax.train.loop import (Checkpoints, _optax, _optimizer, load_scored,
                                    with_params)


def make_head(c, cfg, model, vocab_ids: np.ndarray, taps):
  """A fresh `Eagle3Net`; with `init_from_target` its layer starts from the target's last
  layer (reading the hidden half of its input), fc passes the highest feature through, and
  its LM head holds the target's head columns of the draft vocabulary."""
  from flax import nnx

  from infernix_jax.models import unrolled
  from infernix_jax.models.drafters.eagle3 import Eagle3Net
  net = Eagle3Net(cfg, taps, len(vocab_ids), rngs=nnx.Rngs(c.seed))
  net.d2t[...] = jnp.asarray(vocab_ids - np.arange(len(vocab_ids)), jnp.int32)
  if c.init_from_target:
    dt, d = cfg.jnp_dtype, cfg.dim
    stacked = (model.layers.stacked_params(cfg) if unrolled.layout_of(model) == "unrolled"
               else model.layers.params())
    last = {k: np.asarray(v[-1], np.float32) for k, v in stacked.items()}
    for name in net.names:
      if name in ("q", "k", "v"):
        w = np.zeros(getattr(net, name)[...].shape[1:], np.float32)
        w[d:] = last[name]
      elif name == "hidden_norm":
        w = last["attn_norm"]
      elif name == "input_norm":
        w = np.ones((d,), np.float32)
      else:
        w = last[name]
      getattr(net, name)[...] = jnp.asarray(w, dt)[None]
    fc = np.zeros((d * len(taps), d), np.float32)
    fc[-d:] = np.eye(d)
    net.fc[...] = jnp.asarray(fc, dt)
    net.final_norm[...] = model.final_norm[...].astype(dt)
    head = model.embed[...].T if cfg.tie_embeddings else model.lm_head[...]
    net.lm_head[...] = jnp.take(head, jnp.asarray(vocab_ids), axis=1).astype(dt)
  return net


def _step_fn(c, net_cfg, opt):
  optax = _optax()
  weights = tuple(float(w) for w in c.step_weights)

  def batch_loss(params, embed, t2d, b):
    def one(ids, feats, top_ids, top_logp, n, p_len, anchors, ok):
      return objectives.eagle3_loss(params, net_cfg, embed, t2d, ids, feats, top_ids,
                                    top_logp, n, p_len, anchors, ok, k=c.k,
                                    step_weights=weights, ce_weight=c.ce_weight)
    losses, metrics = jax.vmap(one)(b["ids"], b["features"], b["top_ids"], b["top_logp"], b["n"],
                                    b["p_len"], b["anchors"], b["ok"])
    return losses.mean(), jax.tree.map(lambda m: m.mean(0), metrics)

  @jax.jit
  def step(params, opt_state, embed, t2d, batch):
    (loss, metrics), grads = jax.value_and_grad(batch_loss, has_aux=True)(
        params, embed, t2d, batch)
    updates, opt_state = opt.update(grads, opt_state, params)
    return optax.apply_updates(params, updates), opt_state, loss, metrics

  return step


def check(c) -> None:
  """Checks the config's fields before any work starts (ValueError names the field)."""
  if len(c.step_weights) != c.k:
    raise ValueError(f"config.step_weights has {len(c.step_weights)} entries; it needs one "
                     f"per unrolled step (k={c.k})")
  if not 0 < c.corpus_fraction <= 1:
    raise ValueError(f"config.corpus_fraction={c.corpus_fraction} must be in (0, 1]")
  if not 0 <= c.answer_anchor_share <= 1:
    raise ValueError(f"config.answer_anchor_share={c.answer_anchor_share} must be in [0, 1]")


def evaluate(c, target, net, compiler=None) -> dict:
  """Accepted length (greedy, K = c.k, constrained) of head `net` on the validation prompts."""
  from infernix_jax.runtime.build import EngineSpec, build_engine
  from infernix_jax.train import evaluate as ev
  val = [p for p in prompts.prompt_mix(dict(c.validation_mix), "validation")
         if p.constraint is not None]
  if not val:
    return {}
  spec = EngineSpec(drafter="eagle3", drafter_options={"k": c.k, "weights": net},
                    jump_forward=False, lanes=c.eval_lanes, capacity=c.eval_capacity)
  engine = build_engine(spec, target=target, compiler=compiler).engine
  acc = ev.acceptance(engine, target.tokenizer, val, max_tokens=c.eval_max_tokens, warm=False)
  return {"accepted_length": round(acc.accepted_length, 4),
          "per_position": [round(x, 4) for x in acc.per_position], "rounds": acc.rounds,
          "prompts": len(val)}


def train(c, log=sys.stderr) -> dict:
  """Runs config `c` (configs/train_eagle3.py); returns the training summary."""
  _optax()
  check(c)
  from flax import nnx

  from infernix_jax.models.drafters import eagle3_checkpoint
  t_start = time.perf_counter()
  scored, target, model_id, rows, used_tokens = load_scored(c, log)
  cfg, model = target.cfg, target.model
  taps = tuple(scored.manifest["taps"])
  vocab_ids = teacher_corpus.draft_vocabulary(scored, rows,
                                              min(c.draft_vocab, cfg.vocab_size),
                                              cfg.vocab_size, sorted(target.vocab.eos_ids))
  t2d = np.full((cfg.vocab_size,), -1, np.int32)
  t2d[vocab_ids] = np.arange(len(vocab_ids))
  sampler = teacher_corpus.ScoredSampler(scored, rows, seqs=c.batch_sequences,
                                         anchors=c.anchors, seed=c.seed,
                                         answer_share=c.answer_anchor_share,
                                         arrays=("features", "top_ids", "top_logp"),
                                         bucket=c.batch_bucket)
  net = make_head(c, cfg, model, vocab_ids, taps)
  params = nnx.to_pure_dict(nnx.state(net, nnx.Param))
  embed, t2d_j = model.embed[...], jnp.asarray(t2d)
  opt = _optimizer(c)
  step_fn = _step_fn(c, net.cfg, opt)
  checkpoints = Checkpoints(c.workdir)
  params, opt_state, start_step, history = checkpoints.resume(params, opt.init(params),
                                                              c.steps, log)

  bar = Progress(c.steps, "train eagle3", stream=log, start=start_step)
  window: list[float] = []
  t_loop, seen = time.perf_counter(), 0
  for step in range(start_step, c.steps):
    batch = sampler.batch(step)
    seen += int(batch["n"].sum())
    params, opt_state, loss, metrics = step_fn(params, opt_state, embed, t2d_j, batch)
    loss = float(loss)
    if not np.isfinite(loss):
      raise FloatingPointError(f"training loss became {loss} at step {step}")
    window.append(loss)
    done = step + 1
    if done % c.log_every == 0 or done == c.steps:
      history["loss"].append({"step": done, "loss": round(float(np.mean(window)), 5),
                              "kl": round(float(metrics["kl"]), 5),
                              "coverage": round(float(metrics["coverage"]), 4),
                              "top1": [round(float(x), 4) for x in metrics["top1"]]})
      window = []
    bar.update(done, loss=loss, top1=float(metrics["top1"][0]),
               tok_s=seen / max(time.perf_counter() - t_loop, 1e-9))
    if done % c.checkpoint_every == 0 or done == c.steps:
      checkpoints.save(done, params, opt_state, history)
  bar.close()
  train_seconds = time.perf_counter() - t_loop
  trained = with_params(net, params)
  final = evaluate(c, target, trained) if c.eval_at_end else {}
  if final:
    history["evals"].append({"step": c.steps, **final})
    print(f"train: accepted length {final['accepted_length']:.3f} per position "
          f"{final['per_position']}", file=log, flush=True)
  seconds = round(time.perf_counter() - t_start, 1)
  history["seconds_total"] = round(history.get("seconds_total", 0.0) + seconds, 1)
  checkpoints.write_history(history)  # a later resume adds to seconds_total
  summary = {"drafter": "eagle3", "target": model_id, "k_trained": c.k, "steps": c.steps,
             "taps": list(taps), "draft_vocab": int(len(vocab_ids)),
             "seconds": seconds,  # this invocation (a resumed run: its last segment)
             "seconds_total": history["seconds_total"],  # every segment of the run
             "train_seconds_this_segment": round(train_seconds, 1),
             "device": jax.devices()[0].device_kind,
             "corpus": {"key": scored.manifest["key"], "sequences": len(rows),
                        "tokens": used_tokens, "fraction": c.corpus_fraction,
                        "mix": scored.manifest["mix"]},
             "history": history}
  if c.export:
    out = Path(c.export)
    eagle3_checkpoint.save(out, trained, target_cfg=cfg, target_embed=model.embed[...],
                           target_name=model_id,
                           extra={"steps": c.steps, "draft_vocab": int(len(vocab_ids)),
                                  "corpus_tokens": used_tokens,
                                  "final_eval": final or None})
    (out / "train_config.json").write_text(c.to_json(indent=1) + "\n")
    (out / "training_log.json").write_text(json.dumps(summary, indent=1) + "\n")
    size = sum(p.stat().st_size for p in out.iterdir()) / 1e6
    print(f"train: exported {out} ({size:.1f} MB) after {format_seconds(summary['seconds'])}",
          file=log, flush=True)
  return summary


def main(argv):
  from absl import app
  if len(argv) > 1:
    raise app.UsageError(f"unexpected arguments: {' '.join(argv[1:])}")
  summary = train(_CONFIG.value)
  print(json.dumps({k: v for k, v in summary.items() if k != "history"}, indent=1))


if __name__ == "__main__":
  from absl import app, flags
  from ml_collections import config_flags
  _CONFIG = config_flags.DEFINE_config_file("config", None,
                                            "EAGLE-3 training config (configs/train_eagle3.py)")
  flags.mark_flags_as_required(["config"])
  app.run(main)
