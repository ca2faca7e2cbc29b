"""A drafter training run from a config: corpus, distillation, evaluation, checkpoints, export.

  python -m infernix_jax.train --config=configs/train_mtp.py          # the shipped run
  python -m infernix_jax.train --config=configs/train_mtp.py:smoke    # CI's minute-long run

Steps: load the frozen target; build (or reuse) the self-distilled corpus of the training
prompt mix and the target's hidden states over it; train the drafter's parameters with
optax (the target's embedding, LM head and final norm stay frozen and shared) on the
objective of `objectives`; evaluate acceptance through the engine on validation prompts
every `eval_every` steps; keep resumable orbax checkpoints (parameters, optimizer state) in
`workdir`; finally export float16 weights with the resolved config and a training summary.

Batches: S sequences of one length bucket (a multiple of 256 tokens), A anchors sampled per
sequence, (1 - prompt_anchor_share) of them in the target's own continuation and the rest in
the prompt (the target's distribution there is a teacher too: KL only); the sampler's randomness is a function of (seed, step), so a resumed run draws
the batches the uninterrupted one would have.
"""

from __future__ import annotations

import dataclasses
import json
import sys
import time
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np

from infernix_jax._extras import missing
from infernix_jax.progress import Progress, format_seconds
from infernix_jax.train import corpus, objectives, prompts

BUCKET = 256


@jax.tree_util.register_dataclass
@dataclasses.dataclass(frozen=True)
class Batch:
  """ids i32[S, N]; hidden f32[S, N, D]; n, p_len i32[S]; anchors i32[S, A]; ok bool[S, A]."""

  ids: jax.Array
  hidden: jax.Array
  n: jax.Array
  p_len: jax.Array
  anchors: jax.Array
  ok: jax.Array


class Sampler:
  """Draws batches from the corpus, deterministic in (seed, step)."""

  def __init__(self, records, hidden, *, seqs: int, anchors: int, seed: int,
               prompt_share: float):
    self.records, self.hidden = records, hidden
    self.seqs, self.anchors, self.seed = seqs, anchors, seed
    self.prompt_share = prompt_share
    self.buckets: dict[int, list[int]] = {}
    for i, r in enumerate(records):
      if len(r.ids) - r.prompt_len >= 2:
        self.buckets.setdefault(BUCKET * -(-len(r.ids) // BUCKET), []).append(i)
    if not self.buckets:
      raise ValueError("the corpus has no sequence with at least two generated tokens")
    self.sizes = sorted(self.buckets)
    counts = np.array([len(self.buckets[s]) for s in self.sizes], np.float64)
    self.p = counts / counts.sum()

  def batch(self, step: int) -> Batch:
    rng = np.random.default_rng([self.seed, step])
    size = self.sizes[rng.choice(len(self.sizes), p=self.p)]
    picks = rng.choice(self.buckets[size], size=self.seqs)
    d = self.hidden[0].shape[-1]
    ids = np.zeros((self.seqs, size), np.int32)
    hid = np.zeros((self.seqs, size, d), np.float32)
    n = np.zeros((self.seqs,), np.int32)
    p_len = np.zeros((self.seqs,), np.int32)
    anchors = np.zeros((self.seqs, self.anchors), np.int32)
    ok = np.zeros((self.seqs, self.anchors), bool)
    for s, i in enumerate(picks):
      r = self.records[i]
      m = len(r.ids)
      ids[s, :m], hid[s, :m], n[s], p_len[s] = r.ids, self.hidden[i], m, r.prompt_len
      gen = np.arange(max(r.prompt_len - 1, 0), m - 1)  # anchors in the target's own output
      own = rng.choice(gen, size=min(len(gen), round(self.anchors * (1 - self.prompt_share))),
                       replace=False)
      rest = np.setdiff1d(np.arange(1, m - 1), own)  # prompt anchors (KL only) fill the rest
      more = rng.choice(rest, size=min(len(rest), self.anchors - len(own)), replace=False)
      take = np.sort(np.concatenate([own, more]).astype(np.int32))
      anchors[s, :len(take)], ok[s, :len(take)] = take, True
    return Batch(*(jnp.asarray(x) for x in (ids, hid, n, p_len, anchors, ok)))


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

  def batch_loss(params, head, final_norm, batch: Batch):
    def one(ids, hidden, n, p_len, anchors, ok):
      return objectives.distill_loss(c.drafter, params, net_cfg, head, final_norm, ids,
                                     hidden, n, p_len, anchors, ok, k=c.k,
                                     ce_weight=c.ce_weight)
    losses, metrics = jax.vmap(one)(batch.ids, batch.hidden, batch.n, batch.p_len,
                                    batch.anchors, batch.ok)
    return losses.mean(), jax.tree.map(lambda m: m.mean(0), metrics)

  @jax.jit
  def step(params, opt_state, head, final_norm, batch):
    (loss, metrics), grads = jax.value_and_grad(batch_loss, has_aux=True)(
        params, head, final_norm, batch)
    updates, opt_state = opt.update(grads, opt_state, params)
    return optax.apply_updates(params, updates), opt_state, loss, metrics

  return step


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
  import orbax.checkpoint as ocp
  from flax import nnx

  from infernix_jax import constrain as ic
  from infernix_jax.models import drafters as md
  from infernix_jax.models.drafters import weights as dw
  t_start = time.perf_counter()
  check(c)
  target, model_id = corpus.load_target(c.model or None)
  cfg, model = target.cfg, target.model
  compiler = ic.ConstraintCompiler(target.vocab)  # the corpus and every evaluation share it
  train_mix = prompts.prompt_mix(dict(c.train_mix), "train")
  if c.corpus_max_tokens:
    train_mix = [dataclasses.replace(p, max_tokens=min(p.max_tokens, c.corpus_max_tokens))
                 for p in train_mix]
  val_mix = [p for p in prompts.prompt_mix(dict(c.validation_mix), "validation")
             if p.constraint is not None]
  records, corpus_meta, directory = corpus.build_corpus(
      target, model_id, train_mix, seed=c.seed, lanes=c.corpus_lanes,
      root=Path(c.cache_dir) if c.cache_dir else None, compiler=compiler, log=log)
  hidden = corpus.teacher_hidden(cfg, model, records, directory, log=log)
  sampler = Sampler(records, hidden, seqs=c.batch_sequences, anchors=c.anchors, seed=c.seed,
                    prompt_share=c.prompt_anchor_share)

  net = make_net(c, cfg, model)
  params = nnx.to_pure_dict(nnx.state(net, nnx.Param))
  head = md.TargetHead.from_model(model)
  final_norm = model.final_norm[...]
  opt = _optimizer(c)
  opt_state = opt.init(params)
  step_fn = _step_fn(c, net.cfg, opt)

  workdir = Path(c.workdir).absolute()
  manager = ocp.CheckpointManager(workdir / "checkpoints",
                                  options=ocp.CheckpointManagerOptions(max_to_keep=2))
  start_step, history = 0, {"loss": [], "evals": []}
  latest = manager.latest_step()
  if latest is not None:
    restored = manager.restore(latest, args=ocp.args.StandardRestore(
        {"params": params, "opt_state": opt_state}))
    params, opt_state, start_step = restored["params"], restored["opt_state"], latest
    if (workdir / "history.json").exists():
      history = json.loads((workdir / "history.json").read_text())
    # A resumed run with more steps stretches the cosine schedule from here on: record it,
    # so the exported summary says how the weights were really produced.
    history.setdefault("segments", []).append({"from_step": latest, "to_step": c.steps})
    print(f"train: resumed from step {latest} in {workdir}", file=log, flush=True)

  def save(step):
    manager.save(step, args=ocp.args.StandardSave({"params": params, "opt_state": opt_state}))
    manager.wait_until_finished()
    (workdir / "history.json").write_text(json.dumps(history))

  bar = Progress(c.steps, f"train {c.drafter}", stream=log, start=start_step)
  window: list[float] = []
  for step in range(start_step, c.steps):
    params, opt_state, loss, metrics = step_fn(params, opt_state, head, final_norm,
                                               sampler.batch(step))
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
    bar.update(done, loss=loss, top1=float(metrics["top1"][0]))
    if c.eval_every and (done % c.eval_every == 0 or done == c.steps) and val_mix:
      result = evaluate(c, target, with_params(net, params), val_mix, compiler=compiler)
      history["evals"].append({"step": done, **result})
      print(f"\ntrain: eval at step {done}: accepted length {result['accepted_length']:.3f} "
            f"per position {result['per_position']}", file=log, flush=True)
    if done % c.checkpoint_every == 0 or done == c.steps:
      save(done)
  bar.close()

  summary = {"drafter": c.drafter, "target": model_id, "k_trained": c.k, "steps": c.steps,
             "seconds": round(time.perf_counter() - t_start, 1),
             "device": jax.devices()[0].device_kind,
             "corpus": {**corpus_meta, "sequences": len(records)},
             "validation_prompts": len(val_mix), "history": history}
  if c.export:
    trained = with_params(net, params)
    export = Path(c.export)
    dw.save(export, trained, kind=c.drafter, target_cfg=cfg,
            target_embed=model.embed[...], target_name=model_id,
            extra={k: v for k, v in summary.items() if k != "history"} | {
                "final_eval": history["evals"][-1] if history["evals"] else None})
    stem = export.name.removesuffix(".safetensors")
    (export.parent / f"{stem}.config.json").write_text(c.to_json(indent=1) + "\n")
    (export.parent / f"{stem}.log.json").write_text(json.dumps(summary, indent=1) + "\n")
    print(f"train: exported {export} ({export.stat().st_size / 1e6:.1f} MB) after "
          f"{format_seconds(summary['seconds'])}", file=log, flush=True)
  return summary
