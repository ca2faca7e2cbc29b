"""Qwen output phases and control tokens: the reasoning block and its canonical close."""

from __future__ import annotations

import dataclasses
import enum

from infernix_jax.constrain.errors import TokenReferenceError

THINK_SEPARATOR = "\n\n"  # exactly this, byte-level, after the </think> token
FORCED_CLOSE = "\n</think>\n\n"  # canonical serialization injected by a thinking budget


class OutputPhase(enum.Enum):
  """Where the rendered prompt leaves the model."""
  CONTENT = "content"        # thinking closed (or none): content / tool rules start at once
  THINKING = "thinking"      # inside <think>: free reasoning, </think>, separator, content
  THINK_OPEN = "think_open"  # the model may open <think> itself (Qwen3 template default)


@dataclasses.dataclass(frozen=True)
class QwenFraming:
  """The control tokens of Qwen's output framing, resolved by id in one vocabulary.

  Attributes:
    think_open / think_close: ``<think>`` / ``</think>`` ids.
    tool_open / tool_close: ``<tool_call>`` / ``</tool_call>`` ids.
    eos_ids: completion controls (never allowed inside reasoning).
    newline_id: the ordinary ``"\\n"`` token (forced-close string).
    separator_id: the ordinary ``"\\n\\n"`` token, or None if the vocabulary splits it.
  """
  think_open: int
  think_close: int
  tool_open: int
  tool_close: int
  eos_ids: tuple[int, ...]
  newline_id: int
  separator_id: int | None

  @classmethod
  def from_vocab(cls, vocab) -> "QwenFraming":
    """Looks the markers up among ``vocab``'s control tokens (never by ordinary spelling).

    Raises:
      TokenReferenceError: a marker is missing (not a Qwen-family vocabulary).
    """
    try:
      sep = vocab.token_id(THINK_SEPARATOR, control=False)
    except TokenReferenceError:
      sep = None
    return cls(think_open=vocab.token_id("<think>", control=True),
               think_close=vocab.token_id("</think>", control=True),
               tool_open=vocab.token_id("<tool_call>", control=True),
               tool_close=vocab.token_id("</tool_call>", control=True),
               eos_ids=tuple(vocab.eos_ids), newline_id=vocab.token_id("\n", control=False),
               separator_id=sep)

  def forced_close_tokens(self) -> list[int]:
    """The token ids of the canonical close ``\\n</think>\\n\\n`` (no sampling, no RNG)."""
    sep = [self.separator_id] if self.separator_id is not None else [self.newline_id] * 2
    return [self.newline_id, self.think_close, *sep]


def phase_of_prompt(prompt_ids, framing: QwenFraming, *, vocab=None) -> OutputPhase:
  """The output phase a rendered prompt leaves the model in (by token ids, not spelling).

  The last ``<think>``/``</think>`` control token of the final turn decides: an open block
  means THINKING, a closed one CONTENT. A prompt that ends an assistant turn header (another
  control token, e.g. ``<|im_start|>``, comes first) lets the model open the block itself
  (THINK_OPEN). A raw prompt with no control token is a plain continuation (CONTENT).

  Args:
    prompt_ids: the rendered prompt's token ids.
    framing: the vocabulary's markers.
    vocab: the Vocabulary (its control ids mark the turn header); None: only the markers.
  """
  for t in reversed(list(prompt_ids)):
    t = int(t)
    if t == framing.think_close:
      return OutputPhase.CONTENT
    if t == framing.think_open:
      return OutputPhase.THINKING
    if vocab is not None and t in vocab.control_ids:
      return OutputPhase.THINK_OPEN  # the assistant turn header, no thinking block yet
  return OutputPhase.CONTENT
