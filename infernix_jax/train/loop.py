"""A training run of the MTP head or the block drafter from a config: the teacher-scored
corpus, distillation, evaluation, checkpoints, export.

  python -m infernix_jax.train --config=configs/train_mtp.py          # the shipped run
  python -m infernix_jax.train --config=configs/train_mtp.py:smoke    # CI's minute-long run

Steps: build (or reuse) the scored corpus of `c.corpus` (configs/corpus.py's fields), whose
stored last-layer hidden states are the drafters' inputs and, through the target's frozen LM
head, their teacher; choose a draft vocabulary by token frequency when `c.draft_vocab` asks
for one; train the drafter's parameters with optax (the target's embedding, LM head and
final norm stay frozen and shared) on the objective of `objectives`, draft positions weighted
by `c.position_weights`; evaluate acceptance through the engine on validation prompts every
`eval_every` steps; keep resumable orbax checkpoints (parameters, optimizer state) in
`workdir`; finally export float16 weights (with the draft vocabulary) beside the resolved
config and a training summary.

Batches: S sequences of one length bucket, A anchors per sequence, `answer_anchor_share` of
them drafting answer tokens (KL + CE) and the rest anywhere (KL only); the sampler's
randomness is a function of (seed, step), so a resumed run draws the batches the
uninterrupted one would have.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np

from infernix_jax._extras import missing
from infernix_jax.progress import Progress, format_seconds
from infernix_jax.train import corpus, objectives, prompts, teacher_corpus


def check(c) -> None:
  """Checks the config's drafter fields before any work starts.

  Raises:
    ValueError: `drafter` is not a network kind, or `eval_drafter` is not a registered drafter
      that takes trained weights (the message names the field).
  """
  from infernix_jax.errors import ParameterError
  from infernix_jax.models.drafters import weights as dw
  from infernix_jax.runtime import drafters
  if c.drafter not in dw.KINDS:
    raise ValueError(f"config.drafter={c.drafter!r} must be one of {', '.join(dw.KINDS)}")
  try:
    takes_weights = "weights" in drafters.fields(c.eval_drafter)
  except ParameterError as e:
    raise ValueError(f"config.eval_drafter: {e.message}") from None
  if not takes_weights:
    raise ValueError(f"config.eval_drafter={c.eval_drafter!r} takes no trained weights (its "
                     f"options: {', '.join(drafters.fields(c.eval_drafter)) or 'none'}); "
                     f"name a drafter with a weights option")
  if len(c.position_weights) != c.k:
    raise ValueError(f"config.position_weights has {len(c.position_weights)} entries; it "
                     f"needs one per draft position (k={c.k})")
  if not 0 < c.corpus_fraction <= 1:
    raise ValueError(f"config.corpus_fraction={c.corpus_fraction} must be in (0, 1]")
  if not 0 <= c.answer_anchor_share <= 1:
    raise ValueError(f"config.answer_anchor_share={c.answer_anchor_share} must be in [0, 1]")
  if c.draft_vocab < 0:
    raise ValueError(f"config.draft_vocab={c.draft_vocab} must be 0 (the full vocabulary) "
                     f"or a size")


def make_net(c, cfg, model):
  """A fresh drafter network; its layers start from the target's last layers if asked."""
  from flax import nnx

  from infernix_jax.models import unrolled
  from infernix_jax.models.drafters import weights as dw
  check(c)
  # The layer dims are the target's at the drafter's depth (MTP is always one layer).
  net = dw.new_network(c.drafter, cfg.replace(num_layers=c.layers), cfg.dim,
                       rngs=nnx.Rngs(c.seed))
  if c.init_from_target:
    stacked = (model.layers.stacked_params(cfg) if unrolled.layout_of(model) == "unrolled"
               else model.layers.params())
    depth = net.cfg.num_layers
    for name in net.layers.names:
      getattr(net.layers, name)[...] = jnp.asarray(stacked[name][-depth:], net.cfg.jnp_dtype)
  return net


def _optax():
  """optax, or an error naming the train extra, which declares it."""
  try:
    import optax
  except ImportError as e:
    raise missing("optax", "train", "drafter training") from e
  return optax


def _optimizer(c):
  optax = _optax()
  schedule = optax.warmup_cosine_decay_schedule(0.0, c.learning_rate, c.warmup_steps,
                                                max(c.steps, c.warmup_steps + 1),
                                                c.learning_rate * c.final_lr_fraction)
  return optax.chain(optax.clip_by_global_norm(c.grad_clip),
                     optax.adamw(schedule, weight_decay=c.weight_decay))


def _step_fn(c, net_cfg, opt):
  optax = _optax()
  weights = tuple(float(w) for w in c.position_weights)

  def batch_loss(params, head, final_norm, b):
    def one(ids, hidden, n, p_len, anchors, ok):
      return objectives.distill_loss(c.drafter, params, net_cfg, head, final_norm, ids,
                                     hidden, n, p_len, anchors, ok, k=c.k,
                                     ce_weight=c.ce_weight, position_weights=weights)
    losses, metrics = jax.vmap(one)(b["ids"], b["last"], b["n"], b["p_len"], b["anchors"],
                                    b["ok"])
    return losses.mean(), jax.tree.map(lambda m: m.mean(0), metrics)

  @jax.jit
  def step(params, opt_state, head, final_norm, batch):
    (loss, metrics), grads = jax.value_and_grad(batch_loss, has_aux=True)(
        params, head, final_norm, batch)
    updates, opt_state = opt.update(grads, opt_state, params)
    return optax.apply_updates(params, updates), opt_state, loss, metrics

  return step


class Checkpoints:
  """A run's resumable state in `workdir`: orbax checkpoints of the parameters and optimizer
  state (the last two kept) and history.json (losses, evaluations, resumed segments)."""

  def __init__(self, workdir):
    import orbax.checkpoint as ocp
    self.ocp, self.workdir = ocp, Path(workdir).absolute()
    self.manager = ocp.CheckpointManager(self.workdir / "checkpoints",
                                         options=ocp.CheckpointManagerOptions(max_to_keep=2))

  def resume(self, params, opt_state, steps: int, log=sys.stderr):
    """(params, opt_state, start step, history): the latest checkpoint's, or the given ones
    at step 0. A resumed run with more steps stretches the cosine schedule from there on;
    history.segments records it, so the summary says how the weights were produced."""
    history = {"loss": [], "evals": []}
    latest = self.manager.latest_step()
    if latest is None:
      return params, opt_state, 0, history
    restored = self.manager.restore(latest, args=self.ocp.args.StandardRestore(
        {"params": params, "opt_state": opt_state}))
    if (self.workdir / "history.json").exists():
      history = json.loads((self.workdir / "history.json").read_text())
    history.setdefault("segments", []).append({"from_step": latest, "to_step": steps})
    print(f"train: resumed from step {latest} in {self.workdir}", file=log, flush=True)
    return restored["params"], restored["opt_state"], latest, history

  def save(self, step: int, params, opt_state, history) -> None:
    self.manager.save(step, args=self.ocp.args.StandardSave(
        {"params": params, "opt_state": opt_state}))
    self.manager.wait_until_finished()
    self.write_history(history)

  def write_history(self, history) -> None:
    (self.workdir / "history.json").write_text(json.dumps(history))


def load_scored(c, log=sys.stderr):
  """(scored corpus, target, model id, rows trained on, their tokens) of a config with a
  `corpus` block and `corpus_fraction` (the first fraction of the sequences)."""
  scored = teacher_corpus.build(c.corpus, log=log)
  target, model_id = corpus.load_target(c.corpus.model or None)
  if scored.manifest["model"] != model_id:
    raise ValueError(f"the scored corpus belongs to {scored.manifest['model']}, not "
                     f"{model_id}")
  rows = list(range(max(1, round(len(scored) * c.corpus_fraction))))
  return scored, target, model_id, rows, sum(scored.index[i]["length"] for i in rows)


def with_params(net, params):
  """A copy of the network module holding `params` (a pure dict)."""
  from flax import nnx
  graphdef, state = nnx.split(net)
  nnx.replace_by_pure_dict(state, params)
  return nnx.merge(graphdef, state)


def evaluate(c, target, net, val_prompts, *, compiler=None) -> dict:
  """Accepted length at c.k, T = 0, on the constrained validation prompts: the network `net`
  drafts through the drafter `c.eval_drafter` (a `runtime.build.Target` is the target)."""
  from infernix_jax.runtime.build import EngineSpec, build_engine
  from infernix_jax.train import evaluate as ev
  check(c)
  spec = EngineSpec(drafter=c.eval_drafter, drafter_options={"k": c.k, "weights": net},
                    jump_forward=False, lanes=c.eval_lanes, capacity=c.eval_capacity)
  engine = build_engine(spec, target=target, compiler=compiler).engine
  acc = ev.acceptance(engine, target.tokenizer, val_prompts, max_tokens=c.eval_max_tokens, warm=False)
  return {"accepted_length": round(acc.accepted_length, 4),
          "per_position": [round(x, 4) for x in acc.per_position], "rounds": acc.rounds}


def train(c, log=sys.stderr) -> dict:
  """Runs the config `c` (see configs/train_mtp.py); returns the training summary."""
  _optax()  # before the corpus is built, not minutes into the run
  check(c)
  from flax import nnx

  from infernix_jax import constrain as ic
  from infernix_jax.models.drafters import weights as dw
  from infernix_jax.models.drafters.weights import head_for
  t_start = time.perf_counter()
  scored, target, model_id, rows, used_tokens = load_scored(c, log)
  cfg, model = target.cfg, target.model
  compiler = ic.ConstraintCompiler(target.vocab)  # every evaluation shares it
  val_mix = [p for p in prompts.prompt_mix(dict(c.validation_mix), "validation")
             if p.constraint is not None]
  vocab = (teacher_corpus.draft_vocabulary(scored, rows, min(c.draft_vocab, cfg.vocab_size),
                                           cfg.vocab_size, sorted(target.vocab.eos_ids))
           if c.draft_vocab else None)
  sampler = teacher_corpus.ScoredSampler(scored, rows, seqs=c.batch_sequences,
                                         anchors=c.anchors, seed=c.seed,
                                         answer_share=c.answer_anchor_share, arrays=("last",),
                                         bucket=c.batch_bucket)

  net = make_net(c, cfg, model)
  dw.set_draft_vocab(net, vocab)
  params = nnx.to_pure_dict(nnx.state(net, nnx.Param))
  head = head_for(model, net)
  final_norm = model.final_norm[...]
  opt = _optimizer(c)
  step_fn = _step_fn(c, net.cfg, opt)
  checkpoints = Checkpoints(c.workdir)
  params, opt_state, start_step, history = checkpoints.resume(params, opt.init(params),
                                                              c.steps, log)

  bar = Progress(c.steps, f"train {c.drafter}", stream=log, start=start_step)
  window: list[float] = []
  t_loop, seen = time.perf_counter(), 0
  for step in range(start_step, c.steps):
    batch = sampler.batch(step)
    seen += int(batch["n"].sum())
    params, opt_state, loss, metrics = step_fn(params, opt_state, head, final_norm, batch)
    loss = float(loss)
    if not np.isfinite(loss):
      raise FloatingPointError(f"training loss became {loss} at step {step}")
    window.append(loss)
    done = step + 1
    if done % c.log_every == 0 or done == c.steps:
      history["loss"].append({"step": done, "loss": round(float(np.mean(window)), 5),
                              "kl": round(float(metrics["kl"]), 5),
                              "top1": [round(float(x), 4) for x in metrics["top1"]]})
      window = []
    bar.update(done, loss=loss, top1=float(metrics["top1"][0]),
               tok_s=seen / max(time.perf_counter() - t_loop, 1e-9))
    if c.eval_every and (done % c.eval_every == 0 or done == c.steps) and val_mix:
      result = evaluate(c, target, with_params(net, params), val_mix, compiler=compiler)
      history["evals"].append({"step": done, **result})
      print(f"\ntrain: eval at step {done}: accepted length {result['accepted_length']:.3f} "
            f"per position {result['per_position']}", file=log, flush=True)
    if done % c.checkpoint_every == 0 or done == c.steps:
      checkpoints.save(done, params, opt_state, history)
  bar.close()

  seconds = round(time.perf_counter() - t_start, 1)
  history["seconds_total"] = round(history.get("seconds_total", 0.0) + seconds, 1)
  summary = {"drafter": c.drafter, "target": model_id, "k_trained": c.k, "steps": c.steps,
             "draft_vocab": int(len(vocab)) if vocab is not None else cfg.vocab_size,
             "position_weights": [float(w) for w in c.position_weights],
             "seconds": seconds,  # this invocation (a resumed run: its last segment)
             "seconds_total": history["seconds_total"],  # every segment of the run
             "device": jax.devices()[0].device_kind,
             "corpus": {"key": scored.manifest["key"], "sequences": len(rows),
                        "tokens": used_tokens, "fraction": c.corpus_fraction,
                        "mix": scored.manifest["mix"]},
             "validation_prompts": len(val_mix), "history": history}
  checkpoints.write_history(history)  # a later resume adds to seconds_total
  if c.export:
    export = Path(c.export)
    dw.save(export, with_params(net, params), kind=c.drafter, target_cfg=cfg,
            target_embed=model.embed[...], target_name=model_id,
            extra={k: v for k, v in summary.items() if k != "history"} | {
                "final_eval": history["evals"][-1] if history["evals"] else None})
    stem = export.name.removesuffix(".safetensors")
    (export.parent / f"{stem}.config.json").write_text(c.to_json(indent=1) + "\n")
    (export.parent / f"{stem}.log.json").write_text(json.dumps(summary, indent=1) + "\n")
    print(f"train: exported {export} ({export.stat().st_size / 1e6:.1f} MB) after "
          f"{format_seconds(summary['seconds'])}", file=log, flush=True)
  return summary
