"""Hermes-style tool calls as text, for vocabularies without Qwen's control markers (SmolLM2).

A call is a JSON object in tags, written with ordinary tokens and enforced by the grammar::

  <tool_call>
  {"name": "get_weather", "arguments": {"city": "Paris"}}
  </tool_call>

Policies follow `ToolChoice`: auto = content (which never holds ``<tool_call>``), then zero or
more calls; none = content only (not parsed for calls); required = one or more calls and no
content; a named choice = one call to that tool. Parallel calls are separated by one newline.
Each tool's ``parameters`` JSON Schema constrains its arguments (`tools.arguments_checked`:
always but under the Automatic policy's auto) in the constraint layer's subset: strict tools
close every object and reject unsupported keywords, others keep objects open and drop them.
A content constraint beside active tools must be JSON (its first byte then tells content from
a call).

The tool definitions reach the model through the system turn (`tool_instructions`), so any
chat template can carry them.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from typing import Any, Callable, Mapping, Sequence

from infernix_jax.constrain.errors import ConstraintError, FeatureConflictError
from infernix_jax.constrain.framing import _ebnf
from infernix_jax.constrain.framing._hermes_decoder import (ARGUMENTS_KEY, CALL_CLOSE,
                                                            CALL_HEAD, CALL_OPEN,
                                                            CALL_SEPARATOR, CALL_TAIL,
                                                            HermesDecoder)
from infernix_jax.constrain.framing.decoder import DecodedOutput
from infernix_jax.constrain.framing.grammar import ContentGrammar
from infernix_jax.constrain.framing.session import CompiledGrammarFacts, DecodedSession
from infernix_jax.constrain.framing.tools import (ToolChoice, ToolDefinition, ToolMode,
                                                  arguments_checked, resolve_choice)

FRAMING = "hermes"  # the framing name its grammars carry (part of their cache identity)

__all__ = ["ARGUMENTS_KEY", "CALL_CLOSE", "CALL_HEAD", "CALL_OPEN", "CALL_SEPARATOR",
           "CALL_TAIL", "CompiledHermes", "HermesDecoder", "HermesGrammar", "HermesPrepared",
           "HermesSession", "build_hermes_grammar", "format_call", "messages_with_tools",
           "prepare_hermes", "tool_instructions"]


def format_call(name: str, arguments: Any) -> str:
  """One call exactly as the grammar spells it (``arguments``: a dict or its JSON text)."""
  if not isinstance(arguments, str):
    arguments = json.dumps(arguments, ensure_ascii=False)
  return f"{CALL_HEAD}{json.dumps(name, ensure_ascii=False)}{ARGUMENTS_KEY}{arguments}{CALL_TAIL}"


# --- the prompt ----------------------------------------------------------------------------------

def tool_instructions(tools: Sequence[ToolDefinition], choice: ToolChoice | None = None) -> str:
  """The system-turn text declaring ``tools`` and the exact call format.

  Args:
    tools: the declared tools (all of them: the choice only adds a sentence).
    choice: the call policy (default auto).
  """
  choice = choice or ToolChoice.auto()
  lines = ["You can call functions. The available functions, one JSON object per line:"]
  for t in tools:
    lines.append(json.dumps({"name": t.name, "description": t.description,
                             "parameters": dict(t.parameters)}, ensure_ascii=False))
  lines += ["", "To call a function, write exactly:", format_call("FUNCTION_NAME",
                                                                  "ARGUMENTS_OBJECT"),
            "ARGUMENTS_OBJECT is a JSON object matching the function's parameters."]
  if choice.mode is ToolMode.NONE:
    lines.append("Do not call a function now: answer in text.")
  elif choice.mode is ToolMode.REQUIRED:
    if choice.allowed_names is not None:
      what = "the function " + ", ".join(choice.allowed_names)
    else:
      what = "at least one function" if choice.parallel else "one function"
    lines.append(f"Call {what} now; write nothing else.")
  else:
    lines.append("Call a function when it helps; otherwise answer in text.")
  if choice.mode is not ToolMode.NONE and choice.parallel:
    lines.append("Separate several calls with one newline.")
  return "\n".join(lines)


def _call_text(call: Mapping[str, Any]) -> str:
  fn = call.get("function", call)
  return format_call(str(fn.get("name", "")), fn.get("arguments", {}))


def _text(content: Any) -> str:
  """A message's content as text (OpenAI content parts: their text joined)."""
  if isinstance(content, list):
    return "".join(p.get("text", "") for p in content if isinstance(p, Mapping))
  return "" if content is None else str(content)


def messages_with_tools(messages: Sequence[Mapping[str, Any]], tools: Sequence[ToolDefinition],
                        choice: ToolChoice | None = None) -> list[dict[str, Any]]:
  """The chat messages with the tool instructions in the system turn, ready for any template.

  The instructions follow a leading system message (merged into one) or open a new one.
  Earlier assistant ``tool_calls`` are written into the assistant's content in the call
  format, and consecutive ``tool`` results become one user turn of ``<tool_response>`` blocks.

  Args:
    messages: OpenAI-style chat messages.
    tools: the declared tools.
    choice: the call policy (a sentence of the instructions).
  """
  instructions = tool_instructions(tools, choice)
  out: list[dict[str, Any]] = []
  results: dict[str, Any] | None = None  # the user turn collecting consecutive tool results
  for i, m in enumerate(messages):
    m = dict(m)
    role = m.get("role")
    if role == "tool":
      block = f"<tool_response>\n{_text(m.get('content'))}\n</tool_response>"
      if results is not None:
        results["content"] += "\n" + block
      else:
        results = {"role": "user", "content": block}
        out.append(results)
      continue
    results = None
    if i == 0 and role == "system":
      m["content"] = f"{_text(m.get('content'))}\n\n{instructions}".lstrip("\n")
      instructions = None
    elif role == "assistant" and m.get("tool_calls"):
      calls = CALL_SEPARATOR.join(_call_text(c) for c in m.pop("tool_calls"))
      m["content"] = _text(m.get("content")) + calls
    out.append(m)
  if instructions is not None:
    out.insert(0, {"role": "system", "content": instructions})
  return out


# --- the grammar ---------------------------------------------------------------------------------

@dataclasses.dataclass(frozen=True)
class HermesGrammar:
  """The output language of one request and the facts its decoder needs.

  Attributes:
    ebnf: the whole grammar (entry ``root``), or None when nothing is constrained.
    tool_names: the callable tools' names.
    tools_active: whether ``<tool_call>`` opens calls.
    key: stable identity of the language.
  """
  ebnf: str | None
  tool_names: tuple[str, ...]
  tools_active: bool
  key: str


def _arguments_ebnf(tool: ToolDefinition, json_value_ebnf: Callable[..., str],
                    checked: bool) -> str:
  """The arguments' EBNF (entry ``root``); errors name the tool and the JSON Pointer.

  Checked arguments follow ``parameters`` (strict: every object closed; else JSON Schema's
  open objects, unsupported assertion keywords dropped); unchecked ones are any object.
  """
  schema = dict(tool.parameters) if checked else {"type": "object"}
  try:
    return json_value_ebnf(schema, lenient=not tool.strict, closed=tool.strict)
  except ConstraintError as e:
    raise type(e)(f"tool {tool.name!r} parameters: {e.message}",
                  location=f"/parameters{e.location or ''}") from None
  except RuntimeError as e:  # the matcher library's conversion error
    first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
    from infernix_jax.constrain.errors import UnsupportedSchemaError
    raise UnsupportedSchemaError(f"tool {tool.name!r} parameters could not be converted: "
                                 f"{first}", location="/parameters") from None


def _call_rules(tools: Sequence[ToolDefinition], json_value_ebnf, choice: ToolChoice
                ) -> list[str]:
  lines, alts = [], []
  for i, tool in enumerate(tools):
    ebnf = _arguments_ebnf(tool, json_value_ebnf, arguments_checked(tool, choice))
    lines.append(_ebnf.rename_rules(ebnf, f"t{i}_args_"))
    head = json.dumps(tool.name, ensure_ascii=False) + ARGUMENTS_KEY
    lines.append(f"t{i}_call ::= {_ebnf.lit(head)} t{i}_args_root")
    alts.append(f"t{i}_call")
  lines.append(f"call ::= {_ebnf.lit(CALL_HEAD)} ({' | '.join(alts)}) {_ebnf.lit(CALL_TAIL)}")
  sep = _ebnf.lit(CALL_SEPARATOR)
  lines.append(f"calls ::= call ({sep} call)*" if choice.parallel else "calls ::= call")
  return lines


def build_hermes_grammar(tools: Sequence[ToolDefinition], choice: ToolChoice | None = None,
                         content: ContentGrammar | None = None, *,
                         json_value_ebnf: Callable[..., str] | None = None) -> HermesGrammar:
  """Builds the whole-output grammar of a Hermes-framed request.

  Args:
    tools: every declared tool (the choice selects the callable ones).
    choice: the call policy (default auto).
    content: an optional content constraint (JSON only beside active tools).
    json_value_ebnf: ``f(schema, lenient=, closed=) -> ebnf`` (default: the constraint
      layer's JSON Schema path, compact separators).

  Raises:
    ConstraintError: invalid tools or choice, an argument schema outside the subset (strict
      tools), or a non-JSON content constraint beside active tools.
  """
  choice = choice or ToolChoice.auto()
  if json_value_ebnf is None:
    from infernix_jax.constrain.framing._convert import json_value_ebnf
  callable_ = resolve_choice(tools, choice)
  tools_active = bool(callable_)
  if tools_active and content is not None and not content.is_json:
    raise FeatureConflictError("a grammar, regex or choice content constraint cannot be "
                               "combined with active tools (only JSON content can)")
  key = hashlib.sha256(json.dumps({
      "framing": FRAMING,
      "tools": [[t.name, t.strict, t.parameters] for t in callable_],
      "choice": [choice.mode.value, choice.parallel, choice.policy.value],
      "content": None if content is None else [content.ebnf, content.is_json]},
      sort_keys=True, default=str).encode()).hexdigest()[:32]
  names = tuple(t.name for t in callable_)
  if not tools_active and content is None:
    return HermesGrammar(None, names, False, key)
  lines = []
  if content is not None:
    lines.append(_ebnf.rename_rules(content.ebnf, "content_"))
  if tools_active:
    lines += _call_rules(callable_, json_value_ebnf, choice)
    if choice.mode is ToolMode.REQUIRED:
      body = "calls"
    elif content is not None:
      body = "(content_root) | (calls)"
    else:
      lines.append(_ebnf.excluding_rules("text", CALL_OPEN))
      body = "text (calls)?"
  else:
    body = "content_root"
  lines.append(f"root ::= {body}")
  return HermesGrammar("\n".join(lines), names, tools_active, key)


# --- compiled grammar, session, prepared request -------------------------------------------------

@dataclasses.dataclass(frozen=True)
class CompiledHermes(CompiledGrammarFacts):
  """A compiled Hermes grammar (`CompiledConstraint` of the request's backend, cached by the
  `ConstraintCompiler`) plus the facts its sessions decode with."""
  framed: HermesGrammar
  grammar: Any

  def new_session(self) -> "HermesSession":
    return HermesSession(self)


class HermesSession(DecodedSession):
  """One request's Hermes-framed output: the constraint session of its grammar (the request's
  backend) plus its decoder (never shared); the `DecodedSession` surface."""

  in_reasoning = False  # no reasoning block in this framing

  def __init__(self, compiled: CompiledHermes):
    self.compiled = compiled
    self.vocab = compiled.vocab
    super().__init__(compiled.grammar.new_session(), HermesDecoder(
        self.vocab, compiled.framed.tool_names, tools_active=compiled.framed.tools_active,
        constrained=True))


@dataclasses.dataclass(frozen=True)
class HermesPrepared:
  """A Hermes-framed request at submit: the same surface as `PreparedOutput`.

  Attributes:
    framed: the language and decoding facts.
    compiled: the compiled grammar, or None when nothing is constrained.
    vocab: the Vocabulary.
  """
  framed: HermesGrammar
  compiled: CompiledHermes | None
  vocab: Any

  @property
  def constrained(self) -> bool:
    return self.compiled is not None

  def new_session(self) -> HermesSession | None:
    """A fresh session (None when nothing is constrained: decode with `new_decoder`)."""
    return None if self.compiled is None else self.compiled.new_session()

  def new_decoder(self, *, constrained: bool = False) -> HermesDecoder:
    """A streaming decoder (``constrained``: the grammar route, unreadable output raises)."""
    fg = self.framed
    return HermesDecoder(self.vocab, fg.tool_names, tools_active=fg.tools_active,
                         constrained=constrained)


def prepare_hermes(vocab, *, tools: Sequence[ToolDefinition],
                   choice: ToolChoice | None = None, content=None,
                   compiler=None, backend: str | None = None) -> HermesPrepared:
  """Validates and compiles a Hermes-framed request (raises ConstraintError first).

  Args:
    vocab: the Vocabulary.
    tools: declared tools.
    choice: call policy (default auto).
    content: an optional `OutputConstraint` for the content.
    compiler: the `ConstraintCompiler` (default: the vocabulary's shared one).
    backend: the constraint backend the grammar compiles on (None or "auto": xgrammar).
  """
  from infernix_jax.constrain.compiler import ConstraintCompiler
  from infernix_jax.constrain.framing._compile import framing_backend
  from infernix_jax.constrain.framing._convert import content_ebnf
  from infernix_jax.constrain.spec import OutputConstraint

  cg = None
  if content is not None:
    cg = ContentGrammar(*content_ebnf(content))
  fg = build_hermes_grammar(tools, choice, cg)
  if fg.ebnf is None:
    return HermesPrepared(fg, None, vocab)
  compiler = ConstraintCompiler.for_vocab(vocab) if compiler is None else compiler
  spec = OutputConstraint.grammar(fg.ebnf).with_framing(FRAMING).with_backend(
      framing_backend(backend))
  return HermesPrepared(fg, CompiledHermes(fg, compiler.compile(spec)), vocab)
