"""One grammar over the whole Qwen output: reasoning, separator, content and tool calls.

Thinking framing sits outside the content/tool union. Control tokens are matched by id
(``Token(id)`` / ``ExcludeToken(ids)``); the separator and everything after it is matched at
the byte level, so a token holding the end of the separator and the start of the content is
legal, and ``</think>`` spelled with ordinary tokens stays reasoning.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from typing import Callable, Mapping, Sequence

from infernix_jax.constrain.errors import FeatureConflictError
from infernix_jax.constrain.framing import _args, _ebnf
from infernix_jax.constrain.framing.thinking import THINK_SEPARATOR, OutputPhase, QwenFraming
from infernix_jax.constrain.framing.tools import (ToolChoice, ToolDefinition, ToolMode,
                                                  ToolPolicy, arguments_checked, resolve_choice)

# Any Unicode scalar value, byte-level: control tokens (never UTF-8 text) cannot match it.
_ANY_CHAR = "[\\0-\\U0010ffff]"


@dataclasses.dataclass(frozen=True)
class ContentGrammar:
  """A content constraint as embeddable EBNF (entry rule ``root``).

  Attributes:
    ebnf: the rules.
    is_json: a JSON value language (may form a union with tool calls under auto).
  """
  ebnf: str
  is_json: bool


@dataclasses.dataclass(frozen=True)
class FramedGrammar:
  """The compiled-to-text output language of one request and the facts its decoder needs.

  Attributes:
    ebnf: the whole grammar (entry ``root``), or None when nothing is constrained (the decoder
      still splits reasoning / content / calls on the free route).
    phase: the starting output phase.
    framing: control token ids.
    contracts: argument contract per callable tool name (decoder's value encodings).
    tools_active: whether ``<tool_call>`` may open calls.
    content_json: the content branch is a JSON language (union with calls under auto).
    nonstrict: some callable tool is non-strict (the name companion runs: names unique,
      required names present before the close).
    key: stable identity of the language (compile cache key).
  """
  ebnf: str | None
  phase: OutputPhase
  framing: QwenFraming
  contracts: Mapping[str, _args.ToolContract]
  tools_active: bool
  content_json: bool
  nonstrict: bool
  key: str


def _reasoning_rules(f: QwenFraming) -> str:
  excluded = ", ".join(str(i) for i in sorted({f.think_close, *f.eos_ids}))
  return "\n".join([
      f"reasoning_free ::= \"\" | (ExcludeToken({excluded}) reasoning_free)",
      f"reasoning ::= reasoning_free Token({f.think_close}) {_ebnf.lit(THINK_SEPARATOR)}",
  ])


def _call_rules(tools: Sequence[ToolDefinition], contracts: Mapping[str, _args.ToolContract],
                f: QwenFraming, parallel: bool) -> list[str]:
  lines = []
  alts = []
  nonstrict = False
  for i, tool in enumerate(tools):
    c = contracts[tool.name]
    head = _ebnf.lit(f"\n<function={tool.name}>\n")
    tail = _ebnf.lit("</function>\n")
    items = []
    for p in c.params:
      lines.append(p.rules)
      items.append(f"{_ebnf.lit(f'<parameter={p.name}>' + chr(10))} {p.rule} {_ebnf.lit(chr(10))}")
    if c.strict:  # declared order, each optional one at most once
      parts = [f"({item})" if p.required else f"({item})?" for p, item in zip(c.params, items)]
      args = " ".join(parts) if parts else '""'
    elif c.checked:  # any order; the name companion keeps names unique and required present
      if not c.closed:  # undeclared names: any but the declared ones, values free
        nonstrict = True
        lines.append(_ebnf.name_excluding_rules(f"t{i}_xname", [p.name for p in c.params]))
        items.append(f"\"<parameter=\" t{i}_xname \">\\n\" ns_value \"\\n\"")
      if items:
        lines.append(f"t{i}_param ::= " + " | ".join(f"({item})" for item in items))
        args = f"t{i}_param*"
      else:
        args = '""'
    else:
      nonstrict = True
      args = "ns_param*"
    lines.append(f"t{i}_call ::= Token({f.tool_open}) {head} {args} {tail} Token({f.tool_close})")
    alts.append(f"t{i}_call")
  if nonstrict:
    lines.append(_ebnf.until_delimiter_rules("ns_value", _args.VALUE_DELIMITER))
    lines.append("ns_name ::= [^<>\\n]+")
    lines.append(f"ns_param ::= \"<parameter=\" ns_name \">\\n\" ns_value \"\\n\"")
  lines.append("call ::= " + " | ".join(f"({a})" for a in alts))
  lines.append("calls ::= call (\"\\n\" call)*" if parallel else "calls ::= call")
  return lines


def build_grammar(framing: QwenFraming, phase: OutputPhase, *,
                  tools: Sequence[ToolDefinition] = (), choice: ToolChoice | None = None,
                  content: ContentGrammar | None = None,
                  json_value_ebnf: Callable[[Mapping], str] | None = None) -> FramedGrammar:
  """Builds the whole-output grammar of a request.

  Args:
    framing: the vocabulary's control token ids.
    phase: where the prompt leaves the model.
    tools: every declared tool (declarations are never edited; the choice selects).
    choice: the call policy (default: auto, Basic).
    content: an optional content constraint.
    json_value_ebnf: JSON value converter ``f(schema, lenient=, closed=)`` (default: the
      matcher library's, compact).

  Returns:
    The grammar text and decoding facts; ``ebnf`` is None when nothing is constrained.

  Raises:
    ConstraintError: invalid tools/choice, strict schemas the framing cannot represent, or
      a non-JSON content constraint combined with active tools.
  """
  choice = choice or ToolChoice.auto()
  if json_value_ebnf is None:
    from infernix_jax.constrain.framing._convert import json_value_ebnf
  callable_ = resolve_choice(tools, choice) if tools else ()
  if choice.mode is ToolMode.REQUIRED and not tools:
    resolve_choice(tools, choice)  # raises: required needs a tool
  contracts = {t.name: _args.build_contract(t, i, json_value_ebnf,
                                           checked=arguments_checked(t, choice))
               for i, t in enumerate(callable_)}
  tools_active = bool(callable_)
  if tools_active and content is not None and not content.is_json:
    raise FeatureConflictError("a grammar, regex or choice content constraint cannot be "
                               "combined with active tools (only JSON content can)")
  free_tools = (choice.policy is ToolPolicy.AUTOMATIC and choice.mode is ToolMode.AUTO
                and choice.allowed_names is None and choice.parallel
                and not any(t.strict for t in callable_))
  # none with declared tools still forbids the <tool_call> token, so it needs a grammar.
  constrained = (content is not None or (tools_active and not free_tools)
                 or (bool(tools) and choice.mode is ToolMode.NONE))
  nonstrict = any(not c.strict for c in contracts.values())
  key_src = json.dumps({
      "phase": phase.value, "framing": dataclasses.astuple(framing),
      "tools": [[t.name, t.strict, contracts[t.name].checked,
                 t.parameters if contracts[t.name].checked else None] for t in callable_],
      "choice": [choice.mode.value, choice.parallel, choice.policy.value],
      "content": None if content is None else [content.ebnf, content.is_json]},
      sort_keys=True, default=str)
  key = hashlib.sha256(key_src.encode()).hexdigest()[:32]
  if not constrained:
    return FramedGrammar(None, phase, framing, contracts, tools_active,
                         False, nonstrict, key)
  lines = []
  if content is not None:
    lines.append(_ebnf.rename_rules(content.ebnf, "content_"))
    content_rule = "content_root"
  else:
    lines.append(f"text ::= {_ANY_CHAR}*")
    content_rule = "text"
  if tools_active:
    lines += _call_rules(callable_, contracts, framing, choice.parallel)
    if choice.mode is ToolMode.REQUIRED:
      body = "calls"
    elif content is not None:
      body = f"({content_rule}) | (calls)"
    else:
      body = f"{content_rule} (calls)?"
  else:
    body = content_rule
  lines.append(f"body ::= {body}")
  if phase is OutputPhase.CONTENT:
    lines.append("root ::= body")
  else:
    lines.append(_reasoning_rules(framing))
    if phase is OutputPhase.THINKING:
      lines.append("root ::= reasoning body")
    else:
      lines.append(f"root ::= (Token({framing.think_open}) reasoning body) | (body)")
  return FramedGrammar("\n".join(lines), phase, framing, contracts, tools_active,
                       content is not None and content.is_json, nonstrict, key)
