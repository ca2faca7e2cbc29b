"""Chat prompts rendered with a model's own jinja2 chat template, as Hugging Face renders them.

The one renderer of the package: `models.Tokenizer.apply_chat_template` and
`constrain.framing.render_chat` both render through `ChatTemplate`, so a chat renders the same
bytes whichever path a surface takes. `frame_prompt` is the one framing of a plain prompt
(a user turn, optional system turn, then the assistant header) that the CLI's --chat, the
Python API, training, the studies and the benchmarks feed the model. Host only (json +
jinja2): models and constrain both import it, it imports neither.
"""

from __future__ import annotations

import datetime
import functools
import json
from pathlib import Path
from typing import Any, Mapping, Sequence

# The template a tokenizer without one renders with (plain ChatML turns).
CHATML = ("{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n"
          "{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")
# Template variables holding special-token spellings -> GGUF metadata key (tokenizer.ggml.*)
# holding the token's id.
_GGUF_SPECIAL = {"bos_token": "bos_token_id", "eos_token": "eos_token_id",
                 "pad_token": "padding_token_id", "unk_token": "unknown_token_id"}


class ChatTemplate:
  """A model's jinja2 chat template, rendered the way Hugging Face renders it.

  Same environment as ``transformers``: sandboxed, ``trim_blocks`` / ``lstrip_blocks``, loop
  controls, ``tojson`` without ASCII escaping, ``raise_exception`` and ``strftime_now``
  globals; the special tokens' spellings (``bos_token``, ``eos_token``, ...) are template
  variables and ``tools`` is always defined (None without tools), as in ``transformers``.

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
  def from_dir(cls, path: str | Path) -> ChatTemplate:
    """Loads ``tokenizer_config.json`` (or a ``chat_template.jinja`` beside it).

    Raises:
      ValueError: no chat template there (the message names the file).
    """
    path = Path(path)
    cfg_path = path / "tokenizer_config.json" if path.is_dir() else path
    source, special = template_of_config(cfg_path)
    if not source:
      raise ValueError(f"{cfg_path} has no chat_template")
    return cls(source, special)

  @classmethod
  def from_gguf(cls, path: str | Path) -> ChatTemplate:
    """Reads ``tokenizer.chat_template`` and the special tokens' spellings from a GGUF file.

    Raises:
      ValueError: the file's metadata has no chat template (the message names the file).
    """
    from infernix_jax import gguf_reader  # local: only this constructor needs the reader

    source, special = template_of_gguf(gguf_reader.open_reader(path).fields)
    if not source:
      raise ValueError(f"{path} has no chat template (no tokenizer.chat_template in its GGUF "
                       "metadata)")
    return cls(source, special)

  @classmethod
  def for_model(cls, source: str | Path) -> ChatTemplate:
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
             tools: Sequence[Any] | None = None, add_generation_prompt: bool = True,
             **kwargs) -> str:
    """The prompt text for ``messages`` (and tools) exactly as the template writes it.

    Args:
      messages: chat messages (``role``, ``content``, optional ``tool_calls`` /
        ``reasoning_content``).
      tools: tool definitions (objects with ``to_openai()``, such as framing's
        ToolDefinition, or OpenAI-style dicts); None or empty for no tools.
      add_generation_prompt: end with the assistant turn header.
      **kwargs: template variables such as ``enable_thinking``.

    Raises:
      ValueError: the template called ``raise_exception`` (e.g. a role it does not know).
    """
    tool_list = None
    if tools:
      tool_list = [t.to_openai() if hasattr(t, "to_openai") else dict(t) for t in tools]
    return self._template.render(messages=list(messages), tools=tool_list,
                                 add_generation_prompt=add_generation_prompt,
                                 **self.special, **kwargs)


def template_of_config(cfg_path: Path,
                       cfg: Mapping[str, Any] | None = None) -> tuple[str | None, dict]:
  """The chat template and special spellings of an HF ``tokenizer_config.json``.

  A ``chat_template.jinja`` beside the file wins over its ``chat_template`` field; a list of
  named templates gives the ``default`` one.

  Args:
    cfg_path: the ``tokenizer_config.json`` path.
    cfg: its parsed contents, when the caller has read it already.

  Returns:
    (template source or None, {"bos_token": spelling, ...} for the special tokens it names).
  """
  if cfg is None:
    cfg = json.loads(Path(cfg_path).read_text(encoding="utf-8"))
  source = cfg.get("chat_template")
  jinja = Path(cfg_path).with_name("chat_template.jinja")
  if jinja.exists():
    source = jinja.read_text(encoding="utf-8")
  if isinstance(source, list):  # named templates: the default one
    source = next((t["template"] for t in source if t.get("name") == "default"), None)
  special = {}
  for key in _GGUF_SPECIAL:
    v = cfg.get(key)
    if isinstance(v, Mapping):
      v = v.get("content")
    if v is not None:
      special[key] = v
  return source or None, special


def template_of_gguf(fields: Mapping[str, Any]) -> tuple[str | None, dict]:
  """The chat template and special spellings in a GGUF file's metadata (`GGUFReader.fields`).

  Returns:
    (``tokenizer.chat_template`` or None, {"bos_token": spelling, ...} for the ids it names).
  """
  field = fields.get("tokenizer.chat_template")
  source = field.contents() if field is not None else None
  tokens = fields.get("tokenizer.ggml.tokens")
  special = {}
  for name, key in _GGUF_SPECIAL.items():
    f = fields.get(f"tokenizer.ggml.{key}")
    if f is not None and tokens is not None and 0 <= f.contents() < len(tokens.data):
      special[name] = tokens.contents(int(f.contents()))
  return source or None, special


@functools.lru_cache(maxsize=8)
def _load_template(path: str, mtime_ns: int) -> ChatTemplate:
  """One read per file version (a GGUF's metadata takes seconds to parse)."""
  del mtime_ns  # part of the cache key only
  if path.endswith(".gguf"):
    return ChatTemplate.from_gguf(path)
  return ChatTemplate.from_dir(path)


@functools.lru_cache(maxsize=16)
def compiled(source: str, special: tuple[tuple[str, str], ...] = ()) -> ChatTemplate:
  """The ChatTemplate of a source text and special spellings, compiled once per pair."""
  return ChatTemplate(source, dict(special))


def chat_messages(prompt: str, system: str | None = None) -> list[dict]:
  """The chat turns of a prompt: an optional system message, then the user message."""
  return ([{"role": "system", "content": system}] if system else []) + [
      {"role": "user", "content": prompt}]


def frame_prompt(tok, prompt: str, *, system: str | None = None) -> str:
  """The prompt text as `generate --chat` (and so `make run`) feeds it to the model.

  Args:
    tok: the model's tokenizer (`models.load_tokenizer`), whose chat template renders it.
    prompt: the user message.
    system: optional system message.

  Returns:
    The rendered turns ending with the assistant header (encode it with `tok.encode`).
  """
  return tok.apply_chat_template(chat_messages(prompt, system), add_generation_prompt=True)
