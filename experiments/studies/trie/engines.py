"""The three engines of the study behind one small interface: trie, XGrammar, LLGuidance.

Each engine compiles a value set and then, for a list of token paths (the tokens that generate
sampled values), measures mask computation at every state of every path, and a batch fill of B
rows at realistic states. Everything runs single-threaded so the numbers compare.
"""

from __future__ import annotations

import json
import time

import numpy as np

from infernix_jax.constrain import trie

_REGEX_META = set("\\^$.|?*+()[]{}/-")


def regex_escape(text: str) -> str:
  """Escapes the regex metacharacters of XGrammar's ECMAScript-style syntax."""
  return "".join("\\" + c if c in _REGEX_META else c for c in text)


def greedy_paths(compiled, vocab, values, n, rng) -> list[list[int]]:
  """Token paths of ``n`` sampled values: longest legal token at each step, then EOS."""
  a = compiled.automaton
  tb = vocab.token_bytes
  paths = []
  for v in rng.choice(len(values), size=min(n, len(values)), replace=False):
    data = values[int(v)].encode("utf-8")
    node, pos, toks = 0, 0, []
    while pos < len(data):
      best, blen = -1, 0
      for t, nxt in zip(a.legal_ids(node).tolist(), a.legal_next(node).tolist()):
        b = tb[t]
        if nxt < a.n_nodes and len(b) > blen and data.startswith(b, pos):
          best, blen = t, len(b)
      toks.append(best)
      node = a.step(node, best)
      pos += blen
    toks.append(int(vocab.eos_ids[0]))
    paths.append(toks)
  return paths


class TrieEngine:
  """The trie backend (this repository)."""

  name = "trie"

  def __init__(self, vocab):
    self.vocab = vocab

  def index_seconds(self) -> float:
    trie.clear_cache()
    idx = trie.get_index(self.vocab)
    self.index_cpu_seconds = idx.build_cpu_seconds
    return idx.build_seconds

  def compile(self, values):
    return trie.compile_choice(self.vocab, values)

  def memory_bytes(self, compiled) -> int:
    return compiled.automaton.memory_bytes()

  def step_seconds(self, compiled, paths) -> np.ndarray:
    """Per-state time of lookup + copy (``automaton.fill``) over all path states."""
    a = compiled.automaton
    buf = np.zeros(self.vocab.mask_words, np.int32)
    nodes = []
    for p in paths:
      node = 0
      for t in p:
        nodes.append(node)
        node = a.step(node, t)
    clock = time.perf_counter_ns
    out = np.empty(len(nodes))
    for i, n in enumerate(nodes):
      t0 = clock()
      a.fill(n, buf)
      out[i] = clock() - t0
    return out * 1e-9

  def loop_seconds(self, compiled, paths) -> float:
    """Mean per-state time of a tight loop of ``fill`` calls (no per-call timer)."""
    a = compiled.automaton
    buf = np.zeros(self.vocab.mask_words, np.int32)
    nodes = []
    for p in paths:
      node = 0
      for t in p:
        nodes.append(node)
        node = a.step(node, t)
    fill = a.fill
    t0 = time.perf_counter()
    for n in nodes:
      fill(n, buf)
    return (time.perf_counter() - t0) / max(1, len(nodes))

  def batch_seconds(self, compiled, states, reps) -> float:
    """One vectorized fill of B rows (``fill_many``) at the given states; median of reps."""
    a = compiled.automaton
    nodes = np.array([self._node(a, s) for s in states])
    out = np.zeros((len(states), self.vocab.mask_words), np.int32)
    times = []
    for _ in range(reps):
      t0 = time.perf_counter()
      a.fill_many(nodes, out)
      times.append(time.perf_counter() - t0)
    return float(np.median(times))

  @staticmethod
  def _node(a, tokens):
    node = 0
    for t in tokens:
      node = a.step(node, t)
    return node


class XGrammarEngine:
  """XGrammar 0.2.8 through the project's ``_xgr`` module (regex union, JSON enum, GBNF)."""

  def __init__(self, vocab, variant: str = "regex"):
    from infernix_jax.constrain import _xgr

    self.x = _xgr
    self.vocab = vocab
    self.variant = variant
    self.name = f"xgrammar-{variant}"

  def index_seconds(self) -> float:
    t0 = time.perf_counter()
    self.x.tokenizer_info(self.vocab)
    self.x.grammar_compiler(self.vocab)
    return time.perf_counter() - t0

  def compile(self, values):
    if self.variant == "regex":
      return self.x.compile_regex(self.vocab, "(" + "|".join(regex_escape(v) for v in values) + ")")
    if self.variant == "json":
      return self.x.compile_json_schema(self.vocab, json.dumps({"enum": list(values)}),
                                        max_whitespace=1)
    from infernix_jax.constrain._choice import choice_gbnf

    return self.x.compile_grammar(self.vocab, choice_gbnf(values))

  def memory_bytes(self, compiled) -> int:
    return self.x.compiled_memory_bytes(compiled)

  def step_seconds(self, compiled, paths) -> np.ndarray:
    buf = np.zeros((1, self.vocab.mask_words), np.int32)
    clock = time.perf_counter_ns
    out = []
    for p in paths:
      m = self.x.new_matcher(compiled)
      for t in p:
        t0 = clock()
        m.fill_next_token_bitmask(buf, 0)
        out.append(clock() - t0)
        m.accept_token(t)
    return np.asarray(out) * 1e-9

  def batch_seconds(self, compiled, states, reps) -> float:
    matchers = []
    for s in states:
      m = self.x.new_matcher(compiled)
      for t in s:
        m.accept_token(t)
      matchers.append(m)
    batch = self.x.batch_matcher(1)
    out = np.zeros((len(states), self.vocab.mask_words), np.int32)
    times = []
    for _ in range(reps):
      t0 = time.perf_counter()
      batch.batch_fill_next_token_bitmask(matchers, out)
      times.append(time.perf_counter() - t0)
    return float(np.median(times))


class _LLTok:
  """The TokenizerWrapper protocol of llguidance over our Vocabulary (exact raw bytes)."""

  def __init__(self, vocab):
    self.tokens = [b if vocab.token_class[i] == 0 and b else
                   b"\xff" + (b or f"<unused_{i}>".encode()) for i, b in enumerate(vocab.token_bytes)]
    self.eos_token_id = int(vocab.eos_ids[0])
    self.bos_token_id = None
    self.special_token_ids = sorted(vocab.control_ids | vocab.unused_ids)

  def __call__(self, s):   # only used for literals llguidance wants to pre-tokenize
    return []


class LLGuidanceEngine:
  """LLGuidance (PyPI ``llguidance``): a Lark grammar ``start: VALUE; VALUE: "v1" | "v2" | ...``."""

  name = "llguidance"

  def __init__(self, vocab):
    import llguidance

    self.llg = llguidance
    self.vocab = vocab
    self.tok = None

  def index_seconds(self) -> float:
    t0 = time.perf_counter()
    self.tok = self.llg.LLTokenizer(self.llg.TokenizerWrapper(_LLTok(self.vocab)),
                                    eos_token=list(self.vocab.eos_ids))
    return time.perf_counter() - t0

  def compile(self, values):
    """Grammar construction + first mask (the paper's LLGuidance compile measure)."""
    if self.tok is None:
      self.index_seconds()
    # One lexer terminal (uppercase rule): llguidance builds its lexer DFA lazily; a parser-level
    # alternation of K literals hits its Earley row limit (2,000 items) at K = 10,000.
    grammar = "start: VALUE\nVALUE: " + " | ".join(json.dumps(v) for v in values)
    m = self.llg.LLMatcher(self.tok, grammar)
    if m.is_error():
      raise RuntimeError(m.get_error())
    buf = np.zeros(self.vocab.mask_words, np.int32)
    m.unsafe_compute_mask_ptr(buf.ctypes.data, buf.nbytes)
    return grammar

  def memory_bytes(self, compiled) -> int:
    return -1   # not exposed by the library

  def _matcher(self, grammar, tokens=()):
    # A deep copy of one fresh matcher per grammar: a new LLMatcher would rebuild the grammar.
    if getattr(self, "_base_grammar", None) is not grammar:
      self._base = self.llg.LLMatcher(self.tok, grammar)
      self._base_grammar = grammar
    m = self._base.deep_copy()
    for t in tokens:
      m.consume_token(t)
    return m

  def step_seconds(self, grammar, paths) -> np.ndarray:
    buf = np.zeros(self.vocab.mask_words, np.int32)
    clock = time.perf_counter_ns
    out = []
    for p in paths:
      m = self._matcher(grammar)
      for t in p:
        t0 = clock()
        m.unsafe_compute_mask_ptr(buf.ctypes.data, buf.nbytes)
        out.append(clock() - t0)
        m.consume_token(t)
    return np.asarray(out) * 1e-9

  def batch_seconds(self, grammar, states, reps) -> float:
    matchers = [(self._matcher(grammar, s), i) for i, s in enumerate(states)]
    ex = self.llg.LLExecutor(1)
    out = np.zeros((len(states), self.vocab.mask_words), np.int32)
    times = []
    for _ in range(reps):
      t0 = time.perf_counter()
      ex.unsafe_compute_mask_ptr(matchers, out.ctypes.data, out.shape[1] * 4, out.shape[0])
      times.append(time.perf_counter() - t0)
    return float(np.median(times))
