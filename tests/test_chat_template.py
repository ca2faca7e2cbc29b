"""One chat renderer: `Tokenizer.apply_chat_template` and `framing.render_chat` (no tools)
write the same bytes, on the embedded SmolLM2 GGUF, the Qwen3 tokenizer directory and a tiny
HF directory whose template reads special tokens, `tojson` and `tools`."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from infernix_jax import chat_template
from infernix_jax import models as im
from infernix_jax.constrain import framing as fr
from infernix_jax.constrain.vocab import Vocabulary, smollm2_gguf_path

QWEN3_DIR = Path(__file__).resolve().parents[1] / "../shared/data/tokenizers/qwen3"

CONVERSATIONS = [
    [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi é <b>&"}],
    [{"role": "user", "content": "Capital of France?"},
     {"role": "assistant", "content": "Paris."},
     {"role": "user", "content": "And of Japan? Answer as {\"city\": ...}"}],
    [{"role": "system", "content": "S"}, {"role": "user", "content": "one"},
     {"role": "assistant", "content": "two"}, {"role": "user", "content": "three"},
     {"role": "assistant", "content": "four"}],
]

# Reads what the two old renderers disagreed on: the special spellings, `tojson` (Hugging
# Face's: no ASCII or HTML escaping, keys in order) and `tools` (always defined, None here).
TINY_TEMPLATE = (
    "{{ bos_token }}{% if tools is none %}[no tools]{% endif %}"
    "{% for m in messages %}<{{ m['role'] }}>{{ m | tojson }}{{ eos_token }}\n{% endfor %}"
    "{% if add_generation_prompt %}<assistant>{% endif %}")


WORDS = ["<unk>", "<s>", "</s>", "hello", "world"]


def tiny_vocab() -> Vocabulary:
  """The tiny directory's ids as a Vocabulary (render_chat reads it only with tools)."""
  return Vocabulary.from_tokens([w.encode() for w in WORDS], eos_ids=[2], control=[0, 1, 2])


def tiny_hf_dir(path: Path) -> Path:
  tokenizers = pytest.importorskip("tokenizers")
  words = WORDS
  backend = tokenizers.Tokenizer(tokenizers.models.WordLevel(
      {w: i for i, w in enumerate(words)}, unk_token="<unk>"))
  backend.pre_tokenizer = tokenizers.pre_tokenizers.Whitespace()
  backend.save(str(path / "tokenizer.json"))
  (path / "tokenizer_config.json").write_text(json.dumps({
      "bos_token": "<s>", "eos_token": {"content": "</s>"}, "unk_token": "<unk>",
      "chat_template": TINY_TEMPLATE}))
  return path


def sources(tmp_path) -> list[tuple[str, Path, Path]]:
  """(name, tokenizer source, what `render_chat` reads): the ones present here."""
  out = [("tiny", tiny_hf_dir(tmp_path), tmp_path / "tokenizer.json")]
  gguf = smollm2_gguf_path()
  if gguf is not None:
    out.append(("smollm2", gguf, gguf))
  if (QWEN3_DIR / "tokenizer.json").exists():
    out.append(("qwen3", QWEN3_DIR, QWEN3_DIR / "tokenizer.json"))
  return out


@pytest.mark.parametrize("name", ["tiny", "smollm2", "qwen3"])
def test_tokenizer_and_render_chat_write_the_same_bytes(tmp_path, name):
  found = {n: (src, chat) for n, src, chat in sources(tmp_path)}
  if name not in found:
    pytest.skip(f"{name} tokenizer not present")
  src, chat = found[name]
  tok = im.load_tokenizer(src)
  vocab = {"tiny": tiny_vocab, "smollm2": lambda: Vocabulary.from_gguf(src),
           "qwen3": lambda: Vocabulary.from_tokenizer_json(chat)}[name]()
  for messages in CONVERSATIONS:
    for gen in (True, False):
      ours = tok.apply_chat_template(messages, add_generation_prompt=gen)
      framed = fr.render_chat(chat, vocab, messages, tools=None, add_generation_prompt=gen)
      assert ours == framed, (name, messages, gen)
      assert framed == fr.ChatTemplate.for_model(chat).render(messages,
                                                              add_generation_prompt=gen)
      assert framed == fr.render_chat(chat, vocab, messages, add_generation_prompt=gen)
  if name == "tiny":
    text = tok.apply_chat_template(CONVERSATIONS[0])
    assert text.startswith("<s>[no tools]<system>") and "</s>\n" in text
    assert '"content": "Hi é <b>&"' in text  # no \u00e9, no \u003c escapes


def test_template_variables_reach_both_paths(tmp_path):
  src = tiny_hf_dir(tmp_path)
  (src / "tokenizer_config.json").write_text(json.dumps({
      "chat_template": "{{ greeting }}|{{ messages | length }}"}))
  tok = im.load_tokenizer(src)
  vocab = tiny_vocab()
  assert tok.apply_chat_template(CONVERSATIONS[1], greeting="hey") == "hey|3"
  assert fr.render_chat(src, vocab, CONVERSATIONS[1], greeting="hey") == "hey|3"


def test_a_source_without_a_template_renders_chatml(tmp_path):
  src = tiny_hf_dir(tmp_path)
  (src / "tokenizer_config.json").unlink()
  text = im.load_tokenizer(src).apply_chat_template(CONVERSATIONS[0])
  assert text == chat_template.ChatTemplate(chat_template.CHATML).render(CONVERSATIONS[0])
  assert text.endswith("<|im_start|>user\nHi é <b>&<|im_end|>\n<|im_start|>assistant\n")
  with pytest.raises(ValueError, match="no tokenizer_config.json"):
    fr.ChatTemplate.for_model(src)


def test_chat_template_jinja_beside_the_config_wins_on_both_paths(tmp_path):
  src = tiny_hf_dir(tmp_path)
  (src / "chat_template.jinja").write_text("jinja:{{ messages[0]['content'] }}")
  vocab = tiny_vocab()
  assert im.load_tokenizer(src).apply_chat_template(CONVERSATIONS[1]) == "jinja:Capital of France?"
  assert fr.render_chat(src, vocab, CONVERSATIONS[1]) == "jinja:Capital of France?"
