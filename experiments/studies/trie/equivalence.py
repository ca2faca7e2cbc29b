"""Proposition 1 on every study vocabulary: trie mask == XGrammar mask along random walks."""

from __future__ import annotations

import random

import numpy as np

from infernix_jax.constrain import trie

# Values where one prefixes another, multi-byte UTF-8 (2, 3 and 4 bytes), markup, spaces.
EXTRAS = ["get", "get_user", "get_user_info", "caf\u00e9", "caf\u00e9s", "\u65e5\u672c",
          "\u65e5\u672c\u8a9e", "\U0001F600 ok", "<div>", " leading", "two  spaces", "A00.0"]


def random_walks(vocab, values, walks: int, seed: int) -> dict:
  """Runs ``walks`` random walks; returns counts of states compared and of mismatches.

  At each state both masks are filled and compared bit for bit (EOS included); the next token
  is a uniformly random legal token or the longest legal one (coin flip), as in the tests.
  """
  from infernix_jax.constrain import _xgr
  from infernix_jax.constrain._choice import choice_gbnf

  _xgr.tokenizer_info(vocab)
  compiled = trie.compile_choice(vocab, values)
  grammar = _xgr.compile_grammar(vocab, choice_gbnf(values))
  a = compiled.automaton
  ours = np.zeros(vocab.mask_words, np.int32)
  theirs = np.zeros((1, vocab.mask_words), np.int32)
  rng = random.Random(seed)
  states = mismatches = 0
  nodes = set()
  for _ in range(walks):
    node = 0
    m = _xgr.new_matcher(grammar)
    while True:
      a.fill(node, ours)
      m.fill_next_token_bitmask(theirs)
      states += 1
      nodes.add(node)
      mismatches += int(not np.array_equal(ours, theirs[0]))
      legal = a.legal_ids(node)
      if legal.size == 0:
        break
      if rng.random() < 0.5:
        tok = int(legal[rng.randrange(legal.size)])
      else:
        tok = int(max(legal.tolist(), key=lambda i: len(vocab.token_bytes[i])))
      if not m.accept_token(tok):
        mismatches += 1
        break
      node = a.step(node, tok)
      if node >= a.n_nodes:
        break
  return {"states": states, "distinct_nodes": len(nodes), "mismatches": mismatches}
