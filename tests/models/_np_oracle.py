"""FP64 numpy oracle of one decoder layer and of the drafter heads (independent of jax code)."""

from __future__ import annotations

import numpy as np


def llama_cpp_permute(w, heads):
  """llama.cpp convert_hf_to_gguf's permutation, written from its definition (the oracle)."""
  out = np.empty_like(w)
  h = w.shape[0] // heads
  for head in range(heads):
    for i in range(h // 2):
      for j in range(2):  # gguf row (head, i, j) holds hf row (head, j, i)
        out[head * h + 2 * i + j] = w[head * h + j * (h // 2) + i]
  return out


def rms(x, w, eps):
  return x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + eps) * w


def rope(x, pos, theta):
  """x [T, n, H], pos [T]: half-split rotary embedding."""
  h = x.shape[-1]
  inv = 1.0 / theta ** (np.arange(0, h, 2) / h)
  ang = pos[:, None] * inv[None]  # [T, H/2]
  cos, sin = np.cos(ang)[:, None], np.sin(ang)[:, None]
  a, b = x[..., : h // 2], x[..., h // 2:]
  return np.concatenate([a * cos - b * sin, b * cos + a * sin], axis=-1)


def qkv(cfg, p, h, pos):
  t = h.shape[0]
  q, k, v = h @ p["q"], h @ p["k"], h @ p["v"]
  if cfg.qkv_bias:
    q, k, v = q + p["q_bias"], k + p["k_bias"], v + p["v_bias"]
  q = q.reshape(t, cfg.num_heads, cfg.head_dim)
  k = k.reshape(t, cfg.num_kv_heads, cfg.head_dim)
  v = v.reshape(t, cfg.num_kv_heads, cfg.head_dim)
  if cfg.qk_norm:
    q, k = rms(q, p["q_norm"], cfg.norm_eps), rms(k, p["k_norm"], cfg.norm_eps)
  return rope(q, pos, cfg.rope_theta), rope(k, pos, cfg.rope_theta), v


def layer(cfg, p, x, pos, mask, extra_kv=None, attn_input=None):
  """One pre-norm layer. x [T, D]; mask bool [T, Sx + T] over (extra keys, own keys);
  attn_input: what q/k/v read instead of RMSNorm(x) (EAGLE-3's [2D] input)."""
  if attn_input is None:
    attn_input = rms(x, p["attn_norm"], cfg.norm_eps)
  q, k, v = qkv(cfg, p, attn_input, pos)
  if extra_kv is not None:
    k, v = np.concatenate([extra_kv[0], k]), np.concatenate([extra_kv[1], v])
  g = cfg.num_heads // cfg.num_kv_heads
  k, v = np.repeat(k, g, axis=1), np.repeat(v, g, axis=1)  # [S, N, H]
  s = np.einsum("tnh,snh->nts", q, k) / np.sqrt(cfg.head_dim)
  s = np.where(mask[None], s, -np.inf)
  w = np.exp(s - s.max(-1, keepdims=True))
  w /= w.sum(-1, keepdims=True)
  o = np.einsum("nts,snh->tnh", w, v).reshape(x.shape[0], -1) @ p["o"]
  if cfg.o_bias:
    o = o + p["o_bias"]
  x = x + o
  h = rms(x, p["mlp_norm"], cfg.norm_eps)
  gate = h @ p["gate"]
  return x + (gate / (1 + np.exp(-gate)) * (h @ p["up"])) @ p["down"]


def layer_params(pure_layers, index):
  return {n: np.asarray(a, np.float64)[index] for n, a in pure_layers.items()}


def mtp_greedy(cfg, params, embed, head, hidden, tokens, k):
  """MTP chain from full context pairs (hidden [n, D], tokens [n]) -> k greedy ids."""
  p = layer_params(params["layers"], 0)
  eps = cfg.norm_eps
  hs, xs = list(hidden), list(tokens)
  ids = []
  for _ in range(k):
    u = np.stack([np.concatenate([rms(h, params["hidden_norm"], eps),
                                  rms(embed[x], params["embed_norm"], eps)])
                  for h, x in zip(hs, xs)]) @ params["proj"]
    n = len(u)
    g = layer(cfg, p, u, np.arange(n, dtype=np.float64), np.tri(n, dtype=bool))[-1]
    ids.append(int(np.argmax(rms(g, params["final_norm"], eps) @ head)))
    hs.append(g)
    xs.append(ids[-1])
  return ids


def dflash_logits(cfg, params, embed, head, features, anchor, k):
  """DFlash block logits [k, Vm] from all context features [n, F] and the anchor id."""
  eps = cfg.norm_eps
  f = rms(features @ params["fc"], params["feature_norm"], eps)
  n = len(f)
  ctx_pos = np.arange(n, dtype=np.float64)
  blk_pos = n + np.arange(k + 1, dtype=np.float64)
  x = np.concatenate([embed[anchor][None], np.repeat(params["mask_embed"][None], k, 0)])
  for i in range(cfg.num_layers):
    p = layer_params(params["layers"], i)
    _, kc, vc = qkv(cfg, p, f, ctx_pos)
    x = layer(cfg, p, x, blk_pos, np.ones((k + 1, n + k + 1), bool), extra_kv=(kc, vc))
  return rms(x[1:], params["final_norm"], eps) @ head


def eagle3_greedy(cfg, t, embed, feats, tokens, k, forced=()):
  """EAGLE-3 chain from the public checkpoint's tensors `t` (torch [out, in] layout), the
  context's target features feats [n, F] (each the state before its token) and tokens [n]
  -> k greedy target ids, the first len(forced) of them the `forced` tokens."""
  f64 = lambda name: np.asarray(t[name], np.float64)  # noqa: E731
  mid = "midlayer."
  p = {"q": f64(mid + "self_attn.q_proj.weight").T, "k": f64(mid + "self_attn.k_proj.weight").T,
       "v": f64(mid + "self_attn.v_proj.weight").T, "o": f64(mid + "self_attn.o_proj.weight").T,
       "mlp_norm": f64(mid + "post_attention_layernorm.weight"),
       "gate": f64(mid + "mlp.gate_proj.weight").T, "up": f64(mid + "mlp.up_proj.weight").T,
       "down": f64(mid + "mlp.down_proj.weight").T}
  eps = cfg.norm_eps
  hs = list(np.asarray(feats, np.float64) @ f64("fc.weight").T)
  xs = list(tokens)
  ids = []
  for _ in range(k):
    u = np.stack(hs)
    a = np.concatenate([rms(embed[xs], f64(mid + "input_layernorm.weight"), eps),
                        rms(u, f64(mid + "hidden_norm.weight"), eps)], axis=-1)
    n = len(u)
    g = layer(cfg, p, u, np.arange(n, dtype=np.float64), np.tri(n, dtype=bool),
              attn_input=a)[-1]
    d = int(np.argmax(rms(g, f64("norm.weight"), eps) @ f64("lm_head.weight").T))
    ids.append(forced[len(ids)] if len(ids) < len(forced) else d + int(t["d2t"][d]))
    hs.append(g)
    xs.append(ids[-1])
  return ids
