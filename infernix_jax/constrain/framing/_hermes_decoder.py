"""Streaming decoder of Hermes-style output: content, then JSON calls in ``<tool_call>`` tags.

The format (`hermes.py` owns it; the grammar writes exactly this)::

  CONTENT<tool_call>\\n{"name": NAME, "arguments": ARGS}\\n</tool_call>\\n<tool_call>...

Everything is ordinary text, so calls are found at the byte level: content never holds the
opening tag (the grammar excludes it), a suffix of content that may start the tag is held back
until it is decided. The arguments object's JSON text is streamed as it arrives, so a call's
`ToolCallDelta` fragments concatenate to its final ``arguments_json``. Same events and result
as the Qwen `OutputDecoder`.
"""

from __future__ import annotations

import dataclasses
import json
from typing import Iterable

from infernix_jax.constrain.framing.decoder import (ContentDelta, DecodedOutput, DecodeError,
                                                    ToolCall, ToolCallDelta, ToolCallEnd,
                                                    ToolCallStart, _held_suffix, _Text)

CALL_OPEN = "<tool_call>"
CALL_CLOSE = "</tool_call>"
CALL_HEAD = CALL_OPEN + '\n{"name": '   # then the name as a JSON string
ARGUMENTS_KEY = ', "arguments": '          # then the arguments object
CALL_TAIL = "}\n" + CALL_CLOSE
CALL_SEPARATOR = "\n"                      # between parallel calls

_OPEN = CALL_OPEN.encode()
_AFTER_OPEN = CALL_HEAD.encode()[len(_OPEN):]
_KEY = ARGUMENTS_KEY.encode()
_TAIL = CALL_TAIL.encode()
_NEXT = (CALL_SEPARATOR + CALL_OPEN).encode()


@dataclasses.dataclass
class _OpenCall:
  """Parse state of the call being read."""
  index: int
  raw: bytearray            # every byte since the opening tag (published as content if abandoned)
  args: _Text               # the arguments' text so far
  stage: str = "head"       # head | name | key | args | tail
  pos: int = 0              # bytes of the current literal matched
  name_bytes: bytearray = dataclasses.field(default_factory=bytearray)
  name: str = ""
  depth: int = 0            # JSON nesting of the arguments
  in_string: bool = False
  escape: bool = False
  fragments: list = dataclasses.field(default_factory=list)

  def copy(self) -> "_OpenCall":
    return dataclasses.replace(self, raw=bytearray(self.raw), args=self.args.copy(),
                               name_bytes=bytearray(self.name_bytes),
                               fragments=list(self.fragments))


class HermesDecoder:
  """Parser of committed output tokens under Hermes framing (feed only committed tokens).

  Args:
    vocab: the Vocabulary (token bytes, EOS and control ids).
    tool_names: the names a call may use (the callable tools).
    tools_active: whether ``<tool_call>`` opens calls (False: everything is content).
    constrained: True on the grammar route: unreadable output raises DecodeError. False: a
      malformed call is published as the content text it was.
  """

  def __init__(self, vocab, tool_names: Iterable[str] = (), *, tools_active: bool = True,
               constrained: bool = True):
    self._bytes = vocab.token_bytes
    self._eos = frozenset(vocab.eos_ids)
    self._control = vocab.control_ids
    self._names = frozenset(tool_names)
    self._tools_active = tools_active and bool(self._names or not constrained)
    self._strict_route = constrained
    self._content = _Text("strict" if constrained else "replace")
    self._calls: list[ToolCall] = []
    self._held = b""          # body: a suffix that may begin the opening tag
    self._state = "body"      # body | call | after_call
    self._call: _OpenCall | None = None
    self._events: list = []
    self.branch = "undecided"
    self.ended = False

  def fork(self) -> "HermesDecoder":
    """An independent copy (a preview decodes on a fork; commit keeps it)."""
    d = HermesDecoder.__new__(HermesDecoder)
    d.__dict__.update(self.__dict__)
    d._content = self._content.copy()
    d._calls = list(self._calls)
    d._call = None if self._call is None else self._call.copy()
    d._events = []
    return d

  def feed(self, ids) -> list:
    """Decodes committed ids; returns the events they produce, in order."""
    self._events = []
    for t in ids:
      t = int(t)
      if self.ended:
        self._fail(f"token {t} after EOS")
        continue
      if t in self._eos:
        self._end_of_output()
      elif t in self._control and self._strict_route:
        self._fail(f"control token {t} in Hermes-framed output (every byte is ordinary text)")
      else:
        self._feed_bytes(self._bytes[t])
    return self._events

  def result(self) -> DecodedOutput:
    """The aggregate so far (equal to folding every event stream)."""
    return DecodedOutput("", self._content.text, tuple(self._calls), self.branch,
                         self._call is not None, self.ended)

  # --- bytes -----------------------------------------------------------------------------------

  def _feed_bytes(self, data: bytes) -> None:
    while data:
      if self._state == "call":
        data = self._call_bytes(data)
      elif self._state == "after_call":
        data = self._after_call(data)
      else:
        data = self._body_bytes(data)

  def _body_bytes(self, data: bytes) -> bytes:
    if not self._tools_active:
      self._publish(data)
      return b""
    buf = self._held + data
    k = buf.find(_OPEN)
    if k >= 0:
      self._held = b""
      self._publish(buf[:k])
      self._open_call()
      return buf[k + len(_OPEN):]
    keep = _held_suffix(buf, _OPEN)
    self._held = buf[len(buf) - keep:]
    self._publish(buf[:len(buf) - keep])
    return b""

  def _publish(self, data: bytes) -> None:
    if not data:
      return
    if self.branch == "undecided":
      self.branch = "content"
    try:
      s = self._content.feed(data)
    except UnicodeDecodeError as e:
      raise DecodeError(f"the constrained content is not UTF-8: {e}") from None
    if s:
      self._events.append(ContentDelta(s))

  def _after_call(self, data: bytes) -> bytes:
    """After a call: the separator and the next opening tag, or EOS."""
    n = 0
    while n < len(data) and len(self._held) + n < len(_NEXT):
      if data[n] != _NEXT[len(self._held) + n]:
        self._fail(f"text after a tool call: {self._held + data[:n + 1]!r}")
        held, self._held, self._state = self._held, b"", "body"
        self._publish(held + data[:n])
        return data[n:]
      n += 1
    self._held += data[:n]
    if self._held == _NEXT:
      self._held = b""
      self._open_call()
    return data[n:]

  def _end_of_output(self) -> None:
    if self._call is not None:
      self._fail("EOS inside an open tool call")
      self._abandon_call()
    if self._state == "after_call" and self._held:
      self._fail(f"EOS after a partial call separator {self._held!r}")
    held, self._held = self._held, b""
    self._publish(held)
    self.ended = True
    tail = self._content.feed(b"", final=True)
    if tail:
      self._events.append(ContentDelta(tail))

  def _fail(self, why: str) -> None:
    if self._strict_route:
      raise DecodeError(f"the constrained output cannot be decoded: {why}")

  # --- calls -----------------------------------------------------------------------------------

  def _open_call(self) -> None:
    self.branch = "tools"
    tail = self._content.feed(b"", final=True)  # free route: a cut character before the tag
    if tail:
      self._events.append(ContentDelta(tail))
    self._state = "call"
    self._call = _OpenCall(index=len(self._calls), raw=bytearray(),
                           args=_Text("strict" if self._strict_route else "replace"))

  def _abandon_call(self) -> None:
    """A malformed call (free route) is published as the content text it was."""
    c, self._call = self._call, None
    self._state = "body"
    self._publish(_OPEN + bytes(c.raw))

  def _give_up(self, why: str, data: bytes, i: int) -> bytes:
    """The call cannot be read: ``data[:i]`` joins its bytes, the rest goes back to the body
    (free route; the constrained route raises DecodeError)."""
    self._call.raw += data[:i]
    self._fail(why)
    self._abandon_call()
    return data[i:]

  def _call_bytes(self, data: bytes) -> bytes:
    """Consumes call bytes; returns what follows the call (its closing tag, or a give-up)."""
    c = self._call
    i = 0
    while i < len(data):
      if c.stage in ("head", "key", "tail"):
        expect = {"head": _AFTER_OPEN, "key": _KEY, "tail": _TAIL}[c.stage]
        n = min(len(data) - i, len(expect) - c.pos)
        if data[i:i + n] != expect[c.pos:c.pos + n]:
          return self._give_up(f"expected {expect[c.pos:]!r} in a tool call, got "
                               f"{data[i:i + n]!r}", data, i)
        i += n
        c.pos += n
        if c.pos < len(expect):
          continue
        c.pos = 0
        if c.stage == "tail":
          c.raw += data[:i]
          self._finish_call()
          return data[i:]
        c.stage = "name" if c.stage == "head" else "args"
      elif c.stage == "name":
        i, why = self._name_bytes(c, data, i)
        if why:
          return self._give_up(why, data, i)
      else:  # args
        start = i
        i = self._args_scan(c, data, i)
        if c.depth < 0:
          return self._give_up("the arguments are not a JSON object", data, i)
        try:
          s = c.args.feed(data[start:i], final=c.stage != "args")
        except UnicodeDecodeError as e:
          return self._give_up(f"arguments are not UTF-8: {e}", data, i)
        if s:
          c.fragments.append(s)
          self._events.append(ToolCallDelta(c.index, s))
    c.raw += data
    return b""

  def _name_bytes(self, c: _OpenCall, data: bytes, i: int) -> tuple[int, str]:
    """Reads the name's JSON string; at its closing quote, starts the call.

    Returns:
      (position after the bytes read, "" or why the name cannot be read).
    """
    while i < len(data):
      b = data[i]
      i += 1
      c.name_bytes.append(b)
      if len(c.name_bytes) == 1:
        if b != 0x22:
          return i - 1, f"expected the function name as a JSON string, got {bytes([b])!r}"
      elif c.escape:
        c.escape = False
      elif b == 0x5C:
        c.escape = True
      elif b == 0x22:
        try:
          name = json.loads(c.name_bytes.decode("utf-8"))
        except (UnicodeDecodeError, json.JSONDecodeError):
          name = None
        if not isinstance(name, str) or (self._strict_route and name not in self._names):
          return i, f"unknown function {bytes(c.name_bytes)!r}"
        c.name, c.stage, c.pos, c.escape = name, "key", 0, False
        self._events.append(ToolCallStart(c.index, name))
        return i, ""
    return i, ""

  @staticmethod
  def _args_scan(c: _OpenCall, data: bytes, i: int) -> int:
    """Advances over the arguments' bytes; stage becomes "tail" after the object's end."""
    while i < len(data):
      b = data[i]
      i += 1
      if c.depth == 0 and not c.in_string:
        if b != 0x7B:  # the arguments are an object
          c.depth = -1
          return i
      if c.in_string:
        if c.escape:
          c.escape = False
        elif b == 0x5C:
          c.escape = True
        elif b == 0x22:
          c.in_string = False
      elif b == 0x22:
        c.in_string = True
      elif b in (0x7B, 0x5B):
        c.depth += 1
      elif b in (0x7D, 0x5D):
        c.depth -= 1
        if c.depth == 0:
          c.stage, c.pos = "tail", 0
          return i
    return i

  def _finish_call(self) -> None:
    c, self._call = self._call, None
    call = ToolCall(c.name, "".join(c.fragments))
    try:
      json.loads(call.arguments_json)
    except json.JSONDecodeError as e:
      if self._strict_route:
        raise DecodeError(f"arguments of {call.name!r} are not JSON: {e}") from None
      self._call = c
      self._abandon_call()
      return
    self._calls.append(call)
    self._events.append(ToolCallEnd(c.index, call))
    self._state = "after_call"
