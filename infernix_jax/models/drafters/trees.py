"""Token trees from a drafter network's distributions: best-first growth over candidates.

Axis letters: B rows, N tree nodes, W candidate children per node, Vm logits width.

Every node's `width` most probable next tokens are its candidate children, scored by the
log-probability of their root path under the drafter. Each step moves one candidate into the
tree: shape "dynamic" takes the best-scoring one (EAGLE-2's dynamic tree, Li et al., arXiv
2406.16858: the tree grows where the drafter is sure), "topk" the best of the shallowest
depth (the top-k expansion per depth of static trees). `expand` gives the distribution after
a new node: a forward of the drafter over the tree so far (tree attention, the draft model)
or the block drafter's distribution at the node's depth (per-position candidates, as Medusa
trees). Candidates deeper than a row's limit never join, so a tree never outruns
max_tokens. Trees are drafted greedily: each node's q is one-hot.
"""

from __future__ import annotations

from typing import Any, Callable

import jax
import jax.numpy as jnp

SHAPES = ("dynamic", "topk")


def grow(first_logits, expand: Callable, carry: Any, limit, *, n: int, width: int,
         shape: str):
  """Grows a token tree of up to n nodes per row.

  Args:
    first_logits: [B, Vm] the drafter's distribution after the anchor.
    expand: (carry, ids i32[B, N], parents i32[B, N], depth i32[B, N], ancestors bool[B, N,
      N], j) -> (logits [B, Vm] after node j's root path, carry); the arrays describe nodes
      0..j (later entries are padding: parent -1, depth 1, ancestors only themselves).
    carry: what expand threads (e.g. the draft model's cache).
    limit: i32[B] the deepest node allowed per row (0: no node).
    n, width, shape: static: nodes, candidates per node, "dynamic" | "topk".

  Returns:
    (ids i32[B, N], parents i32[B, N] (-1: under the anchor), n_nodes i32[B], carry).
  """
  if shape not in SHAPES:
    raise ValueError(f"tree shape {shape!r} must be one of {SHAPES}")
  b = first_logits.shape[0]
  rows = jnp.arange(b)
  slots = width * (n + 1)  # candidate slots: the root's width, then width per node

  def children(logits, score):
    lp, ids = jax.lax.top_k(jax.nn.log_softmax(logits.astype(jnp.float32), -1), width)
    return ids.astype(jnp.int32), score[:, None] + lp

  ids0, score0 = children(first_logits, jnp.zeros((b,), jnp.float32))
  state = dict(
      ids=jnp.zeros((b, n), jnp.int32), parents=jnp.full((b, n), -1, jnp.int32),
      depth=jnp.ones((b, n), jnp.int32),
      anc=jnp.broadcast_to(jnp.eye(n, dtype=bool)[None], (b, n, n)),
      count=jnp.zeros((b,), jnp.int32),
      tok=jnp.zeros((b, slots), jnp.int32).at[:, :width].set(ids0),
      par=jnp.full((b, slots), -1, jnp.int32),
      score=jnp.full((b, slots), -jnp.inf, jnp.float32).at[:, :width].set(score0),
      cdepth=jnp.ones((b, slots), jnp.int32), carry=carry)

  def body(j, s):
    valid = jnp.isfinite(s["score"]) & (s["cdepth"] <= limit[:, None])           # [B, S]
    key = s["score"] if shape == "dynamic" else s["score"] - 1e6 * s["cdepth"]
    pick = jnp.argmax(jnp.where(valid, key, -jnp.inf), axis=-1)                  # [B]
    ok = jnp.any(valid, axis=-1)
    tok, par = s["tok"][rows, pick], s["par"][rows, pick]
    dep, sc = s["cdepth"][rows, pick], s["score"][rows, pick]
    ids = s["ids"].at[:, j].set(jnp.where(ok, tok, 0))
    parents = s["parents"].at[:, j].set(jnp.where(ok, par, -1))
    depth = s["depth"].at[:, j].set(jnp.where(ok, dep, 1))
    up = jnp.where((ok & (par >= 0))[:, None], s["anc"][rows, jnp.maximum(par, 0)], False)
    anc = s["anc"].at[:, j].set(up | (jnp.arange(n)[None, :] == j))
    logits, carry = expand(s["carry"], ids, parents, depth, anc, j)
    new_ids, new_score = children(logits, sc)
    lo = width * (j + 1)
    put = lambda x, v: jax.lax.dynamic_update_slice(x, v.astype(x.dtype), (0, lo))  # noqa: E731
    return dict(ids=ids, parents=parents, depth=depth, anc=anc, count=s["count"] + ok,
                tok=put(s["tok"], new_ids),
                par=put(s["par"], jnp.full((b, width), j)),
                score=put(s["score"].at[rows, pick].set(-jnp.inf),
                          jnp.where(ok[:, None], new_score, -jnp.inf)),
                cdepth=put(s["cdepth"], jnp.broadcast_to((dep + 1)[:, None], (b, width))),
                carry=carry)

  s = jax.lax.fori_loop(0, n, body, state)
  return s["ids"], s["parents"], s["count"], s["carry"]
