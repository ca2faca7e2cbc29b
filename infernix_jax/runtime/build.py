"""One way to assemble an engine: a frozen `EngineSpec` and the one builder every surface calls.

  from infernix_jax.runtime.build import EngineSpec, build_engine
  spec = EngineSpec(drafter="ngram", drafter_options={"k": 4, "n": 2}, lanes=4)
  built = build_engine(spec)              # loads the model named by spec.model
  built.engine.generate([...]); built.tokenizer.encode(...); built.vocab

The Python API (`LLM`), the CLI, the server, the studies, the benchmarks and drafter training
turn their inputs into an `EngineSpec` and call `build_engine`; only engine unit tests
construct `Engine` directly. `spec.validate()` checks everything that needs no weights, each
rule once, and raises `ParameterError` naming the spec field (each surface renames it: a
flag, a keyword, a JSON field). A model already in memory (training, tiny test models) comes
in as a `Target`.
"""

from __future__ import annotations

import dataclasses
import importlib
from pathlib import Path
from typing import Any, Mapping, Sequence

from infernix_jax.errors import ParameterError

__all__ = ["Assembly", "EngineSpec", "Target", "build_engine", "load_plugins", "load_target"]

ACCEPTANCE_RULES = ("exact", "drop-illegal")  # "drop-illegal": the wrong rule, for the exactness study
DTYPES = ("float32", "bfloat16")


@dataclasses.dataclass(frozen=True)
class EngineSpec:
  """Everything that decides how an engine is assembled (frozen; `dataclasses.replace` it).

  The drafter is a registered name plus that drafter's own options (`drafters.options`);
  nothing here knows a particular drafter's fields.
  """

  model: str | None = None  # HF dir, .gguf, checkpoint dir; None = the embedded SmolLM2-135M
  dtype: str | None = None  # activation dtype: float32 | bfloat16 (None: the model's own)
  layout: str | None = None  # unrolled | stacked (None: unrolled, stacked with a mesh)
  weights: str | None = None  # unrolled layout only: float32 | bfloat16 | int8 storage
  drafter: str = "ngram"  # a registered drafter (`infernix_jax.drafters.names()`)
  drafter_options: Mapping[str, Any] = dataclasses.field(default_factory=dict)  # its options
  jump_forward: bool | None = None  # grammar jump-forward drafts (None: on if it drafts)
  masked_q: bool = True  # mask sampling drafters' q with the grammar (exact; ablation knob)
  lanes: int = 1  # B, requests decoded together
  capacity: int = 2048  # S, KV positions per lane (prompt + max_tokens + K + 1 must fit)
  bridge: str = "stages"  # stages | callback (the host bridge of the round)
  backend: str = "auto"  # constraint backend by registered name, or auto
  mesh: str | None = None  # device mesh, e.g. "tp=2,dp=2" (None: one device)
  device_automaton: bool = False  # trie lanes take their masks from a device automaton
  compile_cache: str | None = None  # JAX compile cache dir (None: default, "" disables)
  acceptance: str = "exact"  # exact | drop-illegal (the naive rule, for the exactness study)
  callback_rounds: int = 64  # rounds per compiled loop call of the callback bridge
  device_rounds: int = 1  # stages: up to N rounds per dispatch while no lane needs the host
  plugins: tuple[str, ...] = ()  # modules imported first (they register drafters, backends)

  def __post_init__(self):
    object.__setattr__(self, "drafter_options", dict(self.drafter_options or {}))
    plugins = (self.plugins,) if isinstance(self.plugins, str) else tuple(self.plugins or ())
    object.__setattr__(self, "plugins", plugins)

  @property
  def resolved_layout(self) -> str:
    """The layout the model loads in: the given one, else unrolled (stacked with a mesh)."""
    if self.layout is not None:
      return self.layout
    return "stacked" if self.mesh is not None else "unrolled"

  @property
  def resolved_jump_forward(self) -> bool:
    """jump_forward, defaulting to on for every drafter that drafts
    (`drafters.resolve_jump_forward`)."""
    from infernix_jax.runtime import drafters
    return drafters.resolve_jump_forward(self.drafter, self.jump_forward)

  @property
  def k(self) -> int:
    """K, the drafts per round this spec's drafter takes (0 for ordinary decoding)."""
    return getattr(self.drafter_config(), "k", 0)

  def drafter_config(self):
    """The drafter's validated options (`drafters.options`)."""
    from infernix_jax.runtime import drafters
    load_plugins(self.plugins)
    return drafters.options(self.drafter, self.drafter_options)

  def validate(self, *, files: bool = True) -> "EngineSpec":
    """Checks every field that needs no weights; returns self.

    Args:
      files: also check that the model path exists.

    Raises:
      ParameterError: the field at fault in `.param` (drafter options as
        "drafter_options.<field>").
    """
    from infernix_jax.constrain import backends
    from infernix_jax.models import unrolled
    from infernix_jax.runtime import drafters
    from infernix_jax.runtime.types import BRIDGES
    load_plugins(self.plugins)
    _integer("lanes", self.lanes, 1)
    _integer("capacity", self.capacity, 16)
    _integer("callback_rounds", self.callback_rounds, 1)
    _integer("device_rounds", self.device_rounds, 1)
    _one_of("bridge", self.bridge, BRIDGES)
    _one_of("acceptance", self.acceptance, ACCEPTANCE_RULES)
    if self.dtype is not None:
      _one_of("dtype", self.dtype, DTYPES)
    if self.layout is not None:
      _one_of("layout", self.layout, unrolled.LAYOUTS)
    if self.mesh is not None and self.layout == "unrolled":
      raise ParameterError("layout", "the unrolled layout cannot be sharded: drop it with a "
                           "mesh (sharding rules follow the stacked layout)")
    if self.weights is not None:
      _one_of("weights", self.weights, unrolled.WEIGHT_DTYPES)
      if self.resolved_layout != "unrolled":
        raise ParameterError("weights", f"weights={self.weights} needs the unrolled layout "
                             f"(and no mesh)")
    if self.backend != "auto" and self.backend not in backends.names():
      raise ParameterError("backend", f"{self.backend!r} must be auto or one of "
                           f"{', '.join(backends.names())}")
    self.drafter_config()
    drafters.resolve_jump_forward(self.drafter, self.jump_forward)
    if files and self.model is not None and not Path(self.model).exists():
      raise ParameterError("model", f"{self.model}: no such file or directory")
    if self.mesh is not None:
      self.device_mesh()
    return self

  def device_mesh(self):
    """The `mesh` spec as a jax Mesh (None: one device).

    Raises:
      ParameterError("mesh"): malformed, or it does not fit the devices.
    """
    if self.mesh is None:
      return None
    from infernix_jax.models import sharding
    try:
      return sharding.parse_mesh(self.mesh, name="mesh")
    except ValueError as e:
      raise ParameterError("mesh", str(e).removeprefix("mesh=")) from None


@dataclasses.dataclass(frozen=True)
class Target:
  """A loaded target model and its tokenizer side.

  Attributes:
    cfg: its ModelConfig.
    model: the `models.Transformer` (an nnx module).
    vocab: the constraint layer's `Vocabulary`.
    tokenizer: `models.load_tokenizer`'s tokenizer, or None (token-id tests).
    source: the tokenizer source (.gguf or tokenizer.json), or None.
    name: a short model name (reports, the server's model id).
  """

  cfg: Any
  model: Any
  vocab: Any
  tokenizer: Any = None
  source: Any = None
  name: str = "model"


@dataclasses.dataclass
class Assembly:
  """What `build_engine` assembled: the engine and everything it was built from."""

  spec: EngineSpec
  engine: Any
  target: Target
  drafter: Any
  compiler: Any

  @property
  def cfg(self):
    return self.target.cfg

  @property
  def vocab(self):
    return self.target.vocab

  @property
  def tokenizer(self):
    return self.target.tokenizer


def load_plugins(modules: Sequence[str]) -> None:
  """Imports plug-in modules (each registers drafters or backends when imported).

  Raises:
    ParameterError("plugins"): a module cannot be imported (the message names it and why).
  """
  for name in modules:
    try:
      importlib.import_module(name)
    except ImportError as e:
      raise ParameterError("plugins", f"cannot import plug-in module {name!r}: {e} (it must "
                           f"be importable: on PYTHONPATH or installed)") from None


def vocabulary(source):
  """The constraint layer's Vocabulary of a tokenizer source (.gguf or tokenizer.json)."""
  from infernix_jax import constrain as ic
  if str(source).endswith(".gguf"):
    return ic.Vocabulary.from_gguf(source)
  return ic.Vocabulary.from_tokenizer_json(source)


def model_source(spec: EngineSpec) -> Path:
  """The tokenizer source of `spec.model`, found without loading weights.

  Raises:
    ParameterError("model"): not a model source (the message names the path).
  """
  from infernix_jax import models as im
  try:
    return im.model_source(spec.model)
  except FileNotFoundError as e:
    raise ParameterError("model", str(e)) from None


def load_target(spec: EngineSpec, *, vocab: Any = None) -> Target:
  """Loads the model `spec` names, with its vocabulary and tokenizer.

  Args:
    spec: model, dtype, layout and weights are read.
    vocab: an already built Vocabulary of the same source (the CLI builds it first to check
      constraints before loading weights), or None.

  Raises:
    ParameterError("model"): the path is not a model.
  """
  from infernix_jax import models as im
  source = model_source(spec)
  try:
    cfg, model, _ = im.load_model(spec.model, dtype=spec.dtype, layout=spec.resolved_layout,
                                  weights=spec.weights)
  except FileNotFoundError as e:
    raise ParameterError("model", str(e)) from None
  name = Path(spec.model).name if spec.model is not None else Path(source).name
  return Target(cfg=cfg, model=model, vocab=vocab or vocabulary(source),
                tokenizer=im.load_tokenizer(source), source=source, name=name)


def build_engine(spec: EngineSpec, *, target: Target | None = None,
                 compiler: Any = None) -> Assembly:
  """Assembles the engine `spec` describes.

  Args:
    spec: the engine spec (validated here).
    target: a target already in memory (training, tiny test models); None loads `spec.model`.
    compiler: a `constrain.ConstraintCompiler` for the target's vocabulary to share (None: a
      new one).

  Returns:
    The `Assembly` (engine, target, drafter, compiler).

  Raises:
    ParameterError: an invalid spec field or drafter option.
  """
  from infernix_jax import constrain as ic
  from infernix_jax import models as im
  from infernix_jax.runtime import compile_cache, drafters
  from infernix_jax.runtime.engine import Engine

  spec.validate(files=target is None)
  compile_cache.enable(spec.compile_cache)
  if target is None:
    target = load_target(spec)
  compiler = compiler if compiler is not None else ic.ConstraintCompiler(target.vocab)

  def load_model(path):
    cfg, model, _ = im.load_model(path, dtype=spec.dtype, layout=spec.resolved_layout,
                                  weights=spec.weights)
    return cfg, model

  drafter = drafters.create(spec.drafter, spec.drafter_config(),
                            target=(target.cfg, target.model), load_model=load_model,
                            jump_forward=spec.resolved_jump_forward)
  engine = Engine(target.model, target.vocab, drafter, lanes=spec.lanes,
                  capacity=spec.capacity, bridge=spec.bridge, masked_q=spec.masked_q,
                  compiler=compiler, callback_rounds=spec.callback_rounds, cfg=target.cfg,
                  device_automaton=spec.device_automaton, mesh=spec.device_mesh(),
                  acceptance=spec.acceptance, device_rounds=spec.device_rounds)
  return Assembly(spec=spec, engine=engine, target=target, drafter=drafter, compiler=compiler)


def _integer(field: str, value: Any, least: int) -> None:
  if isinstance(value, bool) or not isinstance(value, int) or value < least:
    raise ParameterError(field, f"{field}={value!r} must be an integer >= {least}")


def _one_of(field: str, value: Any, allowed: Sequence[str]) -> None:
  if value not in allowed:
    raise ParameterError(field, f"{field}={value!r} must be one of {', '.join(allowed)}")
