"""The drafter registry: names, errors that name the parameter and list the known drafters
and options, option validation, and drafters written the way the README shows (one file, no
engine hooks; one registered from outside the package) decoding exactly."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from infernix_jax import constrain as ic
from infernix_jax.errors import ParameterError
from infernix_jax.pallas import OneHotQ
from infernix_jax.runtime import Engine, GenerationRequest, drafters
from infernix_jax.runtime.drafters.base import Drafter, DrafterOptions, OptionError, Proposal
from infernix_jax.testing import exact_oracle as h


@dataclasses.dataclass(frozen=True, eq=False)
class Repeat(Drafter):
  """The README's example: drafts the anchor K times."""

  name = "repeat"

  def propose(self, params, state, inp):
    drafts = np.repeat(np.asarray(inp.anchor, np.int32)[:, None], self.k, axis=1)  # [B, K]
    return Proposal(drafts, np.minimum(inp.limit, self.k).astype(np.int32), OneHotQ()), state


def _param(fn) -> ParameterError:
  with pytest.raises(ParameterError) as info:
    fn()
  return info.value


def _reqs():
  spec = ic.OutputConstraint.choice(["abc", "ab", "ba1", "cab", "x{y}"])
  return [GenerationRequest([1, 1, 2, 1, 1, 2, 1], max_tokens=6,
                            constraint=spec if i else None) for i in range(2)]


def test_names_and_errors():
  assert set(drafters.names()) >= {"none", "ngram", "jump", "draft", "mtp", "dflash", "dflash2"}
  e = _param(lambda: drafters.create("magic"))
  assert e.param == "drafter" and "unknown drafter 'magic'" in e.message and "ngram" in e.message
  e = _param(lambda: drafters.create("ngram", k=0))
  assert e.param == "drafter_options.k" and "k=0 must be an integer >= 1" in e.message
  assert _param(lambda: drafters.create("draft", k=2)).param == "drafter_options.model"
  e = _param(lambda: drafters.create("mtp", k=2))
  assert "target model" in e.message
  e = _param(lambda: drafters.create("none", jump_forward=True))
  assert e.param == "jump_forward" and "'jump'" in e.message
  with pytest.raises(ValueError, match="already registered"):
    drafters.register("ngram", lambda o, c: None, help="")
  d = drafters.create("ngram", k=3, jump_forward=True)
  assert d.name == "jump+ngram" and d.k == 3 and not d.on_device
  assert drafters.create("jump", {"k": 2}).name == "jump"


def test_jump_forward_default_and_rule_are_one():
  """The spec, the factory and the public registry share one jump-forward rule: on by
  default exactly for drafters that draft, refused around one that drafts nothing."""
  from infernix_jax.runtime.build import EngineSpec
  quiet = [name for name in drafters.names() if not drafters.entry(name).drafts]
  assert "none" in quiet
  for name in drafters.names():
    assert EngineSpec(drafter=name).resolved_jump_forward == drafters.entry(name).drafts
    assert EngineSpec(drafter=name, jump_forward=False).resolved_jump_forward is False
  for name in quiet:
    by_spec = _param(lambda: EngineSpec(drafter=name, jump_forward=True).validate(files=False))
    by_factory = _param(lambda: drafters.create(name, jump_forward=True))
    assert (by_spec.param, by_spec.message) == (by_factory.param, by_factory.message)
    assert by_spec.param == "jump_forward"


def test_options_validation():
  """Unknown fields name the drafter and list its fields; command-line strings convert to
  the field's type; an options mapping and keyword overrides combine."""
  assert drafters.fields("ngram") == {"k": 4, "n": 3, "min_n": 1, "tree": False,
                                     "overdraft": 2}
  assert drafters.fields("none") == {}
  e = _param(lambda: drafters.options("ngram", {"m": 2}))
  assert e.param == "drafter_options.m"
  assert "'ngram'" in e.message and all(f in e.message for f in ("k", "n", "min_n"))
  assert _param(lambda: drafters.options("none", {"k": 2})).param == "drafter_options.k"
  opts = drafters.options("ngram", {"k": "3", "n": "2"})
  assert (opts.k, opts.n) == (3, 2)
  assert drafters.options("draft", {"model": "m", "sampling": "true"}).sampling is True
  assert drafters.options("dflash2", {"temperature": "0.5"}).temperature == 0.5
  e = _param(lambda: drafters.options("ngram", {"k": "three"}))
  assert e.param == "drafter_options.k" and "'three'" in e.message
  e = _param(lambda: drafters.options("draft", {"model": "m", "sampling": "maybe"}))
  assert e.param == "drafter_options.sampling"
  assert drafters.create("ngram", {"k": 2}, n=2).k == 2


def test_custom_drafter_is_exact():
  """A drafter written as the README shows reproduces ordinary greedy decoding."""
  cfg, model = h.tiny_model()
  want = Engine(model, h.toy_vocab(), None, lanes=2, capacity=32).generate(_reqs())
  got = Engine(model, h.toy_vocab(), Repeat(k=3), lanes=2, capacity=32).generate(_reqs())
  assert [r.token_ids for r in got] == [r.token_ids for r in want]
  assert sum(r.drafted for r in got) > 0


@dataclasses.dataclass(frozen=True)
class EchoOptions(DrafterOptions):
  """A user's drafter options: K plus one field of its own."""

  shift: int = 0  # drafts anchor + shift (0: the anchor itself)

  def validate(self) -> None:
    super().validate()
    if self.shift < 0:
      raise OptionError("shift", f"shift={self.shift} must be >= 0")


def _build_echo(options: EchoOptions, context) -> Drafter:
  return Repeat(k=options.k)


def test_registered_from_outside_builds_and_decodes_exactly(monkeypatch):
  """A drafter registered through `drafters.register` with its own options dataclass is
  built by `create` (options validated, errors naming its field) and decodes exactly."""
  monkeypatch.setattr(drafters, "_REGISTRY", dict(drafters._REGISTRY))  # leaves no trace
  drafters.register("test-echo", _build_echo, options=EchoOptions, help="test drafter")
  assert drafters.fields("test-echo") == {"k": 4, "shift": 0}
  e = _param(lambda: drafters.create("test-echo", {"shift": "-1"}))
  assert e.param == "drafter_options.shift" and "'test-echo'" in e.message
  d = drafters.create("test-echo", {"k": "3", "shift": "0"})
  assert d.k == 3
  cfg, model = h.tiny_model()
  want = Engine(model, h.toy_vocab(), None, lanes=2, capacity=32).generate(_reqs())
  got = Engine(model, h.toy_vocab(), d, lanes=2, capacity=32).generate(_reqs())
  assert [r.token_ids for r in got] == [r.token_ids for r in want]
  assert sum(r.drafted for r in got) > 0


@pytest.mark.parametrize("name,options,q_kind", [
    ("mtp", {}, "onehot"), ("dflash", {}, "onehot"),
    ("dflash2", {}, "sparse"), ("dflash2", {"temperature": 0.5}, "sparse"),
    ("eagle3", {}, "onehot"), ("eagle3", {"sampling": True}, "sparse"),
    ("dspark", {}, "onehot"), ("dspark", {"sampling": True}, "sparse")])
def test_network_drafters_q_follows_their_temperature(name, options, q_kind):
  """One rule for every network drafter: a network that draws its drafts at a temperature
  hands Finish the q it drew from (and masked q applies); a greedy one hands a one-hot q."""
  cfg, model = h.tiny_model()
  d = drafters.create(name, {"k": 2, "weights": "random", **options}, target=(cfg, model))
  assert (d.q_kind, d.sampling) == (q_kind, q_kind != "onehot")
