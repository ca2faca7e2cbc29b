"""The `infernix-jax generate` CLI: flag validation (one clear error line) and --json-out."""

from __future__ import annotations

import json

import pytest
from absl import flags

from infernix_jax.runtime import cli


def run_cli(args):
  flags.FLAGS.unparse_flags()
  argv = flags.FLAGS(["infernix-jax"] + list(args))
  return cli.main(argv)


@pytest.mark.parametrize("args,message", [
    (["generate", "--json-object", "--regex=a"], "mutually exclusive"),
    (["generate", "--choice=a", "--grammar-file=x.gbnf"], "mutually exclusive"),
    (["generate", "--top-p=0"], "--top-p=0.0 must be in (0, 1]"),
    (["generate", "--min-p=2"], "--min-p"),
    (["generate", "--k=-1"], "--k=-1 must be >= 0"),
    (["generate", "--thinking-budget=-2"], "--thinking-budget=-2 must be >= 0"),
    (["generate", "--max-tokens=0"], "--max-tokens"),
    (["generate", "--bridge=fast"], "--bridge"),
    (["generate", "--drafter=magic"], "--drafter='magic' must be one of none, ngram, jump"),
    (["generate", "--backend=magic"], "--backend='magic' must be auto or one of xgrammar, trie, "
                                      "llguidance"),
    (["generate", "--drafter=draft"], "--draft-model"),
    (["generate", "--choice=a", "--stop=b"], "--stop cannot be combined"),
    (["generate", "--unconstrained", "--json-object"], "--unconstrained conflicts"),
    (["generate", "--json-schema-file=/nonexistent/s.json"], "no such file"),
    (["frobnicate"], "expected the command 'generate'"),
])
def test_invalid_flags_give_one_error_line(args, message, capsys):
  assert run_cli(args) == 2
  err = capsys.readouterr().err.strip().splitlines()
  assert len(err) == 1 and err[0].startswith("error: ") and message in err[0], err


def tiny_tokenizer_json(path) -> None:
  """A byte-level BPE tokenizer.json: the 256 byte symbols plus <|endoftext|> (id 256, EOS)."""
  import tokenizers
  from tokenizers import decoders, models, pre_tokenizers

  from infernix_jax.constrain.vocab import _byte_level_decoder
  vocab = {ch: b for ch, b in _byte_level_decoder().items()}
  tok = tokenizers.Tokenizer(models.BPE(vocab=vocab, merges=[]))
  tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
  tok.decoder = decoders.ByteLevel()
  tok.add_special_tokens(["<|endoftext|>"])
  tok.save(str(path))


def test_choice_generation_writes_json(tmp_path, capsys):
  """A tiny random model on a byte-level vocabulary: the output is one of the choices."""
  from flax import nnx

  from infernix_jax import models as im
  tiny_tokenizer_json(tmp_path / "tokenizer.json")
  cfg = im.ModelConfig(vocab_size=264, dim=32, num_layers=1, num_heads=2, num_kv_heads=1,
                       head_dim=16, ffn_dim=64)
  ckpt = im.save_checkpoint(tmp_path / "tiny", cfg, im.Transformer(cfg, rngs=nnx.Rngs(0)),
                            vocab_source=tmp_path / "tokenizer.json")
  out = tmp_path / "out.json"
  rc = run_cli(["generate", f"--model={ckpt}", "--prompt=Pick one", "--choice=yes",
                "--choice=no way", "--k=2", "--temperature=0.7", "--seed=3", "--max-tokens=12",
                f"--json-out={out}", "--nowarmup", "--thinking-budget=2"])
  assert rc == 0, capsys.readouterr().err
  result = json.loads(out.read_text())
  assert result["text"] in ("yes", "no way")
  assert result["finish_reason"] == "stop"
  assert result["thinking_forced_close"] is False  # no thinking block in this vocabulary
  assert result["constraint"]["terminated"] and result["constraint"]["kind"] == "choice"
  assert result["drafter"] == "jump+ngram" and result["k"] == 2
  assert result["stats"]["rounds"] == len(result["stats"]["per_round"]) >= 1
  assert result["token_ids"] and "accepted length" in capsys.readouterr().out
