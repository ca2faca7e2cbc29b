"""Reference 002 scenarios at the session level: framed grammar state under speculation.

Rounds are simulated without the engine: a drafter proposes K ids, `lookahead` gives the
per-position masks, a deterministic target (a legal walk whose choice depends only on the
prefix) verifies greedily (accept while draft == target, then the correction or bonus),
`preview` + `commit` advance the session. In each scenario the committed tokens and decoded
output equal ordinary one-token-per-round decoding, and no uncommitted token leaves a trace.
"""

from __future__ import annotations

import numpy as np
import pytest

from infernix_jax import mask_layout
from infernix_jax.constrain import framing as fr
from infernix_jax.constrain.framing.tools import tools_from_bfcl
from infernix_jax.testing.framed_walk import LegalWalker
from tests.constrain.conftest import QWEN3_DIR, qwen3_vocab  # noqa: F401  (fixture)

THINK_CLOSE, TOOL_OPEN = 151668, 151657
READY, DEAD_END, UNREACHABLE = mask_layout.READY, mask_layout.DEAD_END, mask_layout.UNREACHABLE
TOOLS = [{"name": "get_weather", "parameters": {
    "type": "object", "properties": {"city": {"type": "string"}, "days": {"type": "integer"}},
    "required": ["city"]}}]


@pytest.fixture(scope="module")
def prepared(qwen3_vocab):  # noqa: F811
  return fr.prepare_output(qwen3_vocab, fr.OutputPhase.THINKING,
                           tools=tools_from_bfcl(TOOLS), choice=fr.ToolChoice.auto())


@pytest.fixture(scope="module")
def tok():
  tokenizers = pytest.importorskip("tokenizers")
  t = tokenizers.Tokenizer.from_file(str(QWEN3_DIR / "tokenizer.json"))
  return lambda s: t.encode(s, add_special_tokens=False).ids


class Target:
  """Greedy stand-in for the target model: a legal walk keyed by the prefix only."""

  def __init__(self, vocab, seed, patience=40):
    self.vocab = vocab
    self.walker = LegalWalker(vocab, seed, patience=patience, tool_bias=0.2)

  def __call__(self, words, prefix):
    hints = ({"late_controls": (THINK_CLOSE,)} if THINK_CLOSE not in prefix
             else {"tool_open": TOOL_OPEN})
    tail = self.vocab.decode(prefix[-8:])[-16:]
    return self.walker.choose(words, len(prefix), tail, **hints)


def decode(prepared, target, drafter, k, *, budget=None, max_tokens=160, check_trace=False):
  """Runs rounds until EOS; returns (committed ids, session, round log)."""
  vocab = prepared.vocab
  s = prepared.new_session()
  out: list[int] = []
  buf = np.zeros((k + 1, vocab.mask_words), np.int32)
  rounds = []
  while not s.terminated and len(out) < max_tokens:
    room = k
    if budget is not None and s.in_reasoning:
      room = min(room, budget - len(out) - 1)  # the round never passes the budget
    drafts = [int(d) for d in drafter(out, s)][:max(room, 0)]
    if check_trace:
      before = np.zeros_like(buf[:1])
      s.lookahead([], out=before)
    states = s.lookahead(drafts, out=buf[:len(drafts) + 1])
    produced = []
    for i in range(len(drafts) + 1):
      assert states[i] == READY, "verification reached a non-Ready position"
      t = target(buf[i], out + produced)
      produced.append(t)
      if i == len(drafts) or t != drafts[i] or t in vocab.eos_ids:
        break
    if check_trace:  # lookahead left no trace
      again = np.zeros_like(buf[:1])
      s.lookahead([], out=again)
      assert np.array_equal(again, before)
    r = s.preview(produced)
    assert r.accepted == len(produced)
    s.commit()
    out += produced
    rounds.append((drafts, produced))
    if budget is not None and s.in_reasoning and len(out) >= budget:
      toks = s.forced_close_tokens()
      s.preview_forced_close()
      s.commit()
      out += toks
  return out, s, rounds


def no_drafts(out, s):
  return []


def ngram(n=2):
  def propose(out, s):
    if len(out) < n:
      return []
    key = out[-n:]
    for j in range(len(out) - n - 1, -1, -1):
      if out[j:j + n] == key:
        return out[j + n:j + n + 8]
    return []
  return propose


def oracle(reference, corrupt_every=0, vocab=None, seed=0):
  """Drafts the reference future (what ordinary decoding produced), optionally corrupted."""
  rng = np.random.default_rng(seed)

  def propose(out, s):
    d = list(reference[len(out):len(out) + 8])
    if corrupt_every:
      for i in range(len(d)):
        if rng.integers(corrupt_every) == 0:
          d[i] = int(rng.integers(vocab.size))
    return d
  return propose


def jump_forward(out, s):
  return s.forced_tokens(8)


def random_drafts(vocab, seed=1):
  rng = np.random.default_rng(seed)
  return lambda out, s: rng.integers(0, vocab.size, size=6).tolist()


@pytest.fixture(scope="module")
def reference(prepared, qwen3_vocab):  # noqa: F811
  out, s, _ = decode(prepared, Target(qwen3_vocab, 3), no_drafts, 0)
  assert s.terminated and THINK_CLOSE in out
  return out, s.result()


def test_drafters_reach_ordinary_decoding(prepared, reference, qwen3_vocab):  # noqa: F811
  ref, ref_result = reference
  drafters = {"oracle": oracle(ref), "oracle_corrupt": oracle(ref, 3, qwen3_vocab),
              "ngram": ngram(), "jump_forward": jump_forward,
              "random": random_drafts(qwen3_vocab)}
  crossed = False
  for name, drafter in drafters.items():
    out, s, rounds = decode(prepared, Target(qwen3_vocab, 3), drafter, 8,
                            check_trace=name == "oracle_corrupt")
    assert out == ref, name
    assert s.result() == ref_result, name
    for drafts, produced in rounds:  # a window whose accepted part crosses </think>
      if THINK_CLOSE in produced[:-1] and produced.index(THINK_CLOSE) < len(produced) - 2:
        crossed = True
  assert crossed


def test_close_then_invalid_token_resumes_from_valid_state(prepared, qwen3_vocab, tok):  # noqa: F811
  s = prepared.new_session()
  s.accept(tok("thinking"))
  drafts = [THINK_CLOSE] + tok("Hello")
  buf = np.zeros((len(drafts) + 1, qwen3_vocab.mask_words), np.int32)
  states = s.lookahead(drafts, out=buf)
  assert list(states) == [READY, READY] + [UNREACHABLE] * (len(drafts) - 1)
  allowed1 = mask_layout.unpack(buf[1:2], qwen3_vocab.size)[0]
  assert not allowed1[drafts[1]] and allowed1[qwen3_vocab.token_id("\n\n")]
  assert not buf[2:].any()
  # Verification accepts the tag and corrects the invalid token with a legal one.
  correction = qwen3_vocab.token_id("\n\n")
  assert s.accept([THINK_CLOSE, correction]).accepted == 2
  natural = prepared.new_session()
  natural.accept(tok("thinking") + [THINK_CLOSE, correction])
  a = np.zeros((1, qwen3_vocab.mask_words), np.int32)
  b = np.zeros_like(a)
  s.lookahead([], out=a)
  natural.lookahead([], out=b)
  assert np.array_equal(a, b) and s.result() == natural.result()


def test_eos_drafted_mid_window(prepared, qwen3_vocab, tok):  # noqa: F811
  eos = qwen3_vocab.eos_ids[0]
  # Inside reasoning EOS is illegal: the window stops at it, the position stays Ready.
  s = prepared.new_session()
  drafts = tok("a b") + [eos] + tok("c")
  buf = np.zeros((len(drafts) + 1, qwen3_vocab.mask_words), np.int32)
  states = s.lookahead(drafts, out=buf)
  k = drafts.index(eos)
  assert all(states[:k + 1] == READY) and all(states[k + 1:] == UNREACHABLE)
  assert not mask_layout.unpack(buf[k:k + 1], qwen3_vocab.size)[0][eos]
  # In content EOS is legal: accepted temporarily, later positions Unreachable, no trace.
  s.accept(tok("x") + [THINK_CLOSE] + tok("\n\nDone"))
  before = np.zeros((1, qwen3_vocab.mask_words), np.int32)
  s.lookahead([], out=before)
  drafts = tok(".") + [eos] + tok("more")
  buf = np.zeros((len(drafts) + 1, qwen3_vocab.mask_words), np.int32)
  states = s.lookahead(drafts, out=buf)
  assert list(states) == [READY, READY] + [UNREACHABLE] * (len(drafts) - 1)
  assert not s.terminated
  after = np.zeros_like(before)
  s.lookahead([], out=after)
  assert np.array_equal(before, after)
  r = s.preview(drafts)  # the produced tokens can never run past EOS
  assert r.accepted == 2 and r.terminated
  s.discard()
  assert not s.terminated and s.result().content == "Done"


def test_ngram_drafts_inside_reasoning(prepared, qwen3_vocab, tok):  # noqa: F811
  """A repetitive reasoning prefix makes the n-gram drafter propose long accepted runs."""
  loop = tok(" step, step, step, step, step, step, step, step, step")
  s = prepared.new_session()
  out = []
  buf = np.zeros((9, qwen3_vocab.mask_words), np.int32)
  accepted_total = 0
  drafter = ngram(1)
  while len(out) < len(loop):
    drafts = drafter(out, s)[:8]
    states = s.lookahead(drafts, out=buf[:len(drafts) + 1])
    produced = []
    for i in range(len(drafts) + 1):  # target: the repetitive text
      assert states[i] == READY
      t = loop[len(out) + len(produced)]
      assert mask_layout.unpack(buf[i:i + 1], qwen3_vocab.size)[0][t]
      produced.append(t)
      if i == len(drafts) or t != drafts[i] or len(out) + len(produced) == len(loop):
        break
    accepted_total += len(produced) - 1
    assert s.accept(produced).accepted == len(produced)
    out += produced
  assert out == loop and accepted_total >= len(loop) // 2
  assert s.in_reasoning and s.result().reasoning == "".join(
      qwen3_vocab.decode(loop).decode()).rstrip("\n")


def test_forced_close_mid_round(prepared, qwen3_vocab):  # noqa: F811
  target = Target(qwen3_vocab, 5, patience=400)  # never closes by itself before the budget
  ref, s_ref, _ = decode(prepared, target, no_drafts, 0, budget=11)
  for drafter in (ngram(), jump_forward, random_drafts(qwen3_vocab, 2)):
    out, s, _ = decode(prepared, target, drafter, 8, budget=11)
    assert out == ref
    assert s.result() == s_ref.result()
  close = fr.QwenFraming.from_vocab(qwen3_vocab).forced_close_tokens()
  assert ref[11:14] == close  # injected exactly at the budget, after a complete round


# --- engine level: tiny random Qwen3 weights, the real Qwen3 vocabulary ----------------------

ENUM_TOOL = {"name": "set_mode", "strict": True, "parameters": {
    "type": "object", "additionalProperties": False, "required": ["mode", "on"],
    "properties": {"mode": {"enum": ["eco", "turbo", "quiet"]}, "on": {"type": "boolean"},
                   "level": {"enum": [1, 2, 3]}}}}


@pytest.fixture(scope="module")
def tiny_qwen3_dir(tmp_path_factory):
  """A tiny random Qwen3 checkpoint in Hugging Face layout (config.json, model.safetensors)
  with the real Qwen3 tokenizer files."""
  import json
  import shutil

  from safetensors.numpy import save_file
  d, f, n, kv, h, v = 32, 64, 2, 1, 16, 151936
  config = {"architectures": ["Qwen3ForCausalLM"], "model_type": "qwen3", "hidden_size": d,
            "intermediate_size": f, "num_hidden_layers": 1, "num_attention_heads": n,
            "num_key_value_heads": kv, "head_dim": h, "vocab_size": v, "rms_norm_eps": 1e-6,
            "rope_theta": 1000000.0, "tie_word_embeddings": True, "torch_dtype": "float32",
            "max_position_embeddings": 2048, "attention_bias": False}
  rng = np.random.default_rng(0)
  w = lambda *shape: (rng.standard_normal(shape) * 0.02).astype(np.float32)
  one = lambda k: np.ones(k, np.float32)
  p = "model.layers.0."
  tensors = {"model.embed_tokens.weight": w(v, d), "model.norm.weight": one(d),
             p + "input_layernorm.weight": one(d), p + "post_attention_layernorm.weight": one(d),
             p + "self_attn.q_proj.weight": w(n * h, d), p + "self_attn.k_proj.weight": w(kv * h, d),
             p + "self_attn.v_proj.weight": w(kv * h, d), p + "self_attn.o_proj.weight": w(d, n * h),
             p + "self_attn.q_norm.weight": one(h), p + "self_attn.k_norm.weight": one(h),
             p + "mlp.gate_proj.weight": w(f, d), p + "mlp.up_proj.weight": w(f, d),
             p + "mlp.down_proj.weight": w(d, f)}
  path = tmp_path_factory.mktemp("tiny_qwen3")
  (path / "config.json").write_text(json.dumps(config))
  save_file(tensors, str(path / "model.safetensors"))
  for name in ("tokenizer.json", "tokenizer_config.json"):
    shutil.copy(QWEN3_DIR / name, path / name)
  return path


@pytest.mark.slow
def test_cli_tool_calls_from_hf_dir(tiny_qwen3_dir, qwen3_vocab, tmp_path, capsys):  # noqa: F811
  """`--model` takes the HF directory; `--tools-file` / `--tool-choice` frame the output (the
  model's own chat template renders the tools) and `--json-out` lists the call. Whatever the
  weights, the strict call validates under n-gram + jump-forward drafting, and ordinary
  decoding in the engine commits the same greedy tokens and decodes the same call."""
  jsonschema = pytest.importorskip("jsonschema")
  import json

  from absl import flags

  from infernix_jax.cli import main as cli_main
  tools_file = tmp_path / "tools.json"
  tools_file.write_text(json.dumps([{"type": "function", "function": ENUM_TOOL}]))
  out_file = tmp_path / "out.json"
  flags.FLAGS.unparse_flags()
  argv = flags.FLAGS(["infernix-jax", "generate", f"--model={tiny_qwen3_dir}",
                      "--prompt=turbo please", f"--tools-file={tools_file}",
                      "--tool-choice=set_mode", "--drafter=ngram", "--k=4", "--max-tokens=96",
                      f"--json-out={out_file}", "--nowarmup", "--nostream"])
  assert cli_main.main(argv) == 0, capsys.readouterr().err
  result = json.loads(out_file.read_text())
  assert result["finish_reason"] == "stop" and result["constraint"]["kind"] == "tools"
  assert result["constraint"]["terminated"] and result["constraint"]["branch"] == "tools"
  assert result["stats"]["accepted"] > 0 and result["drafter"] == "jump+ngram"
  (call,) = result["tool_calls"]
  assert call["name"] == "set_mode"
  jsonschema.validate(json.loads(call["arguments_json"]), ENUM_TOOL["parameters"])
  tools = fr.parse_tools([ENUM_TOOL])
  text = fr.ChatTemplate.from_dir(tiny_qwen3_dir).render(
      [{"role": "user", "content": "turbo please"}], tools=tools)
  assert "set_mode" in text and text.endswith("<|im_start|>assistant\n")
  # Ordinary decoding in the engine commits the same greedy tokens as the drafted CLI run.
  from infernix_jax import models as im
  from infernix_jax.runtime import drafters as rd
  from infernix_jax.runtime.engine import Engine
  from infernix_jax.runtime.types import GenerationRequest, SamplingOptions
  cfg, model, source = im.load_hf_dir(tiny_qwen3_dir)
  prompt = im.load_tokenizer(source).encode(text)
  eng = Engine(model, qwen3_vocab, rd.NoDrafter(), lanes=1, capacity=384, cfg=cfg)
  res = eng.generate([GenerationRequest(prompt, max_tokens=96, tools=tools,
                                        tool_choice="set_mode",
                                        sampling=SamplingOptions(temperature=0.0))])[0]
  assert res.error is None and res.token_ids == result["token_ids"]
  prepared = fr.prepare_for_request(qwen3_vocab, prompt, tools=tools, tool_choice="set_mode")
  out = fr.decode_output(prepared, res.token_ids, terminated=res.constraint.terminated)
  assert [c.arguments_json for c in out.tool_calls] == [call["arguments_json"]]
