"""Text <-> ids for a model's tokenizer source: tokenizer.json, an HF directory, or a GGUF file."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Mapping, Sequence

import tokenizers
from tokenizers import AddedToken, Regex, decoders, models, pre_tokenizers

from infernix_jax import chat_template as _chat_template
from infernix_jax import gguf_reader

# llama.cpp pre-tokenizer regexes (the `tokenizer.ggml.pre` key) that differ from GPT-2.
_QWEN2_SPLIT = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}"
                r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")
_GGUF_CONTROL, _GGUF_USER_DEFINED = 3, 4  # llama.cpp token types kept whole when encoding


@dataclasses.dataclass
class Tokenizer:
  """A BPE tokenizer with the model's chat template.

  Attributes:
    backend: the `tokenizers.Tokenizer` doing the work.
    chat_template: Jinja chat template string, or None when the source has none.
    eos_id: end-of-sequence (end-of-turn) token id, or None.
    bos_id: beginning-of-sequence token id, or None.
    chat_special: spellings of the special tokens the template reads (``bos_token``,
      ``eos_token``, ...), from the same metadata `ChatTemplate.for_model` reads.
  """

  backend: tokenizers.Tokenizer
  chat_template: str | None = None
  eos_id: int | None = None
  bos_id: int | None = None
  chat_special: Mapping[str, str] = dataclasses.field(default_factory=dict)

  @property
  def vocab_size(self) -> int:
    """V: ids 0..V-1 (special tokens included)."""
    return self.backend.get_vocab_size(with_added_tokens=True)

  def encode(self, text: str) -> list[int]:
    """Token ids of text; special-token spellings (e.g. `<|im_start|>`) map to their ids."""
    return self.backend.encode(text, add_special_tokens=False).ids

  def decode(self, ids: Sequence[int], skip_special: bool = False) -> str:
    """Text of ids (bytes of partial UTF-8 sequences are replaced)."""
    return self.backend.decode(list(map(int, ids)), skip_special_tokens=skip_special)

  def apply_chat_template(self, messages: list[dict], add_generation_prompt: bool = True,
                          **kwargs) -> str:
    """Renders messages with the model's own template (ChatML when the source has none).

    The one renderer (`infernix_jax.chat_template.ChatTemplate`, also behind
    `constrain.framing.render_chat`): Hugging Face's environment and variables, so templates
    render byte-identically to ``transformers`` and to framing's prompts.

    Args:
      messages: [{"role": ..., "content": ...}, ...].
      add_generation_prompt: end with the assistant turn header.
      **kwargs: extra template variables (e.g. `enable_thinking=False`, `tools=[...]`).
    """
    template = _chat_template.compiled(self.chat_template or _chat_template.CHATML,
                                       tuple(sorted(self.chat_special.items())))
    return template.render(messages, add_generation_prompt=add_generation_prompt, **kwargs)


def _from_gguf(path: Path) -> Tokenizer:
  reader = gguf_reader.open_reader(path)
  fields = reader.fields
  model = fields["tokenizer.ggml.model"].contents()
  if model != "gpt2":
    raise ValueError(f"{path}: tokenizer.ggml.model={model!r}; only byte-level BPE (gpt2) "
                     "GGUF tokenizers are supported")
  tokens = fields["tokenizer.ggml.tokens"].contents()
  types = fields["tokenizer.ggml.token_type"].contents()
  merges = [tuple(m.split(" ", 1)) for m in fields["tokenizer.ggml.merges"].contents()]
  backend = tokenizers.Tokenizer(models.BPE(vocab={t: i for i, t in enumerate(tokens)},
                                            merges=merges, fuse_unk=False))
  pre = fields["tokenizer.ggml.pre"].contents() if "tokenizer.ggml.pre" in fields else "gpt2"
  byte_level = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
  if pre == "smollm":  # digits one by one, then the GPT-2 split
    backend.pre_tokenizer = pre_tokenizers.Sequence(
        [pre_tokenizers.Digits(individual_digits=True), byte_level])
  elif pre == "qwen2":
    backend.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(_QWEN2_SPLIT), behavior="isolated"),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
  else:
    backend.pre_tokenizer = byte_level
  backend.decoder = decoders.ByteLevel()
  backend.add_special_tokens([AddedToken(t, special=True, normalized=False)
                              for t, kind in zip(tokens, types)
                              if kind in (_GGUF_CONTROL, _GGUF_USER_DEFINED)])
  get = lambda k: fields[k].contents() if k in fields else None
  template, special = _chat_template.template_of_gguf(fields)
  return Tokenizer(backend, chat_template=template, eos_id=get("tokenizer.ggml.eos_token_id"),
                   bos_id=get("tokenizer.ggml.bos_token_id"), chat_special=special)


def _from_tokenizer_json(path: Path) -> Tokenizer:
  backend = tokenizers.Tokenizer.from_file(str(path))
  template = eos = bos = None
  special = {}
  config = path.parent / "tokenizer_config.json"
  if config.exists():
    data = json.loads(config.read_text(encoding="utf-8"))
    template, special = _chat_template.template_of_config(config, data)
    token_id = lambda t: backend.token_to_id(t if isinstance(t, str) else t["content"])
    eos = token_id(data["eos_token"]) if data.get("eos_token") else None
    bos = token_id(data["bos_token"]) if data.get("bos_token") else None
  return Tokenizer(backend, chat_template=template, eos_id=eos, bos_id=bos,
                   chat_special=special)


def load_tokenizer(path) -> Tokenizer:
  """Loads the tokenizer a loader returned as `vocab_source`.

  Args:
    path: a `.gguf` file, a `tokenizer.json`, or a directory holding `tokenizer.json`.

  Returns:
    A `Tokenizer` (encode / decode / apply_chat_template).
  """
  path = Path(path)
  if path.is_dir():
    path = path / "tokenizer.json"
  if path.suffix == ".gguf":
    return _from_gguf(path)
  if not path.exists():
    raise FileNotFoundError(f"no tokenizer at {path}; pass a .gguf file or a tokenizer.json")
  return _from_tokenizer_json(path)
