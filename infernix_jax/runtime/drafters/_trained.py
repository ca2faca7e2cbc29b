"""Where the trained drafters (MTP, block) get their network: shipped, a file, or random."""

from __future__ import annotations

from pathlib import Path


def target_of(opts, name: str):
  """(cfg, model) of the target a head-sharing drafter needs."""
  if opts.target is None:
    raise ValueError(f"the {name!r} drafter needs the target model (it shares its head)")
  return opts.target


def network(opts, name: str, kind: str, random_net):
  """The drafter network for `opts.weights`.

  Args:
    opts: `BuildOptions`.
    name: the registered drafter name (for messages).
    kind: the weights kind, "mtp" or "block".
    random_net: (cfg) -> an untrained network, used only for weights="random".

  Raises:
    DrafterWeightsError: the shipped or given weights are missing or belong to another
      target; the message names the file and the expected model.
  """
  from flax import nnx

  from infernix_jax.models.drafters import weights as dw
  cfg, model = target_of(opts, name)
  w = opts.weights
  if isinstance(w, nnx.Module):
    return w
  if isinstance(w, str) and w == "random":
    return random_net(cfg)
  path = Path(w) if w is not None else dw.shipped_path(kind)
  expected = ("the embedded SmolLM2-135M-Instruct (the only target with shipped weights; "
              "pass weights=PATH for another target, or weights='random' for an untrained "
              "network)") if w is None else "this target"
  return dw.load(path, kind, cfg, model.embed[...], expected=expected)
