"""The drafter interface: who proposes a round's K drafts, with which q, and what it keeps.

Axis letters (docs/CONTRACTS.md): B lanes, K drafts, P = K + 1 positions, T prompt bucket,
D target width, Vm logits width.

A drafter is a frozen object (a static argument of the compiled round) with one entry point,
`propose`. Where it runs is a capability, `on_device`: False -> the round calls `propose`
and `advance` on the host with numpy arrays before the target's Forward; True -> both are
traced inside the compiled round. Everything a drafter remembers lives in its own state, a
pytree it returns from every call (per-lane host objects for host drafters, arrays for
device ones); no hook ever sees the engine.
"""

from __future__ import annotations

import dataclasses
from typing import Any, ClassVar, Mapping, Sequence

import jax
import jax.numpy as jnp
import numpy as np

from infernix_jax.pallas import DenseQ, OneHotQ, SparseQ

__all__ = ["BuildContext", "Committed", "DraftInput", "Drafter", "DrafterOptions", "DrafterSpec",
           "NoOptions", "OptionError", "Proposal", "one_hot_rows"]


class OptionError(ValueError):
  """An invalid drafter option: `field` names it (the registry adds the drafter's name)."""

  def __init__(self, field: str, message: str):
    self.field, self.message = field, message
    super().__init__(f"{field}: {message}")


@dataclasses.dataclass(frozen=True)
class NoOptions:
  """The options of a drafter that takes none (ordinary decoding)."""

  def validate(self) -> None:
    """Nothing to check."""


@dataclasses.dataclass(frozen=True)
class DrafterOptions:
  """Options every drafting drafter takes; a drafter file subclasses it with its own fields
  (each with a default and a one-line comment) and may extend `validate`."""

  k: int = 4  # drafts per round (K)

  def validate(self) -> None:
    """Raises OptionError naming the first invalid field."""
    if isinstance(self.k, bool) or not isinstance(self.k, int) or self.k < 1:
      raise OptionError("k", f"k={self.k!r} must be an integer >= 1 (drafter 'none' drafts "
                             f"nothing)")


@dataclasses.dataclass(frozen=True)
class BuildContext:
  """What a drafter's `build(options, context)` may use besides its options.

  Attributes:
    target: (ModelConfig, model) of the target, for drafters that share its embedding and
      head or read its hidden states; None when the engine is built without one.
    load_model: path -> (ModelConfig, model), loading another model the way the target was
      loaded (its dtype), e.g. a draft model; None where nothing may be loaded.
  """

  target: Any = None
  load_model: Any = None


@jax.tree_util.register_dataclass
@dataclasses.dataclass(frozen=True)
class DraftInput:
  """What a drafter sees each round (numpy on the host, traced arrays on the device).

  Attributes:
    anchor: i32[B] the last committed token of each lane (not yet in the target's cache).
    lengths: i32[B] committed KV length of each lane.
    seed: u32[B] request seeds; position: i32[B] logical output position of the first token
      the round produces (sampling drafters draw from counter-based keys of both).
    limit: i32[B] the most drafts a lane may take this round (0 for free lanes; below K near
      max_tokens or a thinking budget).
    forced: i32[B, K] tokens the grammar forces next (jump-forward), the first n_forced[b]
      real; all zero unless the drafter asks for them (`uses_forced`).
    n_forced: i32[B].
  """

  anchor: Any
  lengths: Any
  seed: Any
  position: Any
  limit: Any
  forced: Any
  n_forced: Any


@jax.tree_util.register_dataclass
@dataclasses.dataclass(frozen=True)
class Proposal:
  """A round's drafts: drafts i32[B, K] (the first n[b] real), n i32[B], q the distribution
  that really produced them (pallas OneHotQ / SparseQ [B, K, 16] / DenseQ [B, K, Vm]).

  A tree drafter (`Drafter.tree`) also gives parents i32[B, K]: draft j hangs off draft
  parents[b, j] (< j) or off the anchor (-1); its q is one-hot (each node chosen
  deterministically), its depth at most limit[b]. None: a chain (parents[j] = j - 1)."""

  drafts: Any
  n: Any
  q: Any
  parents: Any = None


@jax.tree_util.register_dataclass
@dataclasses.dataclass(frozen=True)
class Committed:
  """What a round really committed (after EOS, max_tokens, redraw and failure handling).

  Attributes:
    tokens: i32[B, P] committed tokens of each lane, right padded with 0.
    counts: i32[B] how many (0: the lane committed nothing: free, failed or cancelled).
    hidden: [B, P, D] the target's verify hidden states, hidden[b, j] the state that
      predicted tokens[b, j]; None for host drafters.
  """

  tokens: Any
  counts: Any
  hidden: Any = None


@dataclasses.dataclass(frozen=True)
class DrafterSpec:
  """The engine facts a drafter sizes its state by: B lanes, S KV capacity, D target width,
  the target's activation dtype."""

  lanes: int
  capacity: int
  dim: int
  dtype: Any = jnp.float32


@dataclasses.dataclass(frozen=True, eq=False)
class Drafter:
  """Base drafter: no drafts (ordinary decoding through the same round, K = 0).

  Subclasses override what they need; every hook returns the new state.
  """

  k: int = 0  # drafts per round (K); static shapes use it

  name: ClassVar[str] = "none"
  on_device: ClassVar[bool] = False  # propose / advance are traced in the compiled round
  q_kind: ClassVar[str] = "onehot"  # onehot | sparse | dense: the q Finish receives
  sampling: ClassVar[bool] = False  # drafts are sampled from q (masked q applies)
  uses_forced: ClassVar[bool] = False  # the round fills DraftInput.forced (jump-forward)
  tree: ClassVar[bool] = False  # proposes token trees of up to K nodes (Proposal.parents)

  def __post_init__(self):
    if self.k < 0:
      raise ValueError(f"draft length k={self.k} must be >= 0")

  @property
  def feature_taps(self) -> tuple[int, ...] | None:
    """The target layers whose outputs (concatenated, [.., D * len]) form the hidden states
    `extend` and `advance` receive (EAGLE-3's low / middle / high features); None: the last
    layer's output, [.., D]."""
    return None

  @property
  def candidates(self) -> int:
    """Nodes a tree proposal may hold (>= k): the round verifies the k best of them that
    the grammar allows (drafts after pruning beyond k are dropped)."""
    return self.k

  def init(self, spec: DrafterSpec) -> tuple[Any, Any]:
    """(params, state) for `spec.lanes` empty lanes: params never change between rounds."""
    return None, None

  def propose(self, params: Any, state: Any, inp: DraftInput) -> tuple[Proposal, Any]:
    """The round's drafts, at most inp.limit[b] for lane b -> (Proposal, state)."""
    b = inp.anchor.shape[0]
    return Proposal(np.zeros((b, self.k), np.int32), np.zeros((b,), np.int32), OneHotQ()), state

  def advance(self, params: Any, state: Any, committed: Committed) -> Any:
    """After a round's commit: the tokens each lane really committed."""
    return state

  def extend(self, params: Any, state: Any, rows: Mapping[int, Sequence[int]], hidden: Any,
             reset: bool) -> Any:
    """Tokens committed outside a round (host call): a prompt at admission or a forced close.

    Args:
      rows: lane -> tokens. With reset=True, the lane's state starts over with `tokens` =
        the whole prompt; else `tokens` are appended after what the lane committed.
      hidden: the target's hidden states [B, T, D] of the prefill that put these tokens in
        its cache, or None (a one-token prompt). reset=True: hidden[b, j] predicted
        tokens[j + 1]; reset=False: hidden[b, j] predicted tokens[j].
      reset: admission (True) or append (False).
    """
    return state

  def clear(self, state: Any, rows: Any) -> Any:
    """Zeros what lanes `rows` (bool[B]) hold on the device after a non-finite failure."""
    return state

  def admit(self, state: Any, keys: Mapping[int, str | None]) -> Any:
    """Host call before an admission's `extend`: lane -> the admitted request's history key
    (`GenerationRequest.history_key`; None: the request keeps out of any shared history)."""
    return state


def check_overdraft(value: Any) -> None:
  """The `overdraft` option of a host tree drafter (candidates per verified node, 1..8)."""
  if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= 8:
    raise OptionError("overdraft", f"overdraft={value!r} must be an integer in [1, 8]")


def one_hot_rows(q: Any, drafts: Any, rows: Any) -> Any:
  """q with the cells `rows` replaced by one-hot q of drafts i32[B, K] (traced).

  rows: bool[B] (whole lanes) or bool[B, K] (single draft positions).
  """
  if isinstance(q, OneHotQ):
    return q
  cells = jnp.broadcast_to(rows if rows.ndim == 2 else rows[:, None], drafts.shape)  # [B, K]
  if isinstance(q, DenseQ):
    oh = jax.nn.one_hot(drafts, q.probs.shape[-1], dtype=q.probs.dtype)  # [B, K, Vm]
    return DenseQ(jnp.where(cells[:, :, None], oh, q.probs))
  ids = jnp.where(cells[:, :, None], -1, q.ids)  # [B, K, 16]
  ids = ids.at[:, :, 0].set(jnp.where(cells, drafts, ids[:, :, 0]))
  probs = jnp.where(cells[:, :, None], 0.0, q.probs)
  probs = probs.at[:, :, 0].set(jnp.where(cells, 1.0, probs[:, :, 0]))
  return SparseQ(ids=ids, probs=probs.astype(q.probs.dtype))
