"""Output decoder: committed token ids -> reasoning, content and tool calls, streamed.

One decoding contract with the grammar: control tokens by id, the separator and all framing
by bytes, argument values by the encoding the tool's contract fixed before their bytes
arrive. Each call's argument fragments concatenate to its final ``arguments_json``, and the
aggregate result is built from the same events, so streamed and aggregate calls agree.
"""

from __future__ import annotations

import codecs
import copy
import dataclasses
import json
from typing import Mapping

from infernix_jax.constrain.framing import _args
from infernix_jax.constrain.framing.thinking import THINK_SEPARATOR, OutputPhase, QwenFraming


class DecodeError(RuntimeError):
  """Internal inconsistency: the grammar accepted output the decoder cannot read.

  Never a user error and never silently turned into content on the constrained route.
  """


@dataclasses.dataclass(frozen=True)
class ToolCall:
  """A completed call: the function name and its arguments as JSON text."""
  name: str
  arguments_json: str


@dataclasses.dataclass(frozen=True)
class ReasoningDelta:
  text: str


@dataclasses.dataclass(frozen=True)
class ContentDelta:
  text: str


@dataclasses.dataclass(frozen=True)
class ToolCallStart:
  index: int
  name: str


@dataclasses.dataclass(frozen=True)
class ToolCallDelta:
  """An argument fragment; a call's fragments concatenate to its ``arguments_json``."""
  index: int
  fragment: str


@dataclasses.dataclass(frozen=True)
class ToolCallEnd:
  index: int
  call: ToolCall


@dataclasses.dataclass(frozen=True)
class DecodedOutput:
  """The aggregate of everything decoded so far.

  Attributes:
    reasoning: reasoning text (framing newlines around the block removed).
    content: content text as generated (a leading space is kept).
    tool_calls: completed calls only (an unfinished call has no arguments_json).
    branch: "undecided", "content" or "tools".
    in_call: a call is open (truncated output leaves it unfinished).
    ended: EOS was read.
  """
  reasoning: str
  content: str
  tool_calls: tuple[ToolCall, ...]
  branch: str
  in_call: bool
  ended: bool


_FUNC_OPEN = b"\n<function="
_PARAM_OPEN = b"<parameter="
_FUNC_CLOSE = b"</function>\n"
_DELIM = _args.VALUE_DELIMITER.encode()


def _held_suffix(buf: bytes, delim: bytes) -> int:
  """Length of the longest suffix of ``buf`` that is a proper prefix of ``delim``."""
  for k in range(min(len(buf), len(delim) - 1), 0, -1):
    if buf.endswith(delim[:k]):
      return k
  return 0


class _Text:
  """Incremental UTF-8 text of one stream (partial sequences held back)."""

  def __init__(self, errors: str):
    self._dec = codecs.getincrementaldecoder("utf-8")(errors=errors)
    self.parts: list[str] = []

  def copy(self) -> "_Text":
    out = _Text.__new__(_Text)
    out._dec = codecs.getincrementaldecoder("utf-8")(errors=self._dec.errors)
    out._dec.setstate(self._dec.getstate())
    out.parts = list(self.parts)
    return out

  def feed(self, data: bytes, final: bool = False) -> str:
    s = self._dec.decode(data, final)
    if s:
      self.parts.append(s)
    return s

  @property
  def text(self) -> str:
    return "".join(self.parts)


class OutputDecoder:
  """Streaming parser of committed output tokens under Qwen framing.

  Feed it only committed tokens (the session feeds it at commit; a preview works on a fork).

  Args:
    vocab: the Vocabulary (token bytes, EOS ids).
    framing: control token ids.
    phase: the output phase the prompt left the model in.
    contracts: argument contract per callable tool name.
    tools_active: whether ``<tool_call>`` opens calls (False: it is content text).
    constrained: True on the grammar route: anything unreadable raises DecodeError. False on
      the free route: a malformed call is published as content.
  """

  def __init__(self, vocab, framing: QwenFraming, phase: OutputPhase,
               contracts: Mapping[str, _args.ToolContract] | None = None, *,
               tools_active: bool = True, constrained: bool = True):
    self._bytes = vocab.token_bytes
    self._eos = frozenset(vocab.eos_ids)
    self._control = vocab.control_ids
    self._f = framing
    self._contracts = dict(contracts or {})
    self._tools_active = tools_active and bool(self._contracts or not constrained)
    self._strict_route = constrained
    errors = "strict" if constrained else "replace"
    # Reasoning is token-level in the grammar (any token but </think>), so even on the
    # constrained route its bytes need not be UTF-8: shown with replacement characters.
    self._reasoning = _Text("replace")
    self._content = _Text(errors)
    self._calls: list[ToolCall] = []
    self.branch = "undecided"
    self.ended = False
    self._state = {OutputPhase.CONTENT: "body", OutputPhase.THINKING: "reasoning",
                   OutputPhase.THINK_OPEN: "start"}[phase]
    self._strip_lead = False  # one framing "\n" right after a generated <think>
    self._held_nl = False     # a reasoning "\n" that may be the framing before </think>
    self._sep = 0             # separator bytes matched
    self._call: dict | None = None
    self._events: list = []

  # --- public ----------------------------------------------------------------------------------

  def fork(self) -> "OutputDecoder":
    """An independent copy (previews decode on a fork; commit keeps it).

    Immutable tables (token bytes, contracts) are shared; only the parse state is copied.
    """
    d = copy.copy(self)
    d._reasoning = self._reasoning.copy()
    d._content = self._content.copy()
    d._calls = list(self._calls)
    d._events = []
    if self._call is not None:
      c = dict(self._call)
      for k in ("raw", "name", "pname", "value", "tag"):
        if k in c:
          c[k] = bytearray(c[k])
      c["fragments"] = list(c["fragments"])
      c["seen"] = set(c["seen"])
      if c.get("vtext") is not None:
        c["vtext"] = c["vtext"].copy()
      d._call = c
    return d

  def feed(self, ids) -> list:
    """Decodes committed ids; returns the events they produce, in order."""
    self._events = []
    for t in ids:
      t = int(t)
      if self.ended:
        self._fail(f"token {t} after EOS")
        continue
      self._token(t)
    return self._events

  def result(self) -> DecodedOutput:
    """The aggregate so far (equal to folding every event stream)."""
    return DecodedOutput(self._reasoning.text, self._content.text, tuple(self._calls),
                         self.branch, self._call is not None, self.ended)

  # --- token dispatch --------------------------------------------------------------------------

  def _token(self, t: int) -> None:
    f = self._f
    if t in self._eos:
      self._end_of_output()
      return
    st = self._state
    if st == "start":
      if t == f.think_open:
        self._state, self._strip_lead = "reasoning", True
        return
      self._state = st = "body"
    if st == "reasoning":
      if t == f.think_close:
        self._held_nl = False  # the framing line break before the close token
        self._state, self._sep = "separator", 0
        return
      self._reasoning_bytes(self._bytes[t])
      return
    if st == "separator":
      if t in self._control:
        self._fail(f"control token {t} inside the </think> separator")
        self._state = "body"
        self._body_token(t)
        return
      data = self._bytes[t]
      need = len(THINK_SEPARATOR) - self._sep
      head = data[:need]
      if head != THINK_SEPARATOR.encode()[self._sep:self._sep + len(head)]:
        self._fail(f"separator after </think> expected, got {data!r}")
        self._state = "body"
        self._body_bytes(data)
        return
      self._sep += len(head)
      if self._sep == len(THINK_SEPARATOR):
        self._state = "body"
        if data[need:]:
          self._body_bytes(data[need:])
      return
    self._body_token(t)

  def _reasoning_bytes(self, data: bytes) -> None:
    if self._strip_lead:
      self._strip_lead = False
      if data.startswith(b"\n"):
        data = data[1:]
    if not data:
      return
    if self._held_nl:
      data = b"\n" + data
      self._held_nl = False
    if data.endswith(b"\n"):
      data, self._held_nl = data[:-1], True
    s = self._reasoning.feed(data)
    if s:
      self._events.append(ReasoningDelta(s))

  def _body_token(self, t: int) -> None:
    f = self._f
    if t == f.tool_open and self._tools_active:
      if self._call is not None:
        self._fail("<tool_call> inside an open call")
      if self._state == "after_call":
        self._fail("calls must be separated by one newline")
      self._open_call()
      return
    if t == f.tool_close and self._call is not None:
      c = self._call
      if c["stage"] != "closed":
        self._fail(f"</tool_call> before the call's </function> (stage {c['stage']})")
        self._abandon_call()
        return
      self._finish_call()
      return
    if t in self._control and (self._strict_route or self._call is not None):
      self._fail(f"control token {t} where text was expected")
    self._body_bytes(self._bytes[t])

  def _body_bytes(self, data: bytes) -> None:
    if self._call is not None:
      self._call_bytes(data)
      return
    if self._state == "after_call":
      if data[:1] == b"\n":
        self._state, data = "after_call_nl", data[1:]
      if not data:
        return
      self._fail(f"text after a tool call: {data!r}")
    elif self._state == "after_call_nl":
      self._fail(f"text between tool calls: {data!r}")
    if self.branch == "undecided":
      self.branch = "content"
    s = self._content.feed(data)
    if s:
      self._events.append(ContentDelta(s))

  def _end_of_output(self) -> None:
    if self._state in ("reasoning", "separator") and self._strict_route:
      self._fail("EOS inside reasoning")
    if self._call is not None:
      self._fail("EOS inside an open tool call")
      self._abandon_call()
    self.ended = True
    tail = self._content.feed(b"", final=True)
    if tail:
      self._events.append(ContentDelta(tail))

  def _fail(self, why: str) -> None:
    if self._strict_route:
      raise DecodeError(f"the constrained output cannot be decoded: {why}")

  # --- tool calls ------------------------------------------------------------------------------

  def _open_call(self) -> None:
    self.branch = "tools"
    self._content.feed(b"", final=True)
    self._call = {"stage": "head", "expect": _FUNC_OPEN, "pos": 0, "raw": bytearray(),
                  "name": bytearray(), "fragments": [], "params": 0, "seen": set(),
                  "pname": bytearray(), "value": bytearray(), "enc": None, "vtext": None,
                  "index": len(self._calls)}

  def _abandon_call(self) -> None:
    """Free route: a malformed call is published as the content text it was."""
    c, self._call = self._call, None
    self._state = "body"
    raw = self._bytes[self._f.tool_open] + bytes(c["raw"])
    s = self._content.feed(raw)
    if s:
      self._events.append(ContentDelta(s))

  def _emit(self, fragment: str) -> None:
    c = self._call
    c["fragments"].append(fragment)
    self._events.append(ToolCallDelta(c["index"], fragment))

  def _call_bytes(self, data: bytes) -> None:
    c = self._call
    c["raw"] += data
    i = 0
    while i < len(data) and self._call is not None:
      stage = c["stage"]
      if stage in ("head", "param_nl"):
        exp = c["expect"]
        b = data[i:i + 1]
        if b != exp[c["pos"]:c["pos"] + 1]:
          return self._call_error(f"expected {exp!r} at byte {c['pos']}, got {b!r}")
        c["pos"] += 1
        i += 1
        if c["pos"] == len(exp):
          c["stage"] = "name" if stage == "head" else "args"
      elif stage == "name":
        j = data.find(b">", i)
        if j < 0:
          c["name"] += data[i:]
          return
        c["name"] += data[i:j]
        i = j + 1
        name = c["name"].decode("utf-8", errors="replace")
        if name not in self._contracts and self._strict_route:
          return self._call_error(f"unknown function {name!r}")
        c["fname"] = name
        c["stage"], c["expect"], c["pos"] = "param_nl", b"\n", 0
        self._events.append(ToolCallStart(c["index"], name))
      elif stage == "args":
        # Either <parameter=...> or </function>\n; decide on the first byte(s).
        c["stage"], c["expect"], c["pos"] = "args_tag", None, 0
        c["tag"] = bytearray()
      elif stage == "args_tag":
        c["tag"] += data[i:i + 1]
        i += 1
        tag = bytes(c["tag"])
        if tag == _PARAM_OPEN:
          c["stage"], c["pname"] = "pname", bytearray()
        elif tag == _FUNC_CLOSE:
          self._emit("}" if c["params"] else "{}")
          c["stage"] = "closed"
        elif not (_PARAM_OPEN.startswith(tag) or _FUNC_CLOSE.startswith(tag)):
          return self._call_error(f"expected <parameter= or </function>, got {tag!r}")
      elif stage == "pname":
        j = data.find(b">", i)
        if j < 0:
          c["pname"] += data[i:]
          return
        c["pname"] += data[i:j]
        i = j + 1
        if not self._start_value():
          return
      elif stage == "value_nl":
        if data[i:i + 1] != b"\n":
          return self._call_error("expected the framing newline after <parameter=NAME>")
        i += 1
        c["stage"] = "value"
      elif stage == "value":
        c["value"] += data[i:]
        i = len(data)
        self._value_progress()
      elif stage == "after_value":
        if data[i:i + 1] != b"\n":
          return self._call_error("expected a newline after </parameter>")
        i += 1
        c["stage"] = "args"
      elif stage == "closed":
        return self._call_error(f"bytes after </function>: {data[i:]!r}")

  def _call_error(self, why: str) -> None:
    self._fail(why)
    self._abandon_call()

  def _start_value(self) -> bool:
    c = self._call
    pname = c["pname"].decode("utf-8", errors="replace")
    contract = self._contracts.get(c["fname"])
    if pname in c["seen"]:
      self._call_error(f"parameter {pname!r} repeated in one call")
      return False
    enc = contract.encoding_of(pname) if contract is not None else None
    if contract is not None and contract.closed and enc is None:
      self._call_error(f"parameter {pname!r} is not declared by tool {c['fname']!r}, whose "
                       "arguments are closed")
      return False
    c["seen"].add(pname)
    c["enc"] = enc
    # A value the grammar checked is published as written (a JSON value verbatim).
    c["strict"] = bool(contract is not None and contract.value_checked(pname))
    c["vtext"] = _Text("strict" if self._strict_route else "replace")
    c["value"] = bytearray()
    c["stage"] = "value_nl"
    key = json.dumps(pname, ensure_ascii=False) + ": "
    c["key"] = ("{" if c["params"] == 0 else ", ") + key
    c["params"] += 1
    if c["enc"] is _args.Encoding.RAW or (c["strict"] and c["enc"] is _args.Encoding.JSON):
      self._emit(c["key"] + ('"' if c["enc"] is _args.Encoding.RAW else ""))
    return True

  def _value_progress(self) -> None:
    c = self._call
    buf = bytes(c["value"])
    k = buf.find(_DELIM)
    done = k >= 0
    if done:
      chunk, rest = buf[:k], buf[k + len(_DELIM):]
    else:
      keep = _held_suffix(buf, _DELIM)
      chunk, rest = buf[:len(buf) - keep], buf[len(buf) - keep:]
    c["value"] = bytearray() if done else bytearray(rest)
    try:
      s = c["vtext"].feed(chunk, final=done)
    except UnicodeDecodeError as e:
      return self._call_error(f"argument value is not UTF-8: {e}")
    streamed = c["enc"] is _args.Encoding.RAW or (c["strict"] and c["enc"] is _args.Encoding.JSON)
    if s and streamed:
      self._emit(json.dumps(s, ensure_ascii=False)[1:-1] if c["enc"] is _args.Encoding.RAW else s)
    if not done:
      return
    text = c["vtext"].text
    if c["enc"] is _args.Encoding.RAW:
      self._emit('"')
    elif c["strict"]:
      try:
        json.loads(text)
      except json.JSONDecodeError:
        return self._call_error(f"strict JSON argument is not JSON: {text!r}")
    else:  # non-strict, non-string: its JSON depends on all of it
      try:
        value = _args.canonical_json(json.loads(text))
      except json.JSONDecodeError:
        value = json.dumps(text, ensure_ascii=False)
      self._emit(c["key"] + value)
    c["stage"] = "after_value"
    if rest:
      self._call_bytes_continue(rest)

  def _call_bytes_continue(self, rest: bytes) -> None:
    c = self._call
    c["raw"] = c["raw"][:len(c["raw"]) - len(rest)]  # _call_bytes appends it again
    self._call_bytes(rest)

  def _finish_call(self) -> None:
    c, self._call = self._call, None
    call = ToolCall(c["fname"], "".join(c["fragments"]))
    if self._strict_route:
      try:
        json.loads(call.arguments_json)
      except json.JSONDecodeError as e:
        raise DecodeError(f"arguments of {call.name!r} are not JSON: {e}") from None
    self._calls.append(call)
    self._events.append(ToolCallEnd(c["index"], call))
    self._state = "after_call"
