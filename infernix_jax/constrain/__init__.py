"""Host-side constraint layer: vocabularies, constraint specs, compile cache, sessions, masks.

Pure host code (numpy + xgrammar through `_xgr`); never imports jax, torch or transformers.

  from infernix_jax import constrain as ic
  vocab = ic.Vocabulary.from_tokenizer_json(path)
  compiled = ic.ConstraintCompiler(vocab).compile(ic.OutputConstraint.json_schema(text))
  session = compiled.new_session()        # compiled.backend: "xgrammar", "trie", ...
"""

from infernix_jax.constrain.errors import (
    ChoiceError,
    ConstraintError,
    FeatureConflictError,
    GrammarSyntaxError,
    NoExactBackendError,
    PrefixError,
    RegexError,
    SchemaError,
    TokenReferenceError,
    UnsupportedConstraintError,
    UnsupportedSchemaError,
)
from infernix_jax.constrain import backends
from infernix_jax.constrain.backends.xgrammar import XGrammarSession
from infernix_jax.constrain.batch import fill_batch
from infernix_jax.constrain.compiler import (
    DEFAULT_CACHE_BYTES,
    CompiledConstraint,
    CompileStats,
    ConstraintCompiler,
)
from infernix_jax.constrain.session import MatcherSession, PreviewResult
from infernix_jax.constrain.spec import ConstraintKind, OutputConstraint
from infernix_jax.constrain.vocab import Vocabulary, smollm2_gguf_path
from infernix_jax.constrain import framing  # Qwen output framing: thinking, tool calls

__all__ = [
    "DEFAULT_CACHE_BYTES",
    "ChoiceError",
    "CompileStats",
    "CompiledConstraint",
    "ConstraintCompiler",
    "ConstraintKind",
    "OutputConstraint",
    "MatcherSession",
    "PreviewResult",
    "backends",
    "fill_batch",
    "framing",
    "ConstraintError",
    "FeatureConflictError",
    "GrammarSyntaxError",
    "PrefixError",
    "RegexError",
    "SchemaError",
    "TokenReferenceError",
    "UnsupportedConstraintError",
    "UnsupportedSchemaError",
    "NoExactBackendError",
    "Vocabulary",
    "XGrammarSession",
    "smollm2_gguf_path",
]
