"""Distillation losses of the MTP head, the block drafter and DSpark, in their inference
layouts.

Both train on one sequence at a time (vmapped over a batch) with the frozen target's hidden
states H [N, D] (H[j] predicted token j + 1) and A sampled anchors per sequence. An anchor
a is the last committed token of a round; draft i (1..K) predicts token a + i, whose
teacher distribution is the target's softmax over LM_head(final_norm(H[a + i - 1])).

Loss: mean KL(teacher || drafter) over the valid (anchor, position) pairs + ce_weight * mean
CE of the sequence's token over the pairs whose token belongs to the answer (the CE term
carries what the constraint made the target emit; prompt tokens get the KL only). Both means
weight draft position i by position_weights[i - 1]. With a head restricted to a draft
vocabulary (`TargetHead.restricted`), student and teacher are both distributions over its
Vd ids (the teacher renormalized there) and tokens outside it get no CE.
Per-position top-1 agreement is returned as a metric.

Layouts (they reproduce what `propose` computes, so trained weights transfer as they are):
  MTP: depth 1 is the causal layer over every context pair (H[j - 1], x[j]); depth i >= 2
    for anchor a is one query at position a + i - 1 fed (g of depth i - 1, x[a + i - 1]),
    reading the depth-1 keys at positions <= a and its own chain's earlier entries
    (the training-time chain of EAGLE-3; the true token stands for the draft).
  Block: context entry j carries feature H[j - 1] at position j; anchor a's block
    [x[a], MASK x K] sits at positions a + 1 .. a + 1 + K and reads context entries <= a
    and its whole block.
  DSpark: the block's layout, then its sequential head at position i fed x[a + i - 1] (the
    true token stands for draft i - 1).

Axis letters: N sequence (padded), A anchors, K drafts, T = K + 1, D width, Vm vocab.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from infernix_jax.models import layers
from infernix_jax.models.drafters.base import TargetHead
from infernix_jax.models.transformer import decoder_layer


def teacher_logits(hidden, final_norm, head: TargetHead, eps: float):
  """Target hidden [..., D] -> f32 logits over the head's columns [..., Vd or Vm]."""
  return head.draft_logits(layers.rms_norm(hidden, final_norm, eps))


def _kl_ce(student, teacher, token):
  """Per-row KL(teacher || student) and CE(token) for f32 logits [..., Vm]."""
  log_q = jax.nn.log_softmax(student, axis=-1)
  log_p = jax.nn.log_softmax(teacher, axis=-1)
  kl = jnp.sum(jnp.exp(log_p) * (log_p - log_q), axis=-1)
  ce = -jnp.take_along_axis(log_q, token[..., None], axis=-1)[..., 0]
  return kl, ce, jnp.argmax(student, -1) == jnp.argmax(teacher, -1)


def _reduce(kl, ce, agree, valid, ce_valid, ce_weight, position_weights=None):
  """[A, K] terms -> (loss, metrics: unweighted KL / CE means, per-position top-1)."""
  w, wc = valid.astype(jnp.float32), ce_valid.astype(jnp.float32)
  pw = (jnp.ones((kl.shape[-1],), jnp.float32) if position_weights is None
        else jnp.asarray(position_weights, jnp.float32))
  loss = (jnp.sum(kl * w * pw) / jnp.maximum(jnp.sum(w * pw), 1e-9)
          + ce_weight * jnp.sum(ce * wc * pw) / jnp.maximum(jnp.sum(wc * pw), 1e-9))
  per_pos = jnp.maximum(w.sum(0), 1.0)
  kl_mean = jnp.sum(kl * w) / jnp.maximum(w.sum(), 1.0)
  ce_mean = jnp.sum(ce * wc) / jnp.maximum(wc.sum(), 1.0)
  return loss, {"kl": kl_mean, "ce": ce_mean, "top1": jnp.sum(agree * w, 0) / per_pos,
                "weight": w.sum(0)}


def _anchor_targets(ids, anchors, anchor_ok, n_valid, k):
  """Positions a + i - 1 (teacher rows), tokens a + i, validity: each [A, K]."""
  steps = jnp.arange(1, k + 1, dtype=jnp.int32)
  pos = anchors[:, None] + steps[None, :] - 1
  valid = anchor_ok[:, None] & (pos + 1 < n_valid)
  tokens = jnp.take(ids, jnp.clip(pos + 1, 0, ids.shape[0] - 1))
  return jnp.clip(pos, 0, ids.shape[0] - 1), tokens, valid


def mtp_logits(params, cfg, head: TargetHead, ids, hidden, anchors, k: int):
  """Student logits f32[A, K, Vd or Vm] (the head's columns) of an MTP head (params: pure
  dict of `MTPHead`).

  Args:
    cfg: the head's config (`MTPHead.cfg`).
    ids: i32[N] tokens (the true tokens stand for the drafts of the chain).
    hidden: [N, D] the target's hidden states.
    anchors: i32[A] anchor positions.
  """
  eps = cfg.norm_eps
  n = ids.shape[0]
  p = jax.tree.map(lambda x: x[0], params["layers"])  # the single layer
  dt = cfg.jnp_dtype

  def fuse(h, tok):
    emb = jnp.take(head.embed, tok, axis=0).astype(dt)
    both = jnp.concatenate([layers.rms_norm(h.astype(dt), params["hidden_norm"], eps),
                            layers.rms_norm(emb, params["embed_norm"], eps)], axis=-1)
    return both @ params["proj"]

  prev = jnp.concatenate([jnp.zeros_like(hidden[:1]), hidden[:-1]], axis=0)  # H[j - 1]
  x = fuse(prev, ids)[None]  # [1, N, D]
  pos = jnp.arange(n, dtype=jnp.int32)[None]
  cos, sin = layers.rope_tables(pos, cfg.head_dim, cfg.rope_theta)
  causal = (jnp.arange(n)[None, :] <= jnp.arange(n)[:, None])[None]
  empty = jnp.zeros((1, 0, cfg.num_kv_heads, cfg.head_dim), dt)
  g1, k1, v1 = decoder_layer(cfg, p, x, empty, empty, cos, sin, causal)  # [1, N, ...]

  a = anchors.shape[0]
  g = jnp.take(g1[0], anchors, axis=0)  # [A, D]
  outs = [g]
  ctx_ok = jnp.arange(n)[None, :] <= anchors[:, None]  # [A, N]
  keys = jnp.broadcast_to(k1, (a,) + k1.shape[1:])
  values = jnp.broadcast_to(v1, (a,) + v1.shape[1:])
  for i in range(2, k + 1):
    tok = jnp.take(ids, jnp.clip(anchors + i - 1, 0, n - 1))
    xi = fuse(g, tok)[:, None]  # [A, 1, D]
    cos_i, sin_i = layers.rope_tables((anchors + i - 1)[:, None], cfg.head_dim,
                                       cfg.rope_theta)
    mask = jnp.concatenate([ctx_ok, jnp.ones((a, i - 1), bool)], axis=-1)[:, None]
    out, ki, vi = decoder_layer(cfg, p, xi, keys, values, cos_i, sin_i, mask)
    keys = jnp.concatenate([keys, ki], axis=1)
    values = jnp.concatenate([values, vi], axis=1)
    g = out[:, 0]
    outs.append(g)
  gs = jnp.stack(outs, axis=1)  # [A, K, D]
  return head.draft_logits(layers.rms_norm(gs, params["final_norm"], eps))


def block_logits(params, cfg, head: TargetHead, ids, hidden, anchors, k: int):
  """Student logits f32[A, K, Vd or Vm] (the head's columns) of a block drafter (params:
  pure dict of `DFlashNet`)."""
  x = block_hidden(params, cfg, head, ids, hidden, anchors, k)
  return head.draft_logits(layers.rms_norm(x, params["final_norm"], cfg.norm_eps))


def block_hidden(params, cfg, head: TargetHead, ids, hidden, anchors, k: int):
  """The block's hidden states [A, K, D] at positions 1..K before the final norm (params:
  pure dict of a `DFlashNet` or a network built on it)."""
  eps, dt = cfg.norm_eps, cfg.jnp_dtype
  n, a, t = ids.shape[0], anchors.shape[0], k + 1
  prev = jnp.concatenate([jnp.zeros_like(hidden[:1]), hidden[:-1]], axis=0).astype(dt)
  feats = layers.rms_norm(prev @ params["fc"], params["feature_norm"], eps)[None]  # [1,N,D]
  cos_c, sin_c = layers.rope_tables(jnp.arange(n, dtype=jnp.int32)[None], cfg.head_dim,
                                     cfg.rope_theta)
  blk_pos = anchors[:, None] + 1 + jnp.arange(t, dtype=jnp.int32)[None]  # [A, T]
  cos_b, sin_b = layers.rope_tables(blk_pos, cfg.head_dim, cfg.rope_theta)
  anchor_emb = jnp.take(head.embed, jnp.take(ids, anchors), axis=0).astype(dt)
  x = jnp.concatenate([anchor_emb[:, None],
                       jnp.broadcast_to(params["mask_embed"], (a, k, cfg.dim))], axis=1)
  ctx_ok = jnp.arange(n)[None, :] <= anchors[:, None]  # [A, N]
  mask = jnp.concatenate([jnp.broadcast_to(ctx_ok[:, None], (a, t, n)),
                          jnp.ones((a, t, t), bool)], axis=-1)
  stacked = params["layers"]  # [L, ...] per name
  for layer in range(cfg.num_layers):
    p = jax.tree.map(lambda w, layer=layer: w[layer], stacked)
    _, kc, vc = layers.project_qkv(cfg, p, feats, cos_c, sin_c)  # [1, N, G, H]
    x, _, _ = decoder_layer(cfg, p, x, jnp.broadcast_to(kc, (a,) + kc.shape[1:]),
                            jnp.broadcast_to(vc, (a,) + vc.shape[1:]), cos_b, sin_b, mask)
  return x[:, 1:]  # [A, K, D]


def dspark_logits(params, cfg, head: TargetHead, ids, hidden, anchors, k: int):
  """Student logits f32[A, K, Vd or Vm] of a DSpark drafter (params: pure dict of
  `DSparkNet`): the block's hidden states, then the sequential head teacher-forced on the
  sequence's own tokens (position i reads token a + i - 1, as drafting reads draft i - 1;
  position 1 reads the anchor)."""
  from infernix_jax.models.drafters.dspark import head_logits
  hs = block_hidden(params, cfg, head, ids, hidden, anchors, k)  # [A, K, D]
  prev = jnp.take(ids, jnp.clip(anchors[:, None] + jnp.arange(k, dtype=jnp.int32)[None], 0,
                                ids.shape[0] - 1))  # [A, K]
  return head_logits(params, cfg, head, hs, prev, draft=True)


LOGITS = {"mtp": mtp_logits, "block": block_logits, "dspark": dspark_logits}


def distill_loss(kind: str, params, cfg, head: TargetHead, final_norm, ids, hidden, n_valid,
                 prompt_len, anchors, anchor_ok, *, k: int, ce_weight: float,
                 position_weights=None):
  """(loss, metrics) of drafter `kind` ("mtp" | "block" | "dspark") on one sequence.

  Args:
    params: the drafter's parameters (pure dict); cfg: its config.
    head, final_norm: the target's shared, frozen head and final norm weight.
    ids: i32[N]; hidden: [N, D]; n_valid: the real length; prompt_len: where the target's
      own tokens start (CE applies to those only; KL to every position);
      anchors: i32[A]; anchor_ok: bool[A];
    position_weights: [K] loss weight of each draft position (None: equal).
  """
  student = LOGITS[kind](params, cfg, head, ids, hidden, anchors, k)
  tpos, tokens, valid = _anchor_targets(ids, anchors, anchor_ok, n_valid, k)
  rows = jnp.take(hidden, tpos, axis=0).astype(cfg.jnp_dtype)
  teacher = teacher_logits(rows, final_norm, head, cfg.norm_eps)
  cols, inside = head.draft_index(tokens)
  ce_valid = valid & inside & (tpos + 1 >= prompt_len)
  return _reduce(*_kl_ce(student, teacher, cols), valid, ce_valid, ce_weight,
                 position_weights)


def eagle3_logits(params, cfg, embed, ids, feats, anchors, k: int):
  """Student logits f32[A, K, Vd] of an EAGLE-3 head: the training-time test.

  Step 1 runs the layer over every context entry (fc(F[j - 1]), x[j]) of the sequence, as
  the head's cache holds them; step i >= 2 for anchor a is one query at position a + i - 1
  fed (g of step i - 1, x[a + i - 1]) that reads the step-1 keys at positions <= a and its
  own chain's earlier entries, as drafting does (the true token stands for the draft).

  Args:
    params: pure dict of `Eagle3Net` parameters; cfg: its layer config.
    embed: the target's embedding [Vm, D] (frozen).
    ids: i32[N]; feats: [N, F] the target's tapped features (row j after token j).
    anchors: i32[A] anchor positions.
  """
  from infernix_jax.models.drafters.eagle3 import layer_forward, layer_shapes
  dt = cfg.jnp_dtype
  n, a = ids.shape[0], anchors.shape[0]
  p = {name: params[name][0] for name in layer_shapes(cfg)}
  prev = jnp.concatenate([jnp.zeros_like(feats[:1]), feats[:-1]], axis=0).astype(dt)
  h = prev @ params["fc"]  # [N, D]
  emb = jnp.take(embed, ids, axis=0).astype(dt)
  cos, sin = layers.rope_tables(jnp.arange(n, dtype=jnp.int32)[None], cfg.head_dim,
                                cfg.rope_theta)
  causal = (jnp.arange(n)[None, :] <= jnp.arange(n)[:, None])[None]
  empty = jnp.zeros((1, 0, cfg.num_kv_heads, cfg.head_dim), dt)
  g1, k1, v1 = layer_forward(cfg, p, h[None], emb[None], empty, empty, cos, sin, causal)
  g = jnp.take(g1[0], anchors, axis=0)  # [A, D]
  outs = [g]
  ctx_ok = jnp.arange(n)[None, :] <= anchors[:, None]  # [A, N]
  keys = jnp.broadcast_to(k1, (a,) + k1.shape[1:])
  values = jnp.broadcast_to(v1, (a,) + v1.shape[1:])
  for i in range(2, k + 1):
    tok = jnp.take(ids, jnp.clip(anchors + i - 1, 0, n - 1))
    cos_i, sin_i = layers.rope_tables((anchors + i - 1)[:, None], cfg.head_dim,
                                       cfg.rope_theta)
    mask = jnp.concatenate([ctx_ok, jnp.ones((a, i - 1), bool)], axis=-1)[:, None]
    out, ki, vi = layer_forward(cfg, p, g[:, None], jnp.take(embed, tok, axis=0)[:, None]
                                .astype(dt), keys, values, cos_i, sin_i, mask)
    keys = jnp.concatenate([keys, ki], axis=1)
    values = jnp.concatenate([values, vi], axis=1)
    g = out[:, 0]
    outs.append(g)
  gs = jnp.stack(outs, axis=1)  # [A, K, D]
  normed = layers.rms_norm(gs, params["final_norm"], cfg.norm_eps)
  return jnp.einsum("AKD,DV->AKV", normed, params["lm_head"], preferred_element_type=jnp.float32)


def eagle3_loss(params, cfg, embed, t2d, ids, feats, top_ids, top_logp, n_valid, prompt_len,
                anchors, anchor_ok, *, k: int, step_weights, ce_weight: float):
  """(loss, metrics) of an EAGLE-3 head on one sequence of a teacher-scored corpus.

  The teacher at step i of anchor a is the target's stored top-J distribution after token
  a + i - 1, restricted to the draft vocabulary and renormalized; the loss is the
  cross-entropy of the head's draft-vocabulary distribution to it (KL up to the teacher's
  entropy), plus ce_weight x the CE of the true next token where it lies in the draft
  vocabulary and belongs to the answer. Steps are weighted by `step_weights` [K].

  Args:
    t2d: i32[Vm] target id -> draft id, -1 outside the draft vocabulary.
    top_ids i32[N, J], top_logp [N, J]: the stored teacher (row j predicts token j + 1).
    n_valid, prompt_len: real length, answer start; anchors i32[A], anchor_ok bool[A].

  Metrics: kl (teacher-weighted CE minus teacher entropy, in-vocabulary mass),
  top1[K] (the head's argmax is the teacher's most probable token), coverage (teacher mass
  inside the draft vocabulary).
  """
  student = eagle3_logits(params, cfg, embed, ids, feats, anchors, k)  # [A, K, Vd]
  log_q = jax.nn.log_softmax(student, axis=-1)
  tpos, tokens, valid = _anchor_targets(ids, anchors, anchor_ok, n_valid, k)
  t_ids = jnp.take(top_ids, tpos, axis=0)  # [A, K, J]
  t_lp = jnp.take(top_logp, tpos, axis=0).astype(jnp.float32)
  d_ids = jnp.take(t2d, t_ids)  # [A, K, J]
  inside = d_ids >= 0
  p_all = jnp.exp(t_lp)
  mass = jnp.sum(jnp.where(inside, p_all, 0.0), -1)  # [A, K]
  p = jnp.where(inside, p_all, 0.0) / jnp.maximum(mass, 1e-9)[..., None]
  lq = jnp.take_along_axis(log_q, jnp.maximum(d_ids, 0), axis=-1)  # [A, K, J]
  xent = -jnp.sum(p * lq, -1)
  ent = -jnp.sum(jnp.where(p > 0, p * jnp.log(jnp.maximum(p, 1e-30)), 0.0), -1)
  d_tok = jnp.take(t2d, tokens)
  ce = -jnp.take_along_axis(log_q, jnp.maximum(d_tok, 0)[..., None], -1)[..., 0]
  ce_valid = valid & (d_tok >= 0) & (tpos + 1 >= prompt_len)
  w = valid.astype(jnp.float32) * jnp.asarray(step_weights, jnp.float32)[None, :]
  wc = ce_valid.astype(jnp.float32) * jnp.asarray(step_weights, jnp.float32)[None, :]
  loss = (jnp.sum(xent * w) / jnp.maximum(w.sum(), 1e-9)
          + ce_weight * jnp.sum(ce * wc) / jnp.maximum(wc.sum(), 1e-9))
  vf = valid.astype(jnp.float32)
  per_pos = jnp.maximum(vf.sum(0), 1.0)
  agree = jnp.argmax(log_q, -1) == jnp.take(t2d, t_ids[..., 0])
  return loss, {"kl": jnp.sum((xent - ent) * vf) / jnp.maximum(vf.sum(), 1.0),
                "top1": jnp.sum(agree * vf, 0) / per_pos,
                "coverage": jnp.sum(mass * vf) / jnp.maximum(vf.sum(), 1.0),
                "weight": vf.sum(0)}
