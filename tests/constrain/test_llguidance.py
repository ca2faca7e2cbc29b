"""llguidance backend: soundness against independent oracles, transactions, parity with xgrammar.

Oracles: the JSON-Schema-Test-Suite labels, ``jsonschema`` on completed random walks, the
vocabulary's own token classes (control / unused / padding never legal), a per-token replay
of every mask bit, and xgrammar's masks on the same walks (differences allowed only where the
two libraries' JSON languages are known to differ; see `test_masks_equal_xgrammar`).
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from decimal import Decimal
from pathlib import Path

import numpy as np
import pytest

from infernix_jax import constrain as ic
from infernix_jax import mask_layout
from infernix_jax.testing import schema_suite as _schema_suite
from infernix_jax.testing.schema_oracle import SearchBudgetExceeded, Walker
from infernix_jax.testing.llguidance_fork import LLGuidanceFork, value_chars
from infernix_jax.constrain.backends.llguidance import LLGuidanceBackend
from infernix_jax.testing.random_walk import random_walk
from infernix_jax.mask_layout import DEAD_END, READY, UNREACHABLE
from tests.constrain.conftest import SHARED_DATA, TOY_CONTROL, TOY_EOS, toy_vocab
from tests.constrain.conftest import smollm2_vocab  # noqa: F401  (fixture)

SUITE = SHARED_DATA / "json-schema-test-suite"
EOS = 256
BACKEND = LLGuidanceBackend()


@pytest.fixture(scope="module")
def byte_vocab():
  return ic.Vocabulary.from_tokens([bytes([i]) for i in range(256)] + [b"<eos>"],
                                   eos_ids=[EOS], name="bytes")


def build(vocab, constraint):
  return BACKEND.build(vocab, constraint).grammar


def session(vocab, constraint, prefix=b""):
  return BACKEND.new_session(build(vocab, constraint), prefix)


def legal(s) -> np.ndarray:
  """bool [V]: the session's committed legal set (through lookahead of no drafts)."""
  buf = np.zeros((1, s.vocab.mask_words), np.int32)
  s.lookahead([], buf)
  return mask_layout.unpack(buf, s.vocab.size)[0]


def test_import_is_lazy_and_torch_free():
  child = textwrap.dedent("""
      import json, sys
      import infernix_jax
      from infernix_jax import constrain as ic
      from infernix_jax.constrain.backends import llguidance as backend
      before = "llguidance" in sys.modules
      vocab = ic.Vocabulary.from_tokens([b"<eos>", b"{", b"}"], eos_ids=[0])
      backend.LLGuidanceBackend().build(vocab, ic.OutputConstraint.json_object())
      heavy = sorted(m for m in sys.modules if m.split(".")[0] in ("torch", "transformers", "jax"))
      print(json.dumps({"before": before, "after": "llguidance" in sys.modules, "heavy": heavy}))
  """)
  out = subprocess.run([sys.executable, "-c", child], capture_output=True, text=True, timeout=120,
                       cwd=Path(__file__).resolve().parents[2])
  assert out.returncode == 0, out.stderr
  r = json.loads(out.stdout.strip().splitlines()[-1])
  assert r == {"before": False, "after": True, "heavy": []}


# --- JSON-Schema-Test-Suite ------------------------------------------------------------------


def narrowing(file: str, group: str, value, draft: str) -> str | None:
  """Why a valid value is outside llguidance's generation language (None: no known reason)."""
  if file == "format.json":
    return "format is enforced (the suite treats it as an annotation)"
  if any((ord(c) < 0x20 and c not in "\b\f\n\r\t") or c == "\x7f" for c in value_chars(value)):
    return "control characters need \\u escapes, which are disabled"
  if file == "float-overflow.json":
    return "1E+308 spelled as an integer overflows"
  if draft == "draft7" and file == "ref.json" and "sibling" in group:
    return "$ref siblings are intersected (draft-07 ignores them)"
  return None


def run_suite(vocab, draft: str) -> dict:
  """Every group of one draft: compile or clean error; accepted texts replayed by a session."""
  r = {"groups": 0, "supported": 0, "cases": 0, "passed": 0, "narrowed": 0, "budget": 0,
       "rejected": 0, "failures": []}
  for path in _schema_suite.suite_files(SUITE, draft):
    text = path.read_text(encoding="utf-8")
    for g, gx in zip(json.loads(text), json.loads(text, parse_float=Decimal)):
      r["groups"] += 1
      schema = g["schema"]
      if draft == "draft7" and isinstance(schema, dict) and "$schema" not in schema:
        schema = {"$schema": _schema_suite.DRAFT7_URI, **schema}
      try:
        compiled = build(vocab, ic.OutputConstraint.json_schema(json.dumps(schema)))
      except ic.ConstraintError as e:
        r["rejected"] += 1
        if isinstance(e, ic.UnsupportedConstraintError) and e.backend != "llguidance":
          r["failures"].append((path.name, g["description"], "wrong backend name"))
        continue
      r["supported"] += 1
      walker = Walker(EOS)
      for case in gx["tests"]:
        r["cases"] += 1
        try:
          ok = walker.accepts(LLGuidanceFork(compiled.new_session()._m, EOS), case["data"])
        except SearchBudgetExceeded:
          r["budget"] += 1
          continue
        if ok:
          data = list(walker.text.encode("utf-8")) + [EOS]
          p = compiled.new_session().preview(data)
          if not (p.accepted == len(data) and p.terminated):
            r["failures"].append((path.name, case["description"], "session replay disagrees"))
            continue
        if ok == case["valid"]:
          r["passed"] += 1
        elif case["valid"] and narrowing(path.name, g["description"], case["data"], draft):
          r["narrowed"] += 1
        else:
          r["failures"].append((path.name, g["description"], case["description"],
                                "valid rejected" if case["valid"] else "INVALID ACCEPTED"))
  return r


@pytest.mark.parametrize("draft", ["draft2020-12", "draft7"])
def test_json_schema_test_suite(draft, byte_vocab):
  if not (SUITE / "tests" / draft).exists():
    pytest.skip("shared data (json-schema-test-suite) not present")
  r = run_suite(byte_vocab, draft)
  print(draft, {k: v for k, v in r.items() if k != "failures"})
  assert not r["failures"], r["failures"][:10]
  assert r["supported"] >= {"draft2020-12": 180, "draft7": 170}[draft]
  assert r["budget"] <= 5 and r["narrowed"] <= 15


# --- JSONSchemaBench random walks ------------------------------------------------------------


def _bench_files(subset: str, n: int, seed: int = 0) -> list:
  from tests.constrain.test_jsonschemabench import sample

  return sample(subset, n, seed)


def walk_subset(vocab, files, walks: int, max_tokens: int) -> tuple[int, int]:
  jsonschema = pytest.importorskip("jsonschema")
  from tests.constrain.test_jsonschemabench import validate

  rng = np.random.default_rng(0)
  compiled_n = completed = 0
  for path in files:
    text = path.read_text(encoding="utf-8")
    try:
      compiled = build(vocab, ic.OutputConstraint.json_schema(text))
    except ic.ConstraintError as e:
      assert str(e), path.name
      continue
    compiled_n += 1
    for _ in range(walks):
      s = BACKEND.new_session(compiled, b"")
      ids, terminated = random_walk(s, rng, max_tokens=max_tokens)
      if not terminated:
        continue
      completed += 1
      assert ids[-1] in vocab.eos_ids and s.terminated and s.complete
      instance = json.loads(vocab.decode(ids[:-1]).decode("utf-8"))  # strict UTF-8
      try:
        validate(json.loads(text), instance)
      except jsonschema.ValidationError as e:
        raise AssertionError(f"{path.name}: walk {instance!r} violates the schema: {e.message}")
  return compiled_n, completed


@pytest.mark.parametrize("subset", ["Github_trivial", "Github_easy", "Github_medium", "Glaiveai2K"])
def test_jsonschemabench_walks_validate(subset, byte_vocab):
  files = _bench_files(subset, 15)
  compiled_n, completed = walk_subset(byte_vocab, files, walks=2, max_tokens=800)
  assert compiled_n >= len(files) // 2
  assert completed >= compiled_n


def test_jsonschemabench_walks_validate_qwen3(qwen3_vocab):
  files = _bench_files("Github_trivial", 4, seed=1) + _bench_files("Github_easy", 2, seed=1)
  compiled_n, completed = walk_subset(qwen3_vocab, files, walks=3, max_tokens=300)
  assert compiled_n >= 3 and completed >= compiled_n


# --- brute force: every mask bit replayed; control, unused and padding never legal ------------

TOY_CONSTRAINTS = [
    ic.OutputConstraint.json_schema('{"type":"object","properties":{"a":{"type":"string"}}}'),
    ic.OutputConstraint.json_object(),
    ic.OutputConstraint.grammar('root ::= "{" ("\\"a\\":" | "\\"b\\":") ("1" | "12") "}"\n'),
    ic.OutputConstraint.regex("(ab|c)+\\[?"),
    ic.OutputConstraint.choice(["ab", "abc", "", "\u00e9", "<c>"]),
]


def _check_mask_facts(s, allowed: np.ndarray, words: np.ndarray) -> None:
  v = s.vocab
  assert not allowed[sorted(v.control_ids - set(v.eos_ids))].any()  # control: never in content
  if v.unused_ids:
    assert not allowed[sorted(v.unused_ids)].any()
  full = mask_layout.unpack(words, v.mask_words * 32)
  assert not full[v.size:].any()  # bits of ids >= V
  assert bool(allowed[list(v.eos_ids)].any()) == s.complete  # EOS legal exactly when complete


@pytest.mark.parametrize("constraint", TOY_CONSTRAINTS, ids=lambda c: c.kind.value)
def test_brute_force_toy(constraint):
  vocab = toy_vocab()
  s = session(vocab, constraint)
  rng = np.random.default_rng(1)
  for _ in range(12):
    words = np.zeros((1, vocab.mask_words), np.int32)
    s.lookahead([], words)
    allowed = mask_layout.unpack(words, vocab.size)[0]
    _check_mask_facts(s, allowed, words[0])
    for t in range(vocab.size):  # every token, legal or not, replayed through preview
      r = s.preview([t])
      assert r.accepted == int(allowed[t]), (t, vocab.token_bytes[t])
      s.discard()
      if allowed[t] and t != TOY_EOS:  # sound: the library's byte-level check agrees
        assert s._m.validate_tokens([t]) == 1, (t, vocab.token_bytes[t])
    choices = np.flatnonzero(allowed)
    if not len(choices):
      break
    s.accept([int(rng.choice(choices))])
    if s.terminated:
      break
  assert s.tokens_committed > 0


def test_brute_force_qwen3(qwen3_vocab, tok):
  v = qwen3_vocab
  assert v.mask_words * 32 > v.size  # 151,669 is not a multiple of 32: padding bits exist
  s = session(v, ic.OutputConstraint.json_schema(
      '{"type":"object","properties":{"msg":{"type":"string"},"n":{"type":"integer"}},'
      '"required":["msg","n"]}'))
  rng = np.random.default_rng(2)
  for t in tok('{"msg": "a <b> c", "n": 7}') + [v.eos_ids[0]]:  # control ids checked above
    words = np.zeros((1, v.mask_words), np.int32)
    s.lookahead([], words)
    allowed = mask_layout.unpack(words, v.size)[0]
    _check_mask_facts(s, allowed, words[0])
    probe = np.concatenate([rng.choice(v.size, 200), rng.choice(np.flatnonzero(allowed), 50),
                            sorted(v.control_ids)])
    for p in probe:
      r = s.preview([int(p)])
      assert r.accepted == int(allowed[p]), (int(p), v.token_bytes[p])
      s.discard()
    assert allowed[t], (t, v.token_bytes[t])
    s.accept([t])
  assert s.terminated


# --- parity with xgrammar ----------------------------------------------------------------------

PARITY = [
    ('{"type":"object","properties":{"name":{"type":"string"},"age":{"type":"integer"}},'
     '"required":["name","age"],"additionalProperties":false}', '{"name": "Bo b", "age": -12}'),
    ('{"type":"array","items":{"type":"number"},"minItems":1,"maxItems":3}', '[1.5, 2e3,\r\n 0]'),
    ('{"enum":["red","green",3,null]}', '"green"'),
    ('{"type":"object","properties":{"a":{"type":"boolean"},"b":{"type":"null"}},"required":["a"]}',
     '{"a":true,\t"b":null}'),
    ('{"type":"object","properties":{"a":{"type":"boolean"}}}', '{"a":true,"zz":[1,{"q":"x"}]}'),
    ('{"type":"string","minLength":2,"maxLength":4}', '"abc"'),
    ('{"type":"integer","minimum":0,"maximum":100}', '42'),
    ('{"anyOf":[{"type":"string"},{"type":"integer"}]}', '"x"'),
    ('{"type":"object","properties":{"p":{"type":"array","items":{"type":"string",'
     '"pattern":"^[a-z]+$"}}},"required":["p"]}', '{"p":["ab","c"]}'),
    ('{"$defs":{"n":{"type":"object","properties":{"v":{"type":"integer"},"next":'
     '{"$ref":"#/$defs/n"}},"required":["v"]}},"$ref":"#/$defs/n"}', '{"v":1,"next":{"v":2}}'),
]


@pytest.mark.parametrize("schema,text", PARITY, ids=range(len(PARITY)))
def test_masks_equal_xgrammar(schema, text, byte_vocab):
  """The two backends' masks agree at every step of a walk, except where the JSON languages
  differ by design, each difference pinned to its byte:

  * raw DEL (0x7F) inside strings: xgrammar only (llguidance requires it escaped as \\u007f,
    and we disable \\u escapes);
  * a backslash inside a key or a length-bounded string: llguidance only (our xgrammar schema
    rewrite spells those strings without escapes);
  * ``-0``: llguidance only (xgrammar's integer grammar refuses it; it is valid JSON).
  """
  constraint = ic.OutputConstraint.json_schema(schema)
  a = session(byte_vocab, constraint)
  b = ic.ConstraintCompiler(byte_vocab).compile(constraint).new_session()
  equal = 0
  data = list(text.encode("utf-8")) + [EOS]
  for i, t in enumerate(data + [None]):
    la, lb = legal(a), legal(b)
    only_llg, only_xgr = set(np.flatnonzero(la & ~lb)), set(np.flatnonzero(lb & ~la))
    assert only_xgr <= {0x7F}, (text[:i], only_xgr)
    assert only_llg <= {0x5C} | ({0x30} if text[:i].endswith("-") else set()), (text[:i], only_llg)
    equal += not (only_llg or only_xgr)
    if t is None:
      break
    assert a.accept([t]).accepted == b.accept([t]).accepted == 1, text[:i + 1]
  assert a.terminated and b.terminated
  assert equal >= len(data) // 3


QWEN3_PARITY = [PARITY[0], PARITY[2], PARITY[4]]


@pytest.mark.parametrize("schema,text", QWEN3_PARITY, ids=range(len(QWEN3_PARITY)))
def test_masks_equal_xgrammar_qwen3(schema, text, qwen3_vocab, tok):
  """On a real BPE vocabulary the same differences appear as whole tokens, plus one more: a
  token holding a ``\\u`` or ``\\/`` escape is xgrammar only (disabled for llguidance).
  Tokens spelling a strict prefix of forced bytes are legal in both (the session widens
  llguidance's canonical mask there)."""
  v = qwen3_vocab
  constraint = ic.OutputConstraint.json_schema(schema)
  a = session(v, constraint)
  b = ic.ConstraintCompiler(v).compile(constraint).new_session()
  ids = tok(text) + [v.eos_ids[0]]
  for i, t in enumerate(ids + [None]):
    la, lb = legal(a), legal(b)
    forced = a._m.compute_ff_bytes()
    done = v.decode(ids[:i])
    for x in np.flatnonzero(lb & ~la):
      tb = v.token_bytes[x]
      assert b"\x7f" in tb or b"\\u" in tb or b"\\/" in tb, (done, tb, forced)
    for x in np.flatnonzero(la & ~lb):
      tb = v.token_bytes[x]
      assert b"\\" in tb or (done.endswith(b"-") and tb.startswith(b"0")), (done, tb)
    if t is None:
      break
    assert a.accept([t]).accepted == b.accept([t]).accepted == 1, done
  assert a.terminated and b.terminated


GBNF_CASES = [
    ('root ::= word "b"\nword ::= [a-z]+', ["ab", "abb", "b"]),
    ('root ::= x "a"\nx ::= "a"*', ["a", "aa", "aaa"]),
    ('root ::= "a" "bc" | "abd"', ["abc", "abd", "ab"]),
    ('root ::= ("ab" | "a") "bc"', ["abbc", "abc", "bc"]),
    ('root ::= [^"\\\\\\x7F\\x00-\\x1F] "\\u00e9" [a\\-z]{2,3}',
     ["q\u00e9a-", "q\u00e9-z", "q\u00e9b"]),
]


@pytest.mark.parametrize("gbnf,texts", GBNF_CASES, ids=range(len(GBNF_CASES)))
def test_gbnf_language_equals_xgrammar(gbnf, texts, byte_vocab):
  """Multi-character terminals are lexed greedily by llguidance; ours never are."""
  constraint = ic.OutputConstraint.grammar(gbnf)
  a = build(byte_vocab, constraint)
  b = ic.ConstraintCompiler(byte_vocab).compile(constraint)
  for text in texts:
    data = list(text.encode("utf-8")) + [EOS]
    assert (BACKEND.new_session(a, b"").preview(data).terminated
            == b.new_session().preview(data).terminated), text


@pytest.mark.parametrize("name", ["arithmetic.gbnf", "c.gbnf", "english.gbnf", "list.gbnf"])
def test_gbnf_walk_masks_equal_xgrammar(name, byte_vocab):
  path = SHARED_DATA / "gbnf" / name
  if not path.exists():
    pytest.skip("shared data (gbnf grammars) not present")
  constraint = ic.OutputConstraint.grammar(path.read_text(encoding="utf-8"))
  rng = np.random.default_rng(5)
  for _ in range(3):
    a = session(byte_vocab, constraint)
    b = ic.ConstraintCompiler(byte_vocab).compile(constraint).new_session()
    for _ in range(60):
      la = legal(a)
      assert (la == legal(b)).all(), (name, byte_vocab.decode([]))
      if not la.any() or a.terminated:
        break
      t = int(rng.choice(np.flatnonzero(la)))
      assert a.accept([t]).accepted == b.accept([t]).accepted == 1


# --- transactions --------------------------------------------------------------------------------


def _state(s):
  return legal(s).tobytes(), s.complete, s.terminated, s.can_continue, s.tokens_committed


def test_lookahead_matches_replay_and_has_no_side_effect():
  vocab = toy_vocab()
  constraint = TOY_CONSTRAINTS[0]
  s = session(vocab, constraint, prefix=b'{"a":"')
  rng = np.random.default_rng(3)
  for _ in range(40):
    k = int(rng.integers(0, 5))
    drafts = [int(x) for x in rng.integers(0, vocab.size + 2, k)]  # includes ids >= V
    out = np.full((k + 1, vocab.mask_words), 7, np.int32)
    before = _state(s)
    states = s.lookahead(drafts, out)
    assert _state(s) == before
    ref = session(vocab, constraint, prefix=b'{"a":"')  # independent replay of each prefix
    stopped = False
    for i in range(k + 1):
      if stopped:
        assert states[i] == UNREACHABLE and not out[i].any()
        continue
      expect = legal(ref)
      assert (mask_layout.unpack(out[i], vocab.size) == expect).all()
      assert states[i] == (READY if expect.any() else DEAD_END)
      if i == k or not expect.any():
        stopped = True
        continue
      r = ref.accept([drafts[i]])
      stopped = r.accepted == 0 or r.terminated


def test_preview_commit_discard():
  vocab = toy_vocab()
  s = session(vocab, TOY_CONSTRAINTS[0])
  before = _state(s)
  r = s.preview([15, 2, 16, 10, 9, 99])  # {"a":"} (inside the string) then an id past V
  assert (r.accepted, r.complete, r.terminated, r.dead_end) == (5, False, False, False)
  assert s.previewing
  with pytest.raises(RuntimeError):
    s.lookahead([], np.zeros((1, vocab.mask_words), np.int32))
  s.discard()
  assert _state(s) == before and not s.previewing
  r = s.preview([15, 2, 16, 10, 10, 9, TOY_EOS, 2])  # {"a":""} EOS, then nothing more
  assert (r.accepted, r.complete, r.terminated) == (7, True, True)
  s.discard()
  assert _state(s) == before
  assert s.accept([15, 2, 16, 10, 10, 9]).complete and s.tokens_committed == 6
  assert not s.can_continue  # the object is closed: only EOS
  assert s.accept([TOY_CONTROL]).accepted == 0  # control token: never content
  r = s.accept([TOY_EOS])
  assert r.terminated and s.terminated and s.tokens_committed == 7
  out = np.ones((3, vocab.mask_words), np.int32)
  assert list(s.lookahead([2, 3], out)) == [UNREACHABLE] * 3 and not out.any()


def test_forced_tokens_are_legal_and_side_effect_free(qwen3_vocab):
  v = qwen3_vocab
  s = session(v, ic.OutputConstraint.json_schema(
      '{"type":"object","properties":{"status":{"const":"accepted by the reviewer"}},'
      '"required":["status"],"additionalProperties":false}'))
  seen = 0
  while not s.complete:
    before = _state(s)
    forced = s.forced_tokens(8)
    assert _state(s) == before
    assert not set(forced) & set(v.eos_ids) and len(forced) <= 8
    if forced:
      seen += len(forced)
      assert s.accept(forced).accepted == len(forced)
    else:
      s.accept([int(np.flatnonzero(legal(s))[0])])
  assert seen >= 5
  assert s.accept([v.eos_ids[0]]).terminated and s.forced_tokens(4) == []


def test_length_bounded_word_pattern_stays_usable(byte_vocab):
  # A JSONSchemaBench shape (maxLength 500 + a word-count pattern) whose lexer states exceed
  # llguidance's default fuel after a few words; sessions of one compiled constraint share them.
  c = build(byte_vocab, ic.OutputConstraint.json_schema(
      '{"type":"string","maxLength":500,"pattern":"^(?:\\\\S+\\\\s+){0,49}\\\\S+$"}'))
  rng = np.random.default_rng(4)
  buf = np.zeros((9, byte_vocab.mask_words), np.int32)
  for _ in range(30):
    s = BACKEND.new_session(c, b'"' + b"ab " * int(rng.integers(0, 45)))
    s.lookahead([int(x) for x in rng.choice([97, 32, 98, 9], 8)], buf)
  r = BACKEND.new_session(c, b"").preview(list(b'"' + b"w " * 49 + b'z"') + [EOS])
  assert r.terminated


def test_dead_end_is_reported_and_recoverable():
  # The toy vocabulary has no token for "z": after "a" no token can continue (DeadEnd), which
  # llguidance signals by putting its matcher in a permanent error state.
  vocab = toy_vocab()
  c = build(vocab, ic.OutputConstraint.regex("az|b"))
  s = BACKEND.new_session(c, b"")
  before = _state(s)
  out = np.full((3, vocab.mask_words), 9, np.int32)
  assert list(s.lookahead([2, 3], out)) == [READY, DEAD_END, UNREACHABLE]
  assert out[0].any() and not out[1:].any() and _state(s) == before
  batch = np.full((1, 3, vocab.mask_words), 9, np.int32)
  states = BACKEND.fill_batch([s], np.array([[2, 3]], np.int32), np.array([2]), batch)
  assert list(states[0]) == [READY, DEAD_END, UNREACHABLE] and (batch[0] == out).all()
  r = s.preview([2])
  assert (r.accepted, r.dead_end, r.complete) == (1, True, False)
  s.discard()
  assert _state(s) == before
  assert s.accept([3]).complete and s.accept([TOY_EOS]).terminated  # "b" still works


def test_continuation_prefix():
  vocab = toy_vocab()
  c = build(vocab, TOY_CONSTRAINTS[0])
  s = BACKEND.new_session(c, b'{"a":"ab')
  ref = BACKEND.new_session(c, b"")
  ref.accept([15, 2, 16, 10, 5])
  assert (legal(s) == legal(ref)).all() and s.tokens_committed == 0
  with pytest.raises(ic.PrefixError) as e:
    BACKEND.new_session(c, b'{"a"}')
  assert e.value.location == "4"


def test_fill_batch_equals_rowwise_lookahead():
  vocab = toy_vocab()

  def rows():
    g = build(vocab, TOY_CONSTRAINTS[2])
    ch = build(vocab, TOY_CONSTRAINTS[4])
    done = BACKEND.new_session(ch, b"")
    done.accept([5, TOY_EOS])
    return [BACKEND.new_session(g, b""), BACKEND.new_session(ch, b""),
            BACKEND.new_session(g, b'{"'), done, BACKEND.new_session(ch, b"ab"),
            BACKEND.new_session(g, b'{"a":12')]

  k = 4
  drafts = np.array([[15, 2, 16, 21], [5, 4, 0, 2], [2, 16, 22, 9], [2, 2, 2, 2],
                     [4, TOY_EOS, 3, 3], [9, TOY_EOS, 2, 2]], np.int32)
  n_drafts = np.array([4, 3, 2, 4, 4, 0])
  out = np.full((len(drafts), k + 1, vocab.mask_words), -5, np.int32)
  batch = rows()
  states = BACKEND.fill_batch(batch, drafts, n_drafts, out)
  for b, ref in enumerate(rows()):
    n = int(n_drafts[b])
    buf = np.zeros((n + 1, vocab.mask_words), np.int32)
    assert (states[b, :n + 1] == ref.lookahead(drafts[b, :n], buf)).all(), b
    assert (out[b, :n + 1] == buf).all(), b
    assert (states[b, n + 1:] == UNREACHABLE).all() and not out[b, n + 1:].any()
  for s, ref in zip(batch, rows()):  # no side effect on the batch's sessions
    assert _state(s) == _state(ref)


# --- options and errors --------------------------------------------------------------------------


def test_whitespace_runs_are_bounded(byte_vocab):
  for n, text, ok in [(32, "[" + " " * 32 + "1]", True), (32, "[" + " " * 33 + "1]", False),
                      (2, '{"a":\r\n1}', True), (0, "[ 1]", False), (0, "[1]", True)]:
    c = ic.OutputConstraint.json_schema('{"type":"array"}' if text[0] == "[" else "{}",
                                        max_whitespace=n)
    r = session(byte_vocab, c).preview(list(text.encode()) + [EOS])
    assert r.terminated == ok, (n, text)


def test_lenient_records_dropped_keywords(byte_vocab):
  schema = ('{"type":"object","properties":{"t":{"type":"array","uniqueItems":true},'
            '"d":{"type":"string","format":"no-such-format"}}}')
  with pytest.raises(ic.UnsupportedConstraintError) as e:
    build(byte_vocab, ic.OutputConstraint.json_schema(schema))
  assert e.value.backend == "llguidance" and e.value.location == "/properties/t/uniqueItems"
  c = build(byte_vocab, ic.OutputConstraint.json_schema(schema, lenient=True))
  assert set(c.dropped) == {("/properties/t/uniqueItems", "uniqueItems"),
                            ("/properties/d/format", "format")}
  assert c.nbytes > 0 and c.compiled_source.startswith("{")
  # What llguidance relaxes by itself under lenient (oneOf as anyOf, min/maxProperties next to
  # optional properties ignored) is recorded too; an exclusive oneOf is enforced, not recorded.
  relaxed = build(byte_vocab, ic.OutputConstraint.json_schema(
      '{"type":"object","properties":{"a":{"oneOf":[{"type":"string"},{"minLength":2}]},'
      '"b":{"oneOf":[{"type":"string"},{"type":"integer"}]}},"minProperties":1}', lenient=True))
  assert set(relaxed.dropped) == {("/properties/a/oneOf", "oneOf"),
                                  ("/properties/b/oneOf", "oneOf"),
                                  ("/minProperties", "minProperties")}
  exclusive = build(byte_vocab, ic.OutputConstraint.json_schema(
      '{"oneOf":[{"type":"string"},{"type":"integer"}]}', lenient=True))
  assert exclusive.dropped == ()
  assert BACKEND.new_session(c, b"").backend == "llguidance"


@pytest.mark.parametrize("constraint,error,location", [
    (ic.OutputConstraint.json_schema('{"type":'), ic.SchemaError, None),
    (ic.OutputConstraint.json_schema("false"), ic.SchemaError, ""),
    (ic.OutputConstraint.json_schema('{"not":{"type":"string"}}'), ic.UnsupportedConstraintError,
     "/not"),
    (ic.OutputConstraint.json_schema('{"$ref":"http://example.com/s.json"}'),
     ic.UnsupportedConstraintError, "/$ref"),
    (ic.OutputConstraint.json_schema('{"oneOf":[{"type":"string"},{"minLength":2}]}'),
     ic.UnsupportedConstraintError, "/oneOf"),
    (ic.OutputConstraint.json_schema('{"properties":{"a":{"pattern":"(a"}}}'), ic.RegexError,
     "/properties/a/pattern"),
    (ic.OutputConstraint.json_schema('{"const":"a\\u0000b"}'), ic.UnsupportedConstraintError,
     "/const"),
    (ic.OutputConstraint.json_schema('{"type":"integer","minimum":5,"maximum":1}'),
     ic.SchemaError, ""),
    (ic.OutputConstraint.grammar('root ::= "a" x'), ic.GrammarSyntaxError, "1:14"),
    (ic.OutputConstraint.regex("(a"), ic.RegexError, "1:1"),
    (ic.OutputConstraint.choice([]), ic.ChoiceError, None),
    (ic.OutputConstraint.json_object().with_framing("qwen3"), ic.UnsupportedConstraintError, None),
])
def test_errors(constraint, error, location, byte_vocab):
  with pytest.raises(error) as e:
    build(byte_vocab, constraint)
  assert e.value.location == location, str(e.value)


def test_regex_keeps_ecmascript_semantics(byte_vocab):
  # \s is ECMAScript's (U+FEFF and U+00A0 are spaces; Rust regex disagrees on U+FEFF).
  c = build(byte_vocab, ic.OutputConstraint.json_schema('{"type":"string","pattern":"^\\\\S$"}'))
  for text, ok in [('"a"', True), ('"\ufeff"', False), ('"\u00a0"', False)]:
    r = BACKEND.new_session(c, b"").preview(list(text.encode()) + [EOS])
    assert r.terminated == ok, text


def test_tokens_spelling_a_prefix_of_forced_bytes_are_legal(smollm2_vocab):  # noqa: F811
  """Where a key's bytes are forced, every token spelling a strict prefix of them is legal (as
  in xgrammar), not only llguidance's canonical cover: the same greedy tokens follow."""
  v = smollm2_vocab
  spec = ic.OutputConstraint.json_schema(json.dumps({
      "type": "object", "properties": {"population_millions": {"type": "number"}},
      "required": ["population_millions"], "additionalProperties": False}))
  forced = b'population_millions"'
  want = {i for i, b in enumerate(v.token_bytes)
          if b and forced.startswith(b) and b != forced and v.token_class[i] == 0}
  assert len(want) > 3
  ll = BACKEND.new_session(build(v, spec), b'{"')
  xg = ic.ConstraintCompiler(v).compile(spec.with_backend("xgrammar")).new_session(b'{"')
  for s in (ll, xg):
    words = np.zeros(v.mask_words, np.int32)
    s.fill_mask(words)
    assert want <= set(np.flatnonzero(mask_layout.unpack(words, v.size)).tolist())
  t = min(want, key=lambda i: len(v.token_bytes[i]))
  assert ll.preview([t]).accepted == 1
  ll.discard()
  batch = np.zeros((1, 2, v.mask_words), np.int32)
  states = BACKEND.fill_batch([ll], np.array([[t]], np.int32), np.array([1]), batch)
  assert states[0].tolist() == [READY, READY]
  ref = np.zeros((2, v.mask_words), np.int32)
  assert ll.lookahead([t], ref).tolist() == [READY, READY]
  np.testing.assert_array_equal(batch[0], ref)
