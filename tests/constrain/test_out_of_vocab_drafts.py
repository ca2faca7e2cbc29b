"""Draft ids outside the vocabulary (negative, V, the mask words' spare bits, the logits'
padding, past the logits, huge) are illegal drafts in every session type: the lookahead
treats such a draft exactly as an in-vocabulary illegal token at the same position (that
position keeps the legal prefix's mask, the later ones are Unreachable), preview stops at it,
and batch fills and draft trees agree."""

from __future__ import annotations

import numpy as np
import pytest

from infernix_jax import constrain as ic
from infernix_jax import mask_layout
from infernix_jax.constrain import framing as fr
from infernix_jax.constrain import tree as ctree
from infernix_jax.constrain.framing import hermes
from tests.constrain.conftest import qwen3_vocab, tok, toy_vocab  # noqa: F401  (fixtures)

READY, UNREACHABLE = mask_layout.READY, mask_layout.UNREACHABLE
TOOL_OPEN = 151657
GBNF = 'root ::= "{" ("\\"a\\":" | "\\"b\\":") ("1" | "12" | "abc") ("," "\\"c\\":" "1")* "}"\n'
SEARCH = {"name": "search", "parameters": {
    "type": "object", "properties": {"q": {"type": "string"}, "n": {"type": "integer"}}}}


def bad_ids(vocab, *, int32: bool = True) -> list[int]:
  """Ids no mask may allow: below 0, V, the last id the mask words cover, the first past
  them, the last padded logit, Vm, and the int32 extremes (plus a huge Python int)."""
  v, w, vm = vocab.size, vocab.mask_words, vocab.padded_size
  ids = {-(2 ** 31), -1, v, 32 * w - 1, 32 * w, vm - 1, vm, 2 ** 31 - 1}
  if not int32:
    ids |= {2 ** 40 + 3, -(2 ** 40)}
  return sorted(i for i in ids if not 0 <= i < v)


def legal_chain(session, vocab, n: int) -> list[int]:
  """n tokens legal one after another (the smallest legal non-EOS id at each position)."""
  chain: list[int] = []
  buf = np.zeros((n + 1, vocab.mask_words), np.int32)
  eos = set(vocab.eos_ids)
  for _ in range(n):
    states = session.lookahead(chain, out=buf[:len(chain) + 1])
    assert states[len(chain)] == READY
    allowed = np.flatnonzero(mask_layout.unpack(buf[len(chain)], vocab.size))
    nxt = [int(t) for t in allowed if int(t) not in eos]
    if not nxt:
      break
    chain.append(nxt[0])
  return chain


def illegal_in_vocab(words: np.ndarray, vocab) -> int:
  """An id < V whose bit is clear in ``words`` (the oracle's ordinary illegal token)."""
  return int(np.flatnonzero(~mask_layout.unpack(words, vocab.size))[0])


def check_session(session, vocab, chain: list[int], *, int32: bool = True) -> None:
  """Every bad id at every position of ``chain`` behaves as an in-vocabulary illegal token."""
  k = len(chain) + 1
  w = vocab.mask_words
  for j in range(len(chain) + 1):
    ref = np.zeros((j + 1, w), np.int32)
    ref_states = session.lookahead(chain[:j], out=ref)
    assert (ref_states == READY).all()
    ordinary = illegal_in_vocab(ref[j], vocab)
    want = np.full((k + 1, w), -7, np.int32)
    want_states = session.lookahead(chain[:j] + [ordinary] + chain[j:], out=want)
    assert (want_states[:j + 1] == READY).all() and (want_states[j + 1:] == UNREACHABLE).all()
    assert np.array_equal(want[:j + 1], ref) and not want[j + 1:].any()
    for bad in bad_ids(vocab, int32=int32):
      got = np.full((k + 1, w), -7, np.int32)
      states = session.lookahead(chain[:j] + [bad] + chain[j:], out=got)
      assert np.array_equal(states, want_states), (j, bad)
      assert np.array_equal(got, want), (j, bad)
      r = session.preview(chain[:j] + [bad] + chain[j:])
      assert r.accepted == j, (j, bad)
      session.discard()


def check_batch(sessions, vocab, chain: list[int]) -> None:
  """`fill_batch` over int32 drafts with a bad id at each position equals per-row lookahead."""
  k = len(chain) + 1
  rows = []
  for j in range(len(chain) + 1):
    for bad in bad_ids(vocab):
      rows.append(chain[:j] + [bad] + chain[j:])
  drafts = np.array(rows, np.int32)
  n = np.full(len(rows), k)
  ss = [sessions() for _ in rows]
  out = np.full((len(rows), k + 1, vocab.mask_words), -7, np.int32)
  states, _ = ic.fill_batch(ss, drafts, n, out)
  one = sessions()
  for b, row in enumerate(rows):
    want = np.zeros((k + 1, vocab.mask_words), np.int32)
    want_states = one.lookahead(row, out=want)
    assert np.array_equal(states[b], want_states), row
    assert np.array_equal(out[b], want), row


# --- plain sessions of each backend (toy vocabulary: V = 29, W = 1, Vm = 64) -------------------

PLAIN = {
    "xgrammar": ic.OutputConstraint.grammar(GBNF).with_backend("xgrammar"),
    "llguidance": ic.OutputConstraint.grammar(GBNF).with_backend("llguidance"),
    "trie": ic.OutputConstraint.choice(["ab", "abc", "ba", "c1", "{\"a\":12}"]).with_backend(
        "trie"),
}


@pytest.mark.parametrize("name", sorted(PLAIN))
def test_plain_sessions_reject_out_of_vocab_drafts(name):
  vocab = toy_vocab(padded_size=64)
  compiled = ic.ConstraintCompiler(vocab).compile(PLAIN[name])
  session = compiled.new_session()
  assert session.backend == name
  chain = legal_chain(session, vocab, 3)
  assert len(chain) >= 2
  check_session(session, vocab, chain, int32=False)
  check_batch(compiled.new_session, vocab, chain)


@pytest.mark.parametrize("name", sorted(PLAIN))
def test_draft_trees_prune_out_of_vocab_nodes(name):
  """A tree whose nodes hold bad ids: those nodes (and their subtrees) are illegal, their
  rows Unreachable, exactly as for in-vocabulary illegal tokens."""
  vocab = toy_vocab(padded_size=64)
  session = ic.ConstraintCompiler(vocab).compile(PLAIN[name]).new_session()
  a, b = legal_chain(session, vocab, 2)
  buf = np.zeros((3, vocab.mask_words), np.int32)
  session.lookahead([a, b], out=buf)
  ill0, ill1 = illegal_in_vocab(buf[0], vocab), illegal_in_vocab(buf[1], vocab)
  parents = [-1, 0, 0, -1, 1]
  want_out = np.zeros((6, vocab.mask_words), np.int32)
  want = ctree.tree_lookahead(session, [a, ill1, b, ill0, a], parents, 5, want_out)
  want_bad = ctree.illegal_nodes([a, ill1, b, ill0, a], parents, 5, want_out, want)
  assert want_bad.tolist() == [False, True, False, True, True]
  for bad in bad_ids(vocab, int32=False):
    drafts = [a, bad, b, bad, a]
    out = np.full((6, vocab.mask_words), -7, np.int32)
    states = ctree.tree_lookahead(session, drafts, parents, 5, out)
    assert np.array_equal(states, want) and np.array_equal(out, want_out), bad
    assert np.array_equal(ctree.illegal_nodes(drafts, parents, 5, out, states), want_bad), bad


# --- framed sessions (Qwen3 vocabulary: V = 151669, W = 4740 words = 151680 ids, Vm = 151936) ---

def _qwen_tool_session(vocab, tok, strict: bool):
  params = {**SEARCH["parameters"], "additionalProperties": False}
  tools = fr.parse_tools([{**SEARCH, "parameters": params, "strict": strict}])
  p = fr.prepare_output(vocab, fr.OutputPhase.CONTENT, tools=tools,
                        choice=fr.ToolChoice.required())
  s = p.new_session()
  head = [TOOL_OPEN] + tok("\n<function=search>\n<parameter=q>\nx")
  assert s.accept(head).accepted == len(head)
  return p, s


@pytest.mark.parametrize("strict", [False, True])
def test_qwen_tool_sessions_reject_out_of_vocab_drafts(qwen3_vocab, tok, strict):  # noqa: F811
  """Inside a call's arguments (non-strict: the name companion filters each mask)."""
  p, s = _qwen_tool_session(qwen3_vocab, tok, strict)
  assert (s.companion is not None) == (not strict)
  chain = tok("yz\n</parameter>\n")[:3]
  check_session(s, qwen3_vocab, chain, int32=False)


def test_qwen_thinking_session_rejects_out_of_vocab_drafts(qwen3_vocab, tok):  # noqa: F811
  p = fr.prepare_output(qwen3_vocab, fr.OutputPhase.THINKING, tools=fr.parse_tools([SEARCH]))
  s = p.new_session()
  check_session(s, qwen3_vocab, tok("Let me think"), int32=False)


def test_qwen_framed_batch_fill_rejects_out_of_vocab_drafts(qwen3_vocab, tok):  # noqa: F811
  chain = tok("yz\n</parameter>\n")[:2]
  check_batch(lambda: _qwen_tool_session(qwen3_vocab, tok, False)[1], qwen3_vocab, chain)


def test_hermes_session_rejects_out_of_vocab_drafts(qwen3_vocab, tok):  # noqa: F811
  p = hermes.prepare_hermes(qwen3_vocab, tools=fr.parse_tools([SEARCH]),
                        choice=fr.ToolChoice.required())
  s = p.new_session()
  text = hermes.CALL_HEAD + '"search"' + hermes.ARGUMENTS_KEY + '{"q": "'
  head = [qwen3_vocab.token_id("<")] + tok(text[1:])  # "<tool_call>" spelled, not the control
  assert s.accept(head).accepted == len(head)
  check_session(s, qwen3_vocab, tok('abc", "n": 1'), int32=False)


def test_mask_bit_reads_are_range_checked():
  """The layout's readers never index outside the words nor wrap a negative id."""
  words = mask_layout.pack(np.ones(40, bool))  # [2] words, ids 0..39 set
  assert [mask_layout.bit(words, t) for t in (-1, -33, 0, 39, 40, 63, 64, 10 ** 12)] == [
      False, False, True, True, False, False, False, False]
  assert [mask_layout.allows(words, t, 38) for t in (-1, 0, 37, 38, 39, 64)] == [
      False, True, True, False, False, False]
  ids = np.array([-1, 0, 39, 40, 64, 2 ** 31 - 1], np.int64)
  assert mask_layout.bits(words, ids).tolist() == [False, True, True, False, False, False]
