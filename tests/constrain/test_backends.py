"""Constraint backends: the registry, conformance, batch filling and the one compile cache.

The matrices iterate over `backends.names()`: a newly registered backend is tested by itself
(a constraint its `check` refuses is skipped for it).
"""

from __future__ import annotations

import random

import numpy as np
import pytest

from infernix_jax import constrain as ic
from infernix_jax import mask_layout
from infernix_jax.constrain import backends, trie
from infernix_jax.constrain.backends.base import fill_rows
from tests.constrain.conftest import TOY_EOS, toy_vocab

# name -> constraint, per vocabulary (toy: 29 byte-ish tokens; qwen3: the real tokenizer).
TOY_GBNF = 'root ::= "{" ("\\"a\\":" | "\\"b\\":") ("1" | "12") "}"\n'
TOY = {
    "choice": ic.OutputConstraint.choice(["ab", "abc", "ba", "a", "\u00e9", "{}", "12"]),
    "regex": ic.OutputConstraint.regex("(ab|ba)+c?"),
    "json_schema": ic.OutputConstraint.json_schema(
        '{"type":"object","properties":{"a":{"type":"integer"}},"required":["a"]}'),
    "gbnf": ic.OutputConstraint.grammar(TOY_GBNF),
}
QWEN3 = {
    "choice": ic.OutputConstraint.choice(
        ["get_user", "get_user_info", "slack.send_message", "caf\u00e9", "\u65e5\u672c", "a"]),
    "regex": ic.OutputConstraint.regex("[a-z]{2,6}(-[0-9]{1,3})?"),
    "json_schema": ic.OutputConstraint.json_schema(
        '{"type":"object","properties":{"name":{"type":"string","maxLength":8},'
        '"n":{"type":"integer"}},"required":["name"]}'),
    "gbnf": ic.OutputConstraint.grammar('root ::= "yes" | "no" | ("maybe " [0-9]+)\n'),
}


@pytest.fixture(params=["toy", "qwen3"])
def vocab_and_specs(request):
  if request.param == "toy":
    return toy_vocab(), TOY
  return request.getfixturevalue("qwen3_vocab"), QWEN3


def _compile_or_skip(compiler, spec, name):
  try:
    backends.get(name).check(spec)
  except ic.UnsupportedConstraintError:
    pytest.skip(f"the {name} backend does not express {spec.kind.value}")
  return compiler.compile(spec, backend=name)


def _legal(session, vocab) -> np.ndarray:
  buf = np.zeros(vocab.mask_words, np.int32)
  session.fill_mask(buf)
  return np.flatnonzero(mask_layout.unpack(buf, vocab.size))


def _random_rows(rng, compiled, vocab, b, k):
  """B (committed tokens, draft chain) pairs: mostly legal drafts, some EOS, some illegal."""
  eos = set(vocab.eos_ids)
  rows = []
  for _ in range(b):
    scratch = compiled.new_session()
    committed = []
    for _ in range(rng.randint(0, 2)):
      legal = [t for t in _legal(scratch, vocab).tolist() if t not in eos]
      if not legal:
        break
      committed.append(rng.choice(legal))
      scratch.accept(committed[-1:])
    drafts, live = [], True
    for _ in range(k):
      r = rng.random()
      legal = _legal(scratch, vocab).tolist() if live else []
      text = [t for t in legal if t not in eos]
      if text and r < 0.75:
        t = rng.choice(text)
      elif r < 0.85:
        t = int(vocab.eos_ids[0])
      else:
        t = rng.randrange(vocab.size)
      drafts.append(t)
      if live and t in text:
        scratch.accept([t])
      else:
        live = False
    rows.append((committed, drafts))
  return rows


# --- registry ------------------------------------------------------------------------------------


def test_registry_names_and_unknown_name():
  assert {"xgrammar", "trie"} <= set(backends.names())
  assert backends.names()[:2] == ("xgrammar", "trie")
  for name in backends.names():
    assert backends.get(name).name == name
  with pytest.raises(ValueError) as e:
    backends.get("fsm")
  for name in backends.names():
    assert name in str(e.value)
  c = ic.ConstraintCompiler(toy_vocab())
  with pytest.raises(ValueError) as e:
    c.compile(TOY["choice"], backend="fsm")
  assert all(name in str(e.value) for name in backends.names())
  with pytest.raises(ValueError):
    TOY["choice"].with_backend("fsm")
  with pytest.raises(ValueError):
    c.compile(ic.OutputConstraint(TOY["choice"].kind, TOY["choice"].source, backend="fsm"))
  with pytest.raises(ValueError):
    backends.register(type("Other", (), {"name": "trie"})())
  with pytest.raises(ValueError):
    backends.register(type("Auto", (), {"name": "auto"})())


def test_register_lazy_entry(monkeypatch):
  monkeypatch.setitem(backends._REGISTRY, "xgrammar-copy",
                      "infernix_jax.constrain.backends.xgrammar:XGrammarBackend")
  with pytest.raises(ValueError):  # the class is named "xgrammar"
    backends.get("xgrammar-copy")
  with pytest.raises(ValueError):
    backends.register("no-colon", name="x")


def test_resolve_auto_routing():
  big = ic.OutputConstraint.choice([f"v{i}" for i in range(trie.threshold())])
  dup = ic.OutputConstraint.choice(["v0"] * trie.threshold())  # one distinct value
  assert backends.resolve(big) == "trie"
  assert backends.resolve(dup) == "xgrammar"
  assert backends.resolve(TOY["choice"]) == "xgrammar"
  assert backends.resolve(TOY["regex"]) == backends.auto_order().get("regex", ("xgrammar",))[0]
  assert backends.resolve(big.with_backend("xgrammar")) == "xgrammar"
  assert backends.resolve(big.with_backend("xgrammar"), "trie") == "trie"  # argument wins
  assert backends.resolve(ic.OutputConstraint.choice([]), "auto") == "xgrammar"


def test_auto_follows_the_threshold_through_the_cache():
  c = ic.ConstraintCompiler(toy_vocab())
  spec = ic.OutputConstraint.choice(["ab", "abc", "ba"])
  old = trie.threshold()
  try:
    trie.set_threshold(3)
    assert c.compile(spec).backend == "trie"
    trie.set_threshold(4)
    again = c.compile(spec)  # the exact-source alias of "auto" holds the threshold
    assert again.backend == "xgrammar" and again.cache_status == "built"
  finally:
    trie.set_threshold(old)


# --- the spec field and the one cache -----------------------------------------------------------


def test_backend_field_and_explicit_override():
  c = ic.ConstraintCompiler(toy_vocab())
  spec = TOY["choice"]
  assert spec.backend == "auto" and spec.with_backend("trie").backend == "trie"
  assert c.compile(spec).backend == "xgrammar"        # below the threshold
  assert c.compile(spec.with_backend("trie")).backend == "trie"
  assert c.compile(spec.with_backend("trie"), backend="xgrammar").backend == "xgrammar"


def test_one_cache_serves_every_backend():
  c = ic.ConstraintCompiler(toy_vocab())
  spec = TOY["choice"]
  first = {name: c.compile(spec, backend=name) for name in ("trie", "xgrammar")}
  assert len(c) == 2 and c.stats.built == 2
  assert first["trie"].key != first["xgrammar"].key
  assert c.cache_bytes_used == first["trie"].nbytes + first["xgrammar"].nbytes
  for name in ("trie", "xgrammar"):
    again = c.compile(ic.OutputConstraint.choice(list(reversed(spec.source))), backend=name)
    assert again.cache_status == "hit" and again.grammar is first[name].grammar
    assert again.backend == name and again.compiled_source == first[name].compiled_source
    assert again.dropped == () and again.nbytes > 0
  assert c.stats.hits == 2 and len(c) == 2
  small = ic.ConstraintCompiler(toy_vocab(), cache_bytes=first["trie"].nbytes)
  small.compile(spec, backend="trie")
  small.compile(spec, backend="xgrammar")  # the LRU budget evicts across backends
  assert len(small) <= 1 and small.stats.evictions >= 1


def test_unsupported_constraint_names_backend_and_construct():
  c = ic.ConstraintCompiler(toy_vocab())
  with pytest.raises(ic.UnsupportedConstraintError) as e:
    c.compile(TOY["regex"], backend="trie")
  assert e.value.backend == "trie" and "regex" in e.value.construct
  assert "trie" in str(e.value) and "regex" in str(e.value)
  with pytest.raises(ic.UnsupportedConstraintError) as e:
    c.compile(TOY["choice"].with_framing("qwen"), backend="trie")
  assert e.value.construct == "framed output"
  assert len(c) == 0 and c.stats.errors == 2


# --- every backend x every constraint it supports -----------------------------------------------


@pytest.mark.parametrize("name", backends.names())
@pytest.mark.parametrize("kind", list(TOY))
def test_backend_fill_batch_equals_rowwise_lookahead(name, kind, vocab_and_specs):
  vocab, specs = vocab_and_specs
  compiler = ic.ConstraintCompiler(vocab)
  compiled = _compile_or_skip(compiler, specs[kind], name)
  assert compiled.backend == name
  backend = backends.get(name)
  rng = random.Random(f"{name}/{kind}/{vocab.size}")
  b, k = 10, 4
  rows = _random_rows(rng, compiled, vocab, b, k)
  drafts = np.array([d for _, d in rows], np.int32)
  n_drafts = np.array([rng.randint(0, k) for _ in range(b)])
  sessions, refs = [], []
  for i, (committed, _) in enumerate(rows):
    if i % 4 == 3:
      sessions.append(None)
      refs.append(None)
      continue
    s, ref = compiled.new_session(), compiled.new_session()
    s.accept(committed)
    ref.accept(committed)
    assert isinstance(s, backends.ConstraintSession) and s.backend == name
    sessions.append(s)
    refs.append(ref)
  for _ in range(2):  # the second pass sees cached committed masks
    out = np.full((b, k + 1, vocab.mask_words), -7, np.int32)
    states = backend.fill_batch(sessions, drafts, n_drafts, out)
    assert states.shape == (b, k + 1) and states.dtype == np.int8
    for i, ref in enumerate(refs):
      if ref is None:
        assert (out[i] == -7).all()  # not this backend's row: untouched
        continue
      n = int(n_drafts[i])
      buf = np.zeros((n + 1, vocab.mask_words), np.int32)
      want = ref.lookahead(drafts[i, :n], buf)
      np.testing.assert_array_equal(states[i, :n + 1], want)
      np.testing.assert_array_equal(out[i, :n + 1], buf)
      assert (states[i, n + 1:] == mask_layout.UNREACHABLE).all() and not out[i, n + 1:].any()
  got, _ = ic.fill_batch(sessions, drafts, n_drafts, out, batch_threads=2)
  np.testing.assert_array_equal(got[[s is not None for s in sessions]],
                                states[[s is not None for s in sessions]])


def test_fill_rows_matches_a_backend_batch_path():
  vocab = toy_vocab()
  compiled = ic.ConstraintCompiler(vocab).compile(TOY["choice"], backend="trie")
  sessions = [compiled.new_session(), None, compiled.new_session(prefix=b"a")]
  drafts = np.array([[2, 3, TOY_EOS], [0, 0, 0], [3, 4, 2]], np.int32)
  n = np.array([3, 0, 2])
  out_a = np.zeros((3, 4, vocab.mask_words), np.int32)
  out_b = np.zeros_like(out_a)
  sa = backends.get("trie").fill_batch(sessions, drafts, n, out_a)
  sb = fill_rows(sessions, drafts, n, out_b)
  np.testing.assert_array_equal(sa[[0, 2]], sb[[0, 2]])
  np.testing.assert_array_equal(out_a, out_b)


# --- ic.fill_batch groups rows by backend -------------------------------------------------------


class _Spy:
  def __init__(self, backend):
    self.backend, self.calls = backend, []

  def __call__(self, sessions, drafts, n_drafts, out, *, threads=0):
    self.calls.append([i for i, s in enumerate(sessions) if s is not None])
    return type(self.backend).fill_batch(self.backend, sessions, drafts, n_drafts, out,
                                         threads=threads)


def test_fill_batch_one_call_per_backend(monkeypatch):
  vocab = toy_vocab()
  c = ic.ConstraintCompiler(vocab)
  t = c.compile(TOY["choice"], backend="trie")
  x = c.compile(TOY["gbnf"], backend="xgrammar")
  spies = {}
  for name in ("trie", "xgrammar"):
    spies[name] = _Spy(backends.get(name))
    monkeypatch.setattr(backends.get(name), "fill_batch", spies[name])
  sessions = [x.new_session(), t.new_session(), None, t.new_session(), x.new_session(), None]
  refs = [x.new_session(), t.new_session(), None, t.new_session(), x.new_session(), None]
  drafts = np.array([[8, 10, 2], [2, 3, 4], [0, 0, 0], [3, 2, 0], [15, 2, 16], [1, 1, 1]],
                    np.int32)
  n = np.array([3, 2, 0, 3, 1, 3])
  out = np.full((6, 4, vocab.mask_words), -3, np.int32)
  states, enabled = ic.fill_batch(sessions, drafts, n, out)
  assert spies["trie"].calls == [[1, 3]] and spies["xgrammar"].calls == [[0, 4]]
  assert enabled.tolist() == [True, True, False, True, True, False]
  for i, ref in enumerate(refs):
    if ref is None:
      assert (out[i] == -3).all() and (states[i] == mask_layout.READY).all()
      continue
    buf = np.zeros((n[i] + 1, vocab.mask_words), np.int32)
    np.testing.assert_array_equal(states[i, :n[i] + 1], ref.lookahead(drafts[i, :n[i]], buf))
    np.testing.assert_array_equal(out[i, :n[i] + 1], buf)
    assert (states[i, n[i] + 1:] == mask_layout.UNREACHABLE).all()
  ic.fill_batch([t.new_session(), t.new_session()], drafts[:2], n[:2], out[:2].copy())
  assert spies["trie"].calls[-1] == [0, 1] and len(spies["xgrammar"].calls) == 1


def test_fill_batch_reaches_a_newly_registered_backend(monkeypatch):
  """A third backend is one registry entry: ic.fill_batch routes its rows to it."""
  vocab = toy_vocab()
  x = ic.ConstraintCompiler(vocab).compile(TOY["gbnf"])
  calls = []

  class Echo:
    name = "echo"

    def fill_batch(self, sessions, drafts, n_drafts, out, *, threads=0):
      calls.append(sum(s is not None for s in sessions))
      return fill_rows(sessions, drafts, n_drafts, out)

  class EchoSession:
    backend = "echo"

    def __init__(self, inner):
      self.inner = inner

    def lookahead(self, drafts, out):
      return self.inner.lookahead(drafts, out)

  monkeypatch.setitem(backends._REGISTRY, "echo", Echo())
  sessions = [EchoSession(x.new_session()), x.new_session(), EchoSession(x.new_session())]
  out = np.zeros((3, 2, vocab.mask_words), np.int32)
  states, _ = ic.fill_batch(sessions, np.full((3, 1), 8, np.int32), np.ones(3, int), out)
  assert calls == [2] and "echo" in backends.names()
  np.testing.assert_array_equal(states[0], states[1])
  np.testing.assert_array_equal(out[0], out[2])


# --- framed grammars compile through the same cache ---------------------------------------------


def test_framed_grammars_compile_through_the_constraint_cache(qwen3_vocab):
  from infernix_jax.constrain import framing as fr

  c = ic.ConstraintCompiler(qwen3_vocab)
  tools = fr.parse_tools('[{"type":"function","function":{"name":"f","parameters":'
                         '{"type":"object","properties":{"x":{"type":"integer"}}}}}]')
  first = fr.prepare_output(qwen3_vocab, fr.OutputPhase.THINKING, tools=tools, compiler=c)
  again = fr.prepare_output(qwen3_vocab, fr.OutputPhase.THINKING, tools=tools, compiler=c)
  assert first.compiled.cache_status == "built" and again.compiled.cache_status == "hit"
  assert len(c) == 1 and first.compiled.grammar.backend == "xgrammar"
  assert first.compiled.grammar.constraint.framing == "qwen"
  s = first.new_session()
  assert isinstance(s, backends.ConstraintSession) and s.backend == "xgrammar"
  plain = c.compile(QWEN3["gbnf"]).new_session()
  out = np.zeros((2, 2, qwen3_vocab.mask_words), np.int32)
  drafts = np.array([[qwen3_vocab.token_id("<think>", control=True)], [0]], np.int32)
  states, _ = ic.fill_batch([s, plain], drafts, np.ones(2, int), out)
  ref = first.new_session()
  buf = np.zeros((2, qwen3_vocab.mask_words), np.int32)
  np.testing.assert_array_equal(states[0], ref.lookahead(drafts[0], buf))
  np.testing.assert_array_equal(out[0], buf)
