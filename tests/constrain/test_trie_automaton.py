"""Trie index and automaton against brute-force enumeration (toy and real vocabularies)."""

from __future__ import annotations

import random

import numpy as np
import pytest

from infernix_jax import mask_layout
from infernix_jax.constrain import trie
from infernix_jax.constrain.trie import _bytetrie
from infernix_jax.constrain.vocab import Vocabulary



def _prefixes(values):
  return {v[:i] for v in values for i in range(len(v) + 1)}


_BY_BYTES: dict = {}


def _ordinary_by_bytes(vocab):
  """bytes -> ordinary token ids with exactly those bytes (cached per vocabulary)."""
  if vocab.identity not in _BY_BYTES:
    table: dict = {}
    for i in np.flatnonzero(vocab.token_class == 0).tolist():
      if vocab.token_bytes[i]:
        table.setdefault(vocab.token_bytes[i], []).append(i)
    _BY_BYTES[vocab.identity] = table
  return _BY_BYTES[vocab.identity]


def _oracle_legal(vocab, values, prefix):
  """Brute force: ordinary token t is legal after ``prefix`` iff prefix+bytes(t) prefixes a value.

  Enumerates every continuation ``v[len(prefix):j]`` of every value that starts with
  ``prefix`` and looks the spelling up among the ordinary tokens.
  """
  table = _ordinary_by_bytes(vocab)
  legal = set()
  for v in values:
    if v.startswith(prefix):
      for j in range(len(prefix) + 1, len(v) + 1):
        legal.update(table.get(v[len(prefix):j], ()))
  if prefix in set(values):
    legal.update(vocab.eos_ids)
  return sorted(legal)


def _node_prefixes(automaton):
  t = automaton.trie
  out = [b""] * automaton.n_nodes
  for i in range(1, automaton.n_nodes):
    out[i] = out[t.parent[i]] + bytes([t.byte[i]])
  return out


def _toy_vocab(rng, alphabet=b"ab\xc3\xa9.", n=60):
  toks = {bytes([c]) for c in alphabet}
  while len(toks) < n:
    toks.add(bytes(rng.choice(alphabet) for _ in range(rng.randint(2, 5))))
  toks = sorted(toks)
  # control tokens: an EOS and a marker spelled like ordinary text
  toks += [b"<eos>", b"ab"]
  return Vocabulary.from_tokens(toks, eos_ids=[len(toks) - 2], control=[len(toks) - 1])


def _check_all_nodes(vocab, values, compiled):
  a = compiled.automaton
  buf = np.zeros(vocab.mask_words, np.int32)
  for node, prefix in enumerate(_node_prefixes(a)):
    want = _oracle_legal(vocab, values, prefix)
    assert a.legal_ids(node).tolist() == want, prefix
    nonempty = a.fill(node, buf)
    assert nonempty == bool(want)
    assert np.flatnonzero(mask_layout.unpack(buf, vocab.size)).tolist() == want, prefix


def test_byte_trie_nodes_are_the_distinct_prefixes():
  rng = random.Random(0)
  values = [bytes(rng.choice(b"abc") for _ in range(rng.randint(0, 6))) for _ in range(200)]
  t = _bytetrie.build(values)
  prefixes = _prefixes(set(values))
  assert t.n_nodes == len(prefixes)
  for v, node in zip(t.strings, t.terminal):
    assert t.walk(v) == node and t.depth[node] == len(v)
  assert t.walk(b"abcabcabca") == -1 and t.walk(b"d") == -1
  assert t.n_chars == sum(len(v) for v in set(values))


@pytest.mark.parametrize("seed", range(6))
def test_toy_vocab_every_node_equals_brute_force(seed):
  rng = random.Random(seed)
  vocab = _toy_vocab(rng)
  alphabet = [b"a", b"b", "\u00e9".encode(), b"."]
  values = {b"".join(rng.choice(alphabet) for _ in range(rng.randint(1, 7))) for _ in range(25)}
  values |= {b"ab", b"ab.a", b""} if seed % 2 else {b"a", b"aa"}   # values prefixing others
  trie.clear_cache()
  compiled = trie.compile_choice(vocab, sorted(v.decode() for v in values))
  _check_all_nodes(vocab, values, compiled)
  # the control token spelled "ab" is never legal, its ordinary twin is where "ab" fits
  ctrl = max(vocab.control_ids - set(vocab.eos_ids))
  assert ctrl not in set(compiled.automaton.ids.tolist())


def test_index_step_matches_dict_trie():
  rng = random.Random(3)
  vocab = _toy_vocab(rng, n=200)
  idx = trie.VocabIndex(vocab.token_bytes, [i for i in range(vocab.size) if vocab.token_class[i]])
  pre = sorted(_prefixes({vocab.token_bytes[i] for i in range(vocab.size) if not vocab.token_class[i]}))
  node_of = {p: idx_node for idx_node, p in enumerate(pre)}  # ids differ; compare by spelling
  # walk every prefix through the index and check membership of each extension
  spell = {0: b""}
  frontier = [0]
  while frontier:
    nodes = np.repeat(np.asarray(frontier), 256)
    bytes_ = np.tile(np.arange(256), len(frontier))
    nxt = idx.step(nodes, bytes_)
    new = []
    for n, b, m in zip(nodes.tolist(), bytes_.tolist(), nxt.tolist()):
      ext = spell[n] + bytes([b])
      assert (m >= 0) == (ext in node_of), ext
      if m >= 0:
        spell[m] = ext
        new.append(m)
    frontier = new
  assert len(spell) == len(pre) == idx.n_nodes


def test_qwen_small_set_every_node_equals_brute_force(qwen3_vocab):
  qwen = qwen3_vocab
  values = ["get", "get_user", "slack.get_user", "slack.send_message", "caf\u00e9", "\u65e5\u672c",
            "\u65e5\u672c\u8a9e", "<|im_end|>", "A00.1", " lead space", "x"]
  compiled = trie.compile_choice(qwen, values)
  raw = {v.encode() for v in values}
  _check_all_nodes(qwen, raw, compiled)
  a = compiled.automaton
  # EOS legal exactly at value ends, also at "get" which prefixes "get_user"
  node_get = a.walk_bytes(b"get")
  assert set(qwen.eos_ids) <= set(a.legal_ids(node_get).tolist())
  assert not set(qwen.eos_ids) & set(a.legal_ids(a.walk_bytes(b"ge")).tolist())
  # overshoot excluded: "get_" + "user" fits, "get_users" does not
  assert a.step(node_get, qwen.token_id("_user")) != a.dead
  end_user = a.walk_bytes(b"get_user")
  assert a.legal_ids(end_user).tolist() == list(qwen.eos_ids)
  # control tokens never legal inside a value (the ordinary spelling of <|im_end|> is)
  im_end = qwen.token_id("<|im_end|>", control=True)
  assert im_end not in set(a.ids.tolist()) or im_end in qwen.eos_ids
  assert a.step(0, im_end) == a.dead
  assert a.prefix_sharing == pytest.approx((a.n_nodes - 1) / a.n_chars)


def test_compile_choice_rejects_invalid_lists(toy):
  from infernix_jax.constrain import ChoiceError
  for bad in ([], "abc", [1, 2], None):
    with pytest.raises(ChoiceError):
      trie.compile_choice(toy, bad)


def test_duplicate_spellings_are_all_legal():
  # Two ordinary ids with the same bytes (some GGUF/tiktoken vocabularies have them).
  toks = [b"a", b"b", b"ab", b"a", b"ba", b"<eos>"]
  vocab = Vocabulary.from_tokens(toks, eos_ids=[5])
  values = {b"ab", b"aba", b"b"}
  compiled = trie.compile_choice(vocab, sorted(v.decode() for v in values))
  assert trie.get_index(vocab)._multi_term
  _check_all_nodes(vocab, values, compiled)
  assert compiled.automaton.legal_ids(0).tolist() == [0, 1, 2, 3]
