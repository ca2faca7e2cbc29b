"""Chat prompts rendered with the model's own chat template (``tokenizer_config.json`` or GGUF
metadata, jinja2)."""

from __future__ import annotations

import datetime
import functools
import json
from pathlib import Path
from typing import Any, Mapping, Sequence

from infernix_jax.constrain.framing.tools import ToolDefinition


# ChatTemplate special variable -> GGUF metadata key (tokenizer.ggml.*) holding its id.
_GGUF_SPECIAL = {"bos_token": "bos_token_id", "eos_token": "eos_token_id",
                 "pad_token": "padding_token_id", "unk_token": "unknown_token_id"}


class ChatTemplate:
  """A model's jinja2 chat template, rendered the way Hugging Face renders it.

  Same environment as ``transformers``: sandboxed, ``trim_blocks`` / ``lstrip_blocks``,
  ``tojson`` without ASCII escaping, ``raise_exception`` and ``strftime_now`` globals.

  Args:
    source: the template text.
    special: spellings of ``bos_token`` / ``eos_token`` etc. passed to the template.
  """

  def __init__(self, source: str, special: Mapping[str, str] | None = None):
    from jinja2.sandbox import ImmutableSandboxedEnvironment

    def raise_exception(message):
      raise ValueError(f"chat template error: {message}")

    def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
      return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators,
                        sort_keys=sort_keys)

    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                        extensions=["jinja2.ext.loopcontrols"])
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = lambda fmt: datetime.datetime.now().strftime(fmt)
    self.source = source
    self.special = dict(special or {})
    self._template = env.from_string(source)

  @classmethod
  def from_dir(cls, path: str | Path) -> "ChatTemplate":
    """Loads ``tokenizer_config.json`` (or a ``chat_template.jinja`` beside it)."""
    path = Path(path)
    cfg_path = path / "tokenizer_config.json" if path.is_dir() else path
    cfg = json.loads(cfg_path.read_text(encoding="utf-8"))
    source = cfg.get("chat_template")
    jinja = cfg_path.with_name("chat_template.jinja")
    if jinja.exists():
      source = jinja.read_text(encoding="utf-8")
    if isinstance(source, list):  # named templates: the default one
      source = next(t["template"] for t in source if t.get("name") == "default")
    if not source:
      raise ValueError(f"{cfg_path} has no chat_template")
    special = {}
    for key in ("bos_token", "eos_token", "pad_token", "unk_token"):
      v = cfg.get(key)
      if isinstance(v, Mapping):
        v = v.get("content")
      if v is not None:
        special[key] = v
    return cls(source, special)

  @classmethod
  def from_gguf(cls, path: str | Path) -> "ChatTemplate":
    """Reads ``tokenizer.chat_template`` and the special tokens' spellings from a GGUF file.

    Raises:
      ValueError: the file's metadata has no chat template (the message names the file).
    """
    import gguf  # local: only this constructor needs the reader

    fields = gguf.GGUFReader(str(path)).fields
    field = fields.get("tokenizer.chat_template")
    source = field.contents() if field is not None else None
    if not source:
      raise ValueError(f"{path} has no chat template (no tokenizer.chat_template in its GGUF "
                       "metadata)")
    tokens = fields.get("tokenizer.ggml.tokens")
    special = {}
    for name, key in _GGUF_SPECIAL.items():
      f = fields.get(f"tokenizer.ggml.{key}")
      if f is not None and tokens is not None and 0 <= f.contents() < len(tokens.data):
        special[name] = tokens.contents(int(f.contents()))
    return cls(source, special)

  @classmethod
  def for_model(cls, source: str | Path) -> "ChatTemplate":
    """The chat template of a model's tokenizer source (read once per file version).

    Args:
      source: a ``.gguf`` file, an HF model directory, or its ``tokenizer.json`` (what the
        loaders return as ``vocab_source``).

    Raises:
      ValueError: no chat template there (the message names the path and what was looked for).
    """
    path = Path(source)
    if path.is_file() and path.suffix == ".gguf":
      target = path
    elif path.is_dir() or (path.is_file() and path.suffix == ".json"):
      directory = path if path.is_dir() else path.parent
      target = directory / "tokenizer_config.json"
      if not target.is_file():
        raise ValueError(f"no chat template for {path}: no tokenizer_config.json in {directory}")
    else:
      raise ValueError(f"no chat template for {path}: expected a .gguf file, an HF model "
                       "directory or its tokenizer.json")
    return _load_template(str(target.resolve()), target.stat().st_mtime_ns)

  def render(self, messages: Sequence[Mapping[str, Any]], *,
             tools: Sequence[ToolDefinition | Mapping[str, Any]] | None = None,
             add_generation_prompt: bool = True, **kwargs) -> str:
    """The prompt text for ``messages`` (and tools) exactly as the template writes it.

    Args:
      messages: chat messages (``role``, ``content``, optional ``tool_calls`` /
        ``reasoning_content``).
      tools: tool definitions (ToolDefinition or OpenAI-style dicts); None for no tools.
      add_generation_prompt: end with the assistant turn header.
      **kwargs: template variables such as ``enable_thinking``.
    """
    tool_list = None
    if tools:
      tool_list = [t.to_openai() if isinstance(t, ToolDefinition) else dict(t) for t in tools]
    return self._template.render(messages=list(messages), tools=tool_list,
                                 add_generation_prompt=add_generation_prompt,
                                 **self.special, **kwargs)


@functools.lru_cache(maxsize=8)
def _load_template(path: str, mtime_ns: int) -> ChatTemplate:
  """One read per file version (a GGUF's metadata takes seconds to parse)."""
  del mtime_ns  # part of the cache key only
  if path.endswith(".gguf"):
    return ChatTemplate.from_gguf(path)
  return ChatTemplate.from_dir(path)
