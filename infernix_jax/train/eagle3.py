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
from infernix_jax.train.loop import _optax, _optimizer, with_params


def draft_vocabulary(scored: teacher_corpus.ScoredCorpus, rows, size: int, vocab_size: int,
                     always=()) -> np.ndarray:
  """The `size` target ids the sequences `rows` use most, sorted: counts of their tokens plus
  the target's most probable next token at each position; `always` ids (EOS) are kept.

  Raises:
    ValueError: size outside [len(always) + 1, vocab_size].
  """
  if not len(always) < size <= vocab_size:
    raise ValueError(f"draft_vocab={size} must be in [{len(always) + 1}, {vocab_size}]")
  counts = np.zeros((vocab_size,), np.int64)
  for i in rows:
    seq = scored.sequence(i, ("tokens", "top_ids"))
    counts += np.bincount(seq["tokens"], minlength=vocab_size)[:vocab_size]
    counts += np.bincount(seq["top_ids"][:, 0], minlength=vocab_size)[:vocab_size]
  counts[list(always)] = counts.max() + 1
  order = np.lexsort((np.arange(vocab_size), -counts))  # most used first, ties to small ids
  return np.sort(order[:size]).astype(np.int32)


class ScoredSampler:
  """Batches from a scored corpus, deterministic in (seed, step)."""

  def __init__(self, scored: teacher_corpus.ScoredCorpus, rows, *, seqs: int, anchors: int,
               seed: int, answer_share: float, bucket: int = 128):
    self.scored, self.seqs, self.anchors, self.seed = scored, seqs, anchors, seed
    self.answer_share, self.bucket = answer_share, bucket
    self.buckets: dict[int, list[int]] = {}
    for i in rows:
      row = scored.index[i]
      if row["length"] - row["prompt_len"] >= 1 and row["length"] >= 3:
        self.buckets.setdefault(bucket * -(-row["length"] // bucket), []).append(i)
    if not self.buckets:
      raise ValueError("the scored corpus has no sequence with an answer to train on")
    self.sizes = sorted(self.buckets)
    tokens = np.array([s * len(self.buckets[s]) for s in self.sizes], np.float64)
    self.p = tokens / tokens.sum()  # buckets drawn in proportion to their tokens

  def batch(self, step: int) -> dict[str, np.ndarray]:
    """ids i32[S, N], feats f16[S, N, F], top_ids i32[S, N, J], top_logp f16[S, N, J],
    n / p_len i32[S], anchors i32[S, A], ok bool[S, A]."""
    rng = np.random.default_rng([self.seed, step])
    size = self.sizes[rng.choice(len(self.sizes), p=self.p)]
    picks = rng.choice(self.buckets[size], size=self.seqs)
    first = self.scored.sequence(int(picks[0]))
    f, j = first["features"].shape[1], first["top_ids"].shape[1]
    out = {"ids": np.zeros((self.seqs, size), np.int32),
           "feats": np.zeros((self.seqs, size, f), np.float16),
           "top_ids": np.zeros((self.seqs, size, j), np.int32),
           "top_logp": np.zeros((self.seqs, size, j), np.float16),
           "n": np.zeros((self.seqs,), np.int32), "p_len": np.zeros((self.seqs,), np.int32),
           "anchors": np.zeros((self.seqs, self.anchors), np.int32),
           "ok": np.zeros((self.seqs, self.anchors), bool)}
    for s, i in enumerate(picks):
      seq, row = self.scored.sequence(int(i)), self.scored.index[int(i)]
      m, p_len = row["length"], row["prompt_len"]
      out["ids"][s, :m], out["feats"][s, :m] = seq["tokens"], seq["features"]
      out["top_ids"][s, :m], out["top_logp"][s, :m] = seq["top_ids"], seq["top_logp"]
      out["n"][s], out["p_len"][s] = m, p_len
      answer = np.arange(max(p_len - 1, 0), m - 1)  # anchors whose drafts are answer tokens
      own = rng.choice(answer, size=min(len(answer), round(self.anchors * self.answer_share)),
                       replace=False)
      rest = np.setdiff1d(np.arange(0, m - 1), own)
      more = rng.choice(rest, size=min(len(rest), self.anchors - len(own)), replace=False)
      take = np.sort(np.concatenate([own, more]).astype(np.int32))
      out["anchors"][s, :len(take)], out["ok"][s, :len(take)] = take, True
    return out


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
    losses, metrics = jax.vmap(one)(b["ids"], b["feats"], b["top_ids"], b["top_logp"], b["n"],
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
  import orbax.checkpoint as ocp
  from flax import nnx

  from infernix_jax.models.drafters import eagle3_checkpoint
  t_start = time.perf_counter()
  scored = teacher_corpus.build(c.corpus, log=log)
  target, model_id = corpus.load_target(c.corpus.model or None)
  cfg, model = target.cfg, target.model
  if scored.manifest["model"] != model_id:
    raise ValueError(f"the scored corpus belongs to {scored.manifest['model']}, not "
                     f"{model_id}")
  taps = tuple(scored.manifest["taps"])
  rows = list(range(max(1, round(len(scored) * c.corpus_fraction))))
  used_tokens = sum(scored.index[i]["length"] for i in rows)
  vocab_ids = draft_vocabulary(scored, rows, min(c.draft_vocab, cfg.vocab_size),
                               cfg.vocab_size, sorted(target.vocab.eos_ids))
  t2d = np.full((cfg.vocab_size,), -1, np.int32)
  t2d[vocab_ids] = np.arange(len(vocab_ids))
  sampler = ScoredSampler(scored, rows, seqs=c.batch_sequences, anchors=c.anchors,
                          seed=c.seed, answer_share=c.answer_anchor_share)
  net = make_head(c, cfg, model, vocab_ids, taps)
  params = nnx.to_pure_dict(nnx.state(net, nnx.Param))
  embed, t2d_j = model.embed[...], jnp.asarray(t2d)
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
    history.setdefault("segments", []).append({"from_step": latest, "to_step": c.steps})
    print(f"train: resumed from step {latest} in {workdir}", file=log, flush=True)

  def save(step):
    manager.save(step, args=ocp.args.StandardSave({"params": params, "opt_state": opt_state}))
    manager.wait_until_finished()
    (workdir / "history.json").write_text(json.dumps(history))

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
      save(done)
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
