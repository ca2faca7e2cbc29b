"""Compile cache: keys, hits, byte-budget eviction, shared cold builds and the cold-slot limit."""

from __future__ import annotations

import threading
import time

import numpy as np
import pytest

from infernix_jax import constrain as ic
from infernix_jax.constrain import compiler as cmod
from tests.constrain.conftest import toy_vocab

SCHEMA = '{"type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "string"}}}'


def test_hit_and_canonical_keys():
  c = ic.ConstraintCompiler(toy_vocab())
  first = c.compile(ic.OutputConstraint.json_schema(SCHEMA))
  assert first.cache_status == "built" and first.compile_seconds > 0
  again = c.compile(ic.OutputConstraint.json_schema(SCHEMA))
  assert again.cache_status == "hit" and again._entry is first._entry
  # Same JSON, other spelling: parsed and re-serialised -> the same key.
  spaced = c.compile(ic.OutputConstraint.json_schema(" ".join(SCHEMA.replace(":", " : ").split())))
  assert spaced.cache_status == "hit"
  # Property order is part of the layout: a different key.
  swapped = SCHEMA.replace('"a": {"type": "integer"}, "b": {"type": "string"}',
                           '"b": {"type": "string"}, "a": {"type": "integer"}')
  assert c.compile(ic.OutputConstraint.json_schema(swapped)).cache_status == "built"
  # Options and framing-free kinds are part of the key.
  assert c.compile(ic.OutputConstraint.json_schema(SCHEMA, max_whitespace=2)).cache_status == \
      "built"
  assert c.compile(ic.OutputConstraint.json_schema(SCHEMA, lenient=True)).cache_status == "built"
  assert c.compile(ic.OutputConstraint.regex("a|b")).cache_status == "built"
  assert c.compile(ic.OutputConstraint.grammar('root ::= "a" | "b"\n')).cache_status == "built"
  assert c.stats.hits == 2 and c.stats.built == 6 and len(c) == 6
  # Another vocabulary: another compiler, another key.
  other = ic.ConstraintCompiler(toy_vocab(padded_size=64))
  assert other.compile(ic.OutputConstraint.json_schema(SCHEMA)).key != first.key


def test_errors_are_not_cached():
  c = ic.ConstraintCompiler(toy_vocab())
  for _ in range(2):
    with pytest.raises(ic.ConstraintError):
      c.compile(ic.OutputConstraint.grammar("root ::= ("))
  with pytest.raises(ic.ChoiceError):
    c.compile(ic.OutputConstraint.choice([]))
  assert len(c) == 0 and c.stats.errors == 3


def test_byte_budget_evicts_least_recently_used():
  c = ic.ConstraintCompiler(toy_vocab())
  a = c.compile(ic.OutputConstraint.choice(["ab"]))
  budget = int(a.nbytes * 2.5)
  c = ic.ConstraintCompiler(toy_vocab(), cache_bytes=budget)
  ca = c.compile(ic.OutputConstraint.choice(["ab"]))
  session = ca.new_session()
  c.compile(ic.OutputConstraint.choice(["ba"]))
  c.compile(ic.OutputConstraint.choice(["ab"]))               # refresh "ab"
  c.compile(ic.OutputConstraint.choice(["c"]))                # evicts "ba" (least recent)
  assert c.cache_bytes_used <= budget and c.stats.evictions >= 1
  assert ic.OutputConstraint.choice(["ab"]) in c
  assert ic.OutputConstraint.choice(["ba"]) not in c
  # A result still held by a session outlives its eviction.
  c.clear()
  assert len(c) == 0 and c.cache_bytes_used == 0
  buf = np.zeros((3, 1), np.int32)
  assert list(session.lookahead([2, 3], out=buf)) == [0, 0, 0]
  assert c.compile(ic.OutputConstraint.choice(["ab"])).cache_status == "built"


def _instrument(monkeypatch, delay: float, gate: threading.Event | None = None):
  """Wraps ConstraintCompiler._build: counts builds and the peak number running at once.
  With `gate`, each build also waits (at most 30 s) until the gate is set."""
  real = cmod.ConstraintCompiler._build
  lock = threading.Lock()
  info = {"calls": 0, "running": 0, "peak": 0}

  def slow_build(self, key, constraint):
    with lock:
      info["calls"] += 1
      info["running"] += 1
      info["peak"] = max(info["peak"], info["running"])
    try:
      time.sleep(delay)
      if gate is not None:
        gate.wait(timeout=30)
      return real(self, key, constraint)
    finally:
      with lock:
        info["running"] -= 1

  monkeypatch.setattr(cmod.ConstraintCompiler, "_build", slow_build)
  return info


def _run_threads(fns):
  results = [None] * len(fns)
  barrier = threading.Barrier(len(fns))

  def run(i):
    barrier.wait()
    try:
      results[i] = fns[i]()
    except Exception as e:  # noqa: BLE001 (collected for the assertion)
      results[i] = e

  threads = [threading.Thread(target=run, args=(i,)) for i in range(len(fns))]
  for t in threads:
    t.start()
  for t in threads:
    t.join(timeout=60)
  return results


def test_concurrent_cold_compiles_share_one_build(monkeypatch):
  info = _instrument(monkeypatch, 0.3)
  c = ic.ConstraintCompiler(toy_vocab())
  spec = ic.OutputConstraint.json_schema(SCHEMA)
  results = _run_threads([lambda: c.compile(spec)] * 6)
  statuses = sorted(r.cache_status for r in results)
  assert info["calls"] == 1
  assert statuses == ["built"] + ["waited"] * 5
  assert len({id(r._entry) for r in results}) == 1
  assert c.stats.built == 1 and c.stats.waited == 5


@pytest.mark.parametrize("backend", ["xgrammar", "auto"])
def test_shared_build_error_reaches_every_waiter(monkeypatch, backend):
  from infernix_jax.constrain import backends

  info = _instrument(monkeypatch, 0.3)
  c = ic.ConstraintCompiler(toy_vocab())
  spec = ic.OutputConstraint.regex("(a").with_backend(backend)
  results = _run_threads([lambda: c.compile(spec)] * 4)
  # One shared build per backend tried ("auto" tries each candidate once).
  assert info["calls"] == len(backends.candidates(spec))
  assert all(isinstance(r, ic.RegexError) for r in results)
  assert len(c) == 0


def test_at_most_two_cold_compiles_per_vocabulary(monkeypatch):
  gate = threading.Event()
  gate.set()  # open for the first part
  info = _instrument(monkeypatch, 0.25, gate)
  vocab = toy_vocab()
  compilers = [ic.ConstraintCompiler(vocab), ic.ConstraintCompiler(vocab)]  # shared slots
  specs = [ic.OutputConstraint.choice([w]) for w in ("a", "b", "ab", "ba", "abc", "c")]
  results = _run_threads([lambda i=i: compilers[i % 2].compile(specs[i]) for i in range(6)])
  assert all(r.cache_status == "built" for r in results)
  assert info["calls"] == 6 and info["peak"] == 2
  # A hit takes no cold slot: it answers while both slots are busy. The two cold builds hold
  # their slots until the hit has answered (the gate), so a hit that queued for a slot would
  # only return after the gate's 30 s timeout, with the builds gone.
  gate.clear()
  hit_spec = specs[0]
  slow = [lambda w=w: compilers[0].compile(ic.OutputConstraint.choice([w])) for w in ("ca", "cb")]

  def hit():
    while info["running"] < 2:  # both slots taken
      time.sleep(0.01)
    got = compilers[0].compile(hit_spec)
    busy = info["running"]
    gate.set()
    return got, busy

  results = _run_threads(slow + [hit])
  got, busy = results[2]
  assert got.cache_status == "hit" and busy == 2
  assert all(r.cache_status == "built" for r in results[:2])


def test_default_budget():
  assert ic.ConstraintCompiler(toy_vocab()).cache_bytes == 256 * 1024 * 1024


def test_tokenizer_index_built_once_per_vocabulary_under_threads():
  from infernix_jax.constrain import _xgr

  vocab = toy_vocab()
  calls = []

  def slow_factory():
    calls.append(1)
    time.sleep(0.2)
    return object()

  results = _run_threads([lambda: vocab.lazy("probe", slow_factory)] * 6)
  assert len(calls) == 1 and len({id(r) for r in results}) == 1
  infos = _run_threads([lambda: _xgr.tokenizer_info(vocab)] * 4)
  assert len({id(i) for i in infos}) == 1
  # Facts passed explicitly: EOS as stop tokens, control ids spelled outside UTF-8 (never
  # text, still matchable by id), tokenizer V as size.
  info = infos[0]
  assert info.stop_token_ids == [0]
  assert bytes(info.decoded_vocab[1]) == _xgr.CONTROL_PREFIX + vocab.token_bytes[1]
  assert info.vocab_size == vocab.size


@pytest.mark.parametrize("spec, error", [
    (ic.OutputConstraint.choice("abc"), ic.ChoiceError),
    (ic.OutputConstraint.choice([1, 2]), ic.ChoiceError),
    (ic.OutputConstraint.grammar(None), ic.GrammarSyntaxError),
    (ic.OutputConstraint.regex(b"a"), ic.RegexError),
    (ic.OutputConstraint.json_schema(123), ic.SchemaError),
    (ic.OutputConstraint.json_schema("{}", max_whitespace=-1), ic.FeatureConflictError),
    (ic.OutputConstraint.json_object().with_framing("qwen3-thinking"), ic.FeatureConflictError),
])
def test_malformed_constraints_raise_constraint_errors(spec, error):
  c = ic.ConstraintCompiler(toy_vocab())
  with pytest.raises(error):
    c.compile(spec)
  assert len(c) == 0
