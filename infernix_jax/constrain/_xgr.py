"""The one module that imports xgrammar: torch-free import, tokenizer index, compile, matchers.

xgrammar 0.2.8 imports torch (``matcher.py``: ``torch.int32`` as the bitmask dtype) and
transformers (``tokenizer_info.py``: HF tokenizer classes for ``from_huggingface``) at import
time, and its FFI layer ``tvm_ffi`` tries ``import torch`` inside ``try``. We import it with a
meta-path blocker that is active only for the duration of that import:

  * ``tvm_ffi`` is imported first while ``torch``/``transformers`` raise ImportError, which its
    guarded imports handle (it then exchanges arrays through the DLPack protocol only);
  * xgrammar itself is imported with inert stand-in modules for ``torch`` and ``transformers``
    placed in ``sys.modules``; they are removed again right after, so a later real ``import
    torch`` (tests use it as an oracle) is unaffected.

What breaks without them (we use none of it): ``xgrammar.allocate_token_bitmask``,
``apply_token_bitmask_inplace``, ``xgrammar.testing``'s tensor helpers, ``TokenizerInfo.
from_huggingface`` and ``xgrammar.contrib.hf``. What we use works on numpy through DLPack:
``TokenizerInfo(...)``, ``GrammarCompiler``, ``GrammarMatcher`` (accept/rollback/fill/
jump-forward/fork) and ``BatchGrammarMatcher.batch_fill_next_token_bitmask``. If torch is
already imported when we load, the real module is used and nothing is stubbed for it.

Nothing outside this module may import xgrammar; no xgrammar type leaves the constrain
package's private modules.
"""

from __future__ import annotations

import importlib.abc
import sys
import threading
import types
from typing import Any, Callable, NamedTuple

import numpy as np

from infernix_jax.constrain._masks import check_buffer  # noqa: F401  (re-exported)

_BLOCKED = ("torch", "transformers")


class _Blocker(importlib.abc.MetaPathFinder):
  """Makes ``import torch`` / ``import transformers`` fail while it sits on sys.meta_path."""

  def find_spec(self, name, path=None, target=None):  # noqa: D102 (importlib protocol)
    if name.partition(".")[0] in _BLOCKED:
      raise ImportError(f"{name} is blocked while infernix_jax imports xgrammar")
    return None


class _InertModule(types.ModuleType):
  """A stand-in module: any attribute is a do-nothing class (enough for import-time use)."""

  def __getattr__(self, attr: str) -> Any:
    if attr.startswith("__"):
      raise AttributeError(attr)
    cls = type(attr, (), {"__init__": lambda self, *a, **k: None,
                          "__module__": self.__name__})
    setattr(self, attr, cls)
    return cls


_import_lock = threading.Lock()


def _import_xgrammar():
  with _import_lock:
    if "xgrammar" in sys.modules:
      return sys.modules["xgrammar"]
    blocker = _Blocker()
    sys.meta_path.insert(0, blocker)
    stubs: dict[str, types.ModuleType] = {}
    try:
      import tvm_ffi  # noqa: F401  (guarded torch import -> ImportError -> DLPack-only)
      for name in _BLOCKED:
        if name not in sys.modules:
          stubs[name] = sys.modules[name] = _InertModule(name)
      import xgrammar
    finally:
      sys.meta_path.remove(blocker)
      for name, mod in stubs.items():
        if sys.modules.get(name) is mod:
          del sys.modules[name]
    return xgrammar


xgr = _import_xgrammar()
from xgrammar._version import __version__ as VERSION  # noqa: E402  (pinned: 0.2.8)


CONTROL_PREFIX = b"\xff"  # never valid UTF-8: control tokens stay out of every text rule


def tokenizer_info(vocab) -> Any:
  """xgrammar's TokenizerInfo for ``vocab``, built once per vocabulary (thread-safe, lazy).

  Facts are passed explicitly: RAW vocabulary type with the exact bytes we decoded, the EOS
  ids as stop tokens, unused ids as empty tokens, and every other control token spelled
  ``CONTROL_PREFIX`` + its spelling. 0xFF never occurs in UTF-8, so no text rule (GBNF, JSON,
  regex, choice) can match a control token, and a control token and an ordinary token with the
  same spelling stay distinct; token-level rules (``Token(id)``, used by framing for
  ``</think>`` and ``<tool_call>``) still match it by id. ``vocab_size`` is the tokenizer's V
  (the mask width), never the logits' padded width.
  """

  def build():
    from infernix_jax.constrain.vocab import CONTROL, ORDINARY

    cls = vocab.token_class
    encoded = [b if cls[i] == ORDINARY else CONTROL_PREFIX + b if cls[i] == CONTROL else b""
               for i, b in enumerate(vocab.token_bytes)]
    return xgr.TokenizerInfo(encoded, xgr.VocabType.RAW, vocab_size=vocab.size,
                             stop_token_ids=list(vocab.eos_ids), add_prefix_space=False)

  return vocab.lazy("xgrammar.TokenizerInfo", build)


def grammar_compiler(vocab) -> Any:
  """The xgrammar GrammarCompiler for ``vocab`` (one per vocabulary; its own cache disabled)."""
  return vocab.lazy(
      "xgrammar.GrammarCompiler",
      lambda: xgr.GrammarCompiler(tokenizer_info(vocab), max_threads=1, cache_enabled=False))


def compile_grammar(vocab, ebnf: str) -> Any:
  """Compiles GBNF/EBNF text (entry rule ``root``)."""
  return grammar_compiler(vocab).compile_grammar(ebnf, root_rule_name="root")


def compile_json_schema(vocab, schema: str, *, max_whitespace: int, strict: bool = False) -> Any:
  """Compiles a JSON Schema; whitespace between tokens in runs of at most ``max_whitespace``
  (0: none at all, ``,`` / ``:`` separators, as llguidance's non-flexible whitespace)."""
  if max_whitespace == 0:
    return grammar_compiler(vocab).compile_json_schema(
        schema, any_whitespace=False, separators=(",", ":"), strict_mode=strict)
  return grammar_compiler(vocab).compile_json_schema(
      schema, any_whitespace=True, max_whitespace_cnt=max_whitespace, strict_mode=strict)


def compile_regex(vocab, pattern: str) -> Any:
  """Compiles a whole-content regex."""
  return grammar_compiler(vocab).compile_regex(pattern)


def ebnf_of_ebnf(ebnf: str) -> str:
  """The library's normalized EBNF text (entry ``root``) of GBNF/EBNF text (no compile;
  raises the library's error, with line and column, on a syntax error)."""
  return str(xgr.Grammar.from_ebnf(ebnf, root_rule_name="root"))


def ebnf_of_regex(pattern: str) -> str:
  """EBNF text (entry ``root``) of a whole-content regex (no compile)."""
  return str(xgr.Grammar.from_regex(pattern))


def ebnf_of_json_schema(schema: str, *, compact: bool, max_whitespace: int = 0) -> str:
  """EBNF text (entry ``root``) of a JSON Schema (no compile); objects follow the schema's
  own ``additionalProperties`` (close them first for strict mode: `schema.close`).

  Args:
    compact: no free whitespace, ``, `` / ``: `` separators (tool arguments); else
      whitespace runs of at most ``max_whitespace``.
  """
  if compact:
    return str(xgr.Grammar.from_json_schema(schema, any_whitespace=False,
                                            separators=(", ", ": "), strict_mode=False))
  return str(xgr.Grammar.from_json_schema(schema, any_whitespace=True,
                                          max_whitespace_cnt=max_whitespace, strict_mode=False))


def compiled_memory_bytes(compiled: Any) -> int:
  """Bytes the compiled grammar holds (for the cache's byte budget)."""
  return int(compiled.memory_size_bytes)


def new_matcher(compiled: Any) -> Any:
  """A fresh GrammarMatcher (one per session, never shared)."""
  return xgr.GrammarMatcher(compiled)


class MatcherCalls(NamedTuple):
  """One matcher's per-token methods, bound once (the session's mask path calls them directly).

  The library's public methods are thin Python wrappers (a property read, then the FFI
  method, ~0.6 us per mask fill); these are the FFI methods themselves, which take every
  argument positionally:

    fill(bitmask, row, False) -> bool: fills ``bitmask[row]``. ``bitmask`` must be a
      C-contiguous int32 numpy array [N, W]: the library writes through DLPack by data
      pointer and checks dtype, width, row and read-only but not strides, so a strided view
      would be written out of place (callers check with `check_buffer` or an equivalent).
      Raises RuntimeError when the matcher has terminated.
    accept_token(token, False) -> bool;  rollback(n);  is_terminated() -> bool.
  """

  fill: Callable[[np.ndarray, int, bool], bool]
  accept_token: Callable[[int, bool], bool]
  rollback: Callable[[int], None]
  is_terminated: Callable[[], bool]


def matcher_calls(matcher: Any) -> MatcherCalls:
  """The `MatcherCalls` of ``matcher`` (the public methods if the FFI object is not exposed)."""
  h = getattr(matcher, "_handle", None)
  try:
    return MatcherCalls(h.fill_next_token_bitmask, h.accept_token, h.rollback, h.is_terminated)
  except AttributeError:
    return MatcherCalls(
        lambda buf, row, debug: matcher.fill_next_token_bitmask(buf, row, debug_print=debug),
        lambda token, debug: matcher.accept_token(token, debug_print=debug),
        matcher.rollback, matcher.is_terminated)


def batch_matcher(max_threads: int = 2) -> Any:
  """A BatchGrammarMatcher filling many matchers' masks with ``max_threads`` threads."""
  return xgr.BatchGrammarMatcher(max_threads)

