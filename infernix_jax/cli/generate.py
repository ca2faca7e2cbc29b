"""`infernix-jax generate`: constrained speculative generation from the command line.

With no flags it runs the main job: a JSON Schema-constrained reply of the embedded
SmolLM2-135M-Instruct with n-gram drafting plus grammar jump-forward, printing the output
and the acceptance statistics.
"""

from __future__ import annotations

import contextlib
import json
import sys
import time
from pathlib import Path

from absl import flags

from infernix_jax.errors import ParameterError

FLAGS = flags.FLAGS

DEMO_PROMPT = ("Describe France as a JSON object with its name, capital city, population in "
               "millions, and up to three official languages.")
DEMO_SCHEMA = json.dumps({
    "type": "object",
    "properties": {
        "name": {"type": "string"},
        "capital": {"type": "string"},
        "population_millions": {"type": "number"},
        "languages": {"type": "array", "items": {"type": "string"}, "maxItems": 3},
    },
    "required": ["name", "capital", "population_millions", "languages"],
    "additionalProperties": False,
})

flags.DEFINE_string("prompt", None, "Prompt text (default: the main job's built-in prompt "
                    "and JSON Schema).")
flags.DEFINE_boolean("chat", True, "Render the prompt as a user turn with the model's chat "
                     "template (--nochat: raw text continuation).")
flags.DEFINE_string("system", None, "Optional system message (with --chat).")
flags.DEFINE_string("model", None, "A local HF directory or GGUF file (default: the embedded "
                    "SmolLM2-135M-Instruct).")
flags.DEFINE_string("drafter", "ngram", "Drafter by registered name (--help lists them).")
flags.DEFINE_integer("k", 4, "Draft length K (drafts per round; the drafter option k).")
flags.DEFINE_multi_string("drafter-opt", None, "One option of the drafter, key=value (repeat "
                          "the flag; --help lists each drafter's options), e.g. n=2 for "
                          "ngram, model=PATH for draft, weights=PATH|random for mtp.")
flags.DEFINE_multi_string("plugin", None, "A module to import first (repeat the flag); it "
                          "registers drafters or constraint backends through "
                          "infernix_jax.drafters.register / infernix_jax.backends.register.")
flags.DEFINE_boolean("jump-forward", None, "Add grammar jump-forward drafts (default: on when "
                     "a constraint is given and the drafter is not 'none').")
flags.DEFINE_boolean("masked-q", True, "Mask sampling drafters' q with the grammar (ablation).")
flags.DEFINE_float("temperature", 0.0, "Sampling temperature (0 = greedy).")
flags.DEFINE_integer("top-k", 0, "Top-k over legal tokens (0 = off).")
flags.DEFINE_float("top-p", 1.0, "Top-p (1 = off).")
flags.DEFINE_float("min-p", 0.0, "Min-p (0 = off).")
flags.DEFINE_integer("seed", 0, "Sampling seed.")
flags.DEFINE_float("presence-penalty", 0.0, "Subtracted once from each token already output.")
flags.DEFINE_float("frequency-penalty", 0.0, "Subtracted per occurrence in the output.")
flags.DEFINE_float("repetition-penalty", 1.0, "vLLM's repetition penalty: each token of the "
                   "prompt or the output so far has a positive logit divided by it and a "
                   "negative one multiplied (1 = off; > 0).")
flags.DEFINE_integer("max-tokens", 160, "Maximum generated tokens.")
flags.DEFINE_integer("min-tokens", 0, "EOS is illegal until the output has this many tokens "
                     "(where a constraint allows only EOS earlier, it ends there and the "
                     "result says min_tokens_unmet).")
flags.DEFINE_boolean("ignore-eos", False, "EOS does not end the output: it is kept as a token "
                     "and decoding runs to --max-tokens (not with a constraint or tools).")
flags.DEFINE_integer("logprobs", None, "Record each output token's log-probability under the "
                     "distribution it was sampled from, with this many alternatives (0..20), "
                     "into --json-out's \"logprobs\" (needs --bridge=stages).")
flags.DEFINE_enum("sampling-law", "local", ["local", "exact-finite", "onestep"],
                  "local: the target renormalized over the legal tokens at each position; "
                  "exact-finite: the product of per-token tempered distributions restricted to the "
                  "constraint's whole outputs and renormalized (a finite "
                  "constraint: choice, enum-only JSON Schema, bounded grammar; greedy = the most "
                  "probable output summed over its tokenizations); onestep: each token weighted "
                  "by the legal mass one step after it (an estimate of exact-finite for any "
                  "constraint, unbounded ones included; extra target forwards per round).")
flags.DEFINE_float("law-tolerance", 0.0, "exact-finite sampling: 0 computes the law over "
                  "every output of the constraint; a tolerance in (0, 1) expands them most "
                  "probable first and stops once those left out weigh at most that total "
                  "variation (certified; far cheaper on large label sets).")
flags.DEFINE_integer("thinking-budget", None, "Reasoning tokens allowed before the engine "
                     "closes the thinking block itself (Qwen thinking prompts; default: none).")
flags.DEFINE_string("json-schema-file", None, "Constrain the output to this JSON Schema.")
flags.DEFINE_string("json-schema", None, "Constrain the output to this JSON Schema, given "
                    "inline (JSON text).")
flags.DEFINE_boolean("lenient", False, "JSON Schema: drop unsupported assertion keywords "
                     "(listed on stderr with their JSON Pointers) instead of rejecting the "
                     "schema; the output is not guaranteed to satisfy them. With serve: the "
                     "default of requests that do not set structured_outputs.lenient (dropped "
                     "keywords reported in usage; otherwise such schemas get a 400).")
flags.DEFINE_boolean("json-object", False, "Constrain the output to a JSON object.")
flags.DEFINE_string("grammar-file", None, "Constrain the output to this GBNF grammar (root).")
flags.DEFINE_string("regex", None, "Constrain the output to match this regex (whole output).")
flags.DEFINE_multi_string("choice", None, "Constrain the output to one of these strings "
                          "(repeat the flag).")
flags.DEFINE_string("tools-file", None, "OpenAI-style function definitions (JSON list) the "
                    "model may call; calls are framed and constrained.")
flags.DEFINE_string("tool-choice", "auto", "With --tools-file: auto | none | required | NAME.")
flags.DEFINE_boolean("unconstrained", False, "Run the built-in prompt without a constraint.")
flags.DEFINE_multi_string("stop", None, "Extra stop strings (unconstrained output only).")
flags.DEFINE_string("bridge", "stages", "Host bridge: stages | callback.")
flags.DEFINE_boolean("device-automaton", False, "Choice constraints compiled by the trie "
                     "backend take their masks from a device-resident automaton inside the "
                     "round (no host lookahead); same tokens.")
flags.DEFINE_string("backend", "auto", "Constraint backend by registered name (--help lists "
                    "them); auto: choice sets above the trie threshold -> trie, else xgrammar.")
flags.DEFINE_string("dtype", None, "Model dtype: float32 (default) | bfloat16.")
flags.DEFINE_string("layout", None, "Layer weight layout: unrolled (per-layer fused weights: "
                    "fastest decoding on one device, longer first compile; default without "
                    "--mesh) | stacked (one scanned array per parameter: quick compiles; "
                    "default and required with --mesh).")
flags.DEFINE_string("weights", None, "Storage of the layer matrices with --layout=unrolled: "
                    "float32 | bfloat16 | int8 (weight-only, per-column scales); default: the "
                    "model dtype.")
flags.DEFINE_string("mesh", None, "Shard the model over a device mesh, e.g. tp=2,dp=2: tp "
                    "devices split heads, MLP and vocabulary (tensor parallel), dp split the "
                    "lanes (data parallel; the CLI decodes one lane, so dp > 1 only "
                    "replicates); dp * tp must divide the device count (default: one device).")
flags.DEFINE_string("json-out", None, "Write the full result as JSON to this file.")
flags.DEFINE_string("trace", None, "Record the generation's per-token trace (drafts, "
                    "verification, legal sets, each token's origin) and write it as JSON to "
                    "this file; draw it with `infernix-jax trace view FILE` (costs a little "
                    "speed; the stages bridge only).")
flags.DEFINE_boolean("stream", True, "Print tokens as they are committed.")
flags.DEFINE_boolean("warmup", True, "Compile the stages with 2-token runs first (free and "
                     "constrained), so tokens/s measures decoding, not compilation.")
flags.DEFINE_string("compile-cache", None, "Directory of JAX's persistent compilation cache "
                    "(default: $INFERNIX_JAX_COMPILE_CACHE or ~/.cache/infernix_jax/xla; "
                    "'' disables it).")


class UsageError(ValueError):
  """Conflicting or invalid command-line flags."""


# Parameters (of EngineSpec, GenerationRequest, SamplingOptions, the constraint options)
# whose flag is not `--` + the name with dashes.
_FLAG_OF = {
    "json_schema": "--json-schema", "grammar": "--grammar-file", "tools": "--tools-file",
    "tool_choice": "--tool-choice", "plugins": "--plugin", "prompt": "--prompt",
    "drafter_options": "--drafter-opt",
}


def flag_of(param: str) -> str:
  """The command-line flag of a library parameter name (`ParameterError.param`)."""
  if param.startswith("drafter_options."):
    key = param.split(".", 1)[1]
    given = [p.partition("=")[0].strip() for p in FLAGS["drafter-opt"].value or ()]
    return "--k" if key == "k" and "k" not in given else f"--drafter-opt {key}=..."
  if param == "json_schema" and FLAGS["json-schema-file"].value:
    return f"--json-schema-file={FLAGS['json-schema-file'].value}"
  return _FLAG_OF.get(param, "--" + param.replace("_", "-"))


def usage_error(e: ParameterError) -> UsageError:
  """A library ParameterError under the flag that set the parameter."""
  return UsageError(f"{flag_of(e.param)}: {e.message}")


def drafter_options() -> dict:
  """--drafter-opt key=value pairs, with --k as the option k of a drafting drafter.

  Raises:
    UsageError: a pair is not key=value, or a key is repeated.
  """
  from infernix_jax.runtime import drafters
  f = FLAGS
  options: dict = {}
  for pair in f["drafter-opt"].value or ():
    key, eq, value = pair.partition("=")
    if not eq or not key.strip():
      raise UsageError(f"--drafter-opt={pair!r} must be key=value (e.g. n=2)")
    if key.strip() in options:
      raise UsageError(f"--drafter-opt {key.strip()} is given twice")
    options[key.strip()] = value
  try:
    drafts = drafters.entry(f.drafter).drafts
  except ParameterError as e:
    raise usage_error(e) from None
  if drafts and "k" not in options:
    options["k"] = f.k
  return options


def engine_spec(*, lanes: int = 1, capacity: int = 2048, jump_forward: bool | None = None):
  """The EngineSpec of the model, drafting and engine flags (validated, nothing loaded).

  Raises:
    UsageError: the flag at fault and why.
  """
  from infernix_jax.runtime.build import EngineSpec, load_plugins
  f = FLAGS
  try:
    load_plugins(tuple(f.plugin or ()))
    spec = EngineSpec(model=f.model, dtype=f.dtype, layout=f.layout, weights=f.weights,
                      drafter=f.drafter, drafter_options=drafter_options(),
                      jump_forward=jump_forward, masked_q=f["masked-q"].value, lanes=lanes,
                      capacity=capacity, bridge=f.bridge, backend=f.backend, mesh=f.mesh,
                      device_automaton=f["device-automaton"].value,
                      compile_cache=f["compile-cache"].value, plugins=tuple(f.plugin or ()))
    return spec.validate()
  except ParameterError as e:
    raise usage_error(e) from None


def _constraint_flags_given() -> bool:
  f = FLAGS
  return bool(f["json-schema-file"].value or f["json-schema"].value is not None
              or f["json-object"].value or f["grammar-file"].value or f.regex is not None
              or f.choice)


def _validate() -> None:
  """What only the command line can get wrong (the rest is the spec's and the request's)."""
  f = FLAGS
  if f.unconstrained and _constraint_flags_given():
    raise UsageError("--unconstrained conflicts with the constraint flags; drop one")
  from infernix_jax.runtime.types import check_bridge
  try:
    check_bridge(f.bridge, logprobs=f.logprobs, trace=f.trace is not None)
  except ParameterError as e:
    raise usage_error(e) from None
  for name in ("tools-file", "json-schema-file", "grammar-file"):
    path = f[name].value
    if path is not None and not Path(path).is_file():
      raise UsageError(f"--{name}={path}: no such file")


def _demo() -> bool:
  """No prompt, constraint or --unconstrained: the main job's prompt and schema."""
  f = FLAGS
  return f.prompt is None and not _constraint_flags_given() and not f.unconstrained


def _jump_forward() -> bool | None:
  """--jump-forward, or its default: off without a constraint (jump-forward drafts only apply
  to constrained output), else the spec's own default (on for a drafter that drafts).

  No drafter is looked up here: `engine_spec` does that after it loads the plug-ins.
  """
  f = FLAGS
  jump = f["jump-forward"].value
  constrained = _constraint_flags_given() or _demo() or bool(f["tools-file"].value)
  if jump is None and not constrained:
    return False
  return jump


@contextlib.contextmanager
def _phase(what: str):
  """One progress line on stderr: `what ...` now, the seconds it took when done."""
  sys.stderr.write(f"{what} ...")
  sys.stderr.flush()
  t0 = time.perf_counter()
  try:
    yield
  except BaseException:
    sys.stderr.write(" failed\n")
    raise
  sys.stderr.write(f" {time.perf_counter() - t0:.1f} s\n")
  sys.stderr.flush()


def _constraint_option() -> str:
  """The constraint flag as the user gave it, for error messages."""
  f = FLAGS
  for name in ("json-schema-file", "grammar-file", "regex"):
    if f[name].value is not None:
      return f"--{name}={f[name].value}"
  if f["json-schema"].value is not None:
    return "--json-schema"
  for name in ("json-object", "choice"):
    if f[name].value:
      return f"--{name}"
  return "the built-in JSON Schema"


def _read(flag: str) -> str | None:
  path = FLAGS[flag].value
  return None if path is None else Path(path).read_text(encoding="utf-8")


def _request(prompt_ids, constraint, tools, *, on_token=None):
  """The GenerationRequest of the flags, validated (errors under their flags)."""
  from infernix_jax.runtime.types import GenerationRequest
  f = FLAGS
  request = GenerationRequest(prompt_ids=prompt_ids, max_tokens=f["max-tokens"].value,
                              sampling=_sampling(), constraint=constraint, tools=tools,
                              tool_choice=f["tool-choice"].value if tools else None,
                              stop=tuple(f.stop or ()), on_token=on_token,
                              thinking_budget=f["thinking-budget"].value,
                              backend=None if f.backend == "auto" else f.backend,
                              sampling_law=f["sampling-law"].value,
                              law_tolerance=f["law-tolerance"].value,
                              trace=f.trace is not None, min_tokens=f["min-tokens"].value,
                              ignore_eos=f["ignore-eos"].value, logprobs=f.logprobs)
  try:
    request.validate()
  except ParameterError as e:
    raise usage_error(e) from None
  return request


def _prepare():
  """Checks everything that does not need the model's weights.

  Returns:
    (EngineSpec, constraint or None, vocabulary source, Vocabulary, ConstraintCompiler,
    tools or None).

  Raises:
    UsageError: a flag, a file or the constraint is invalid (the message names the flag, the
      file and the location inside it).
  """
  from infernix_jax import constrain as ic
  from infernix_jax.constrain.options import constraint_from_options
  from infernix_jax.runtime import build

  from infernix_jax.constrain.options import check_exclusive
  f = FLAGS
  if f["json-schema-file"].value and f["json-schema"].value is not None:
    raise UsageError("--json-schema-file and --json-schema are mutually exclusive (two "
                     "spellings of the json_schema option); give one")
  try:
    check_exclusive(json_schema=bool(f["json-schema-file"].value or f["json-schema"].value),
                    json_object=f["json-object"].value, grammar=bool(f["grammar-file"].value),
                    regex=f.regex is not None, choice=bool(f.choice), lenient=f.lenient)
  except ParameterError as e:
    raise usage_error(e) from None
  _validate()
  spec = engine_spec(jump_forward=_jump_forward())
  schema = DEMO_SCHEMA if _demo() else (
      f["json-schema"].value if f["json-schema"].value is not None else _read("json-schema-file"))
  try:
    constraint = constraint_from_options(json_schema=schema, json_object=f["json-object"].value,
                                         grammar=_read("grammar-file"), regex=f.regex,
                                         choice=f.choice or None, lenient=f.lenient)
  except ParameterError as e:
    raise usage_error(e) from None
  tools = _tools()
  _request([0], constraint, tools)  # every request rule, before anything loads
  try:
    source = build.model_source(spec)
  except ParameterError as e:
    raise usage_error(e) from None
  if tools is not None and f.chat:
    _chat_template(source)
  dropped = ()
  with _phase("compiling constraint" if constraint is not None else "loading vocabulary"):
    vocab = build.vocabulary(source)
    compiler = ic.ConstraintCompiler(vocab)
    if constraint is not None:
      try:
        compiled = compiler.compile(constraint,
                                    backend=None if f.backend == "auto" else f.backend)
      except ic.ConstraintError as e:
        raise UsageError(f"{_constraint_option()}: {e}") from None
      dropped = compiled.dropped
  for pointer, keyword in dropped:
    print(f"--lenient: dropped {keyword!r} (at {pointer or '/'}); the output need not satisfy "
          f"it", file=sys.stderr)
  return spec, constraint, source, vocab, compiler, tools


def _sampling():
  from infernix_jax.runtime.types import SamplingOptions
  f = FLAGS
  return SamplingOptions(temperature=f.temperature, top_k=f["top-k"].value,
                         top_p=f["top-p"].value, min_p=f["min-p"].value, seed=f.seed,
                         presence_penalty=f["presence-penalty"].value,
                         frequency_penalty=f["frequency-penalty"].value,
                         repetition_penalty=f["repetition-penalty"].value)


def generate() -> dict:
  """Runs one generation from the flags; returns the result dict (also printed)."""
  import dataclasses

  from infernix_jax.chat_template import chat_messages, frame_prompt
  from infernix_jax.runtime import build
  from infernix_jax.runtime.types import GenerationRequest

  f = FLAGS
  spec, constraint, source, vocab, compiler, tools = _prepare()
  demo = _demo()
  t0 = time.perf_counter()
  with _phase("loading model"):
    target = build.load_target(spec, vocab=vocab)
  tok = target.tokenizer
  prompt = f.prompt if f.prompt is not None else DEMO_PROMPT
  if f.chat:
    prompt = (_render_with_tools(source, vocab, chat_messages(prompt, f.system), tools)
              if tools is not None else frame_prompt(tok, prompt, system=f.system))
  ids = tok.encode(prompt)
  capacity = -(-(len(ids) + f["max-tokens"].value + spec.k + 1) // 64) * 64
  with _phase("building the engine"):
    built = build.build_engine(dataclasses.replace(spec, capacity=capacity), target=target,
                               compiler=compiler)
  engine, drafter = built.engine, built.drafter
  load_s = time.perf_counter() - t0

  def stream(event):
    if f.stream and event.text:
      sys.stdout.write(event.text)
      sys.stdout.flush()

  if f.warmup:
    with _phase("warming up"):
      engine.warmup(prompt_lengths=[len(ids)])
      engine.generate([GenerationRequest(prompt_ids=ids, max_tokens=2)])
      if constraint is not None:  # the constrained round compiles Finish with a mask
        engine.generate([GenerationRequest(prompt_ids=ids, max_tokens=2, constraint=constraint,
                                           backend=None if f.backend == "auto" else f.backend,
                                           trace=f.trace is not None)])
  request = _request(ids, constraint, tools, on_token=stream)
  try:
    engine.check_fits(request)
  except ParameterError as e:
    raise usage_error(e) from None
  result = engine.generate([request])[0]
  if f.stream:
    sys.stdout.write("\n")
  else:
    print(result.text)
  out = result.to_dict()
  out["drafter"] = drafter.name
  out["k"] = drafter.k
  out["bridge"] = f.bridge
  out["backend"] = f.backend
  out["load_seconds"] = load_s
  out["request"] = _request_record(prompt, ids, constraint, request.sampling, drafter, source,
                                   spec)
  if tools is not None:
    out["tool_calls"] = _tool_calls(vocab, ids, tools, constraint, result)
  _print_stats(result, drafter, out)
  if demo:
    _check_demo(result, out)
  if f["json-out"].value:
    with open(f["json-out"].value, "w", encoding="utf-8") as fh:
      json.dump(out, fh, indent=1)
  if f.trace is not None and result.trace is not None:
    result.trace["meta"]["model"] = Path(str(source)).name
    Path(f.trace).parent.mkdir(parents=True, exist_ok=True)
    with open(f.trace, "w", encoding="utf-8") as fh:
      json.dump(result.trace, fh, ensure_ascii=False, allow_nan=False)
    print(f"--- trace written to {f.trace} (draw it: infernix-jax trace view {f.trace})")
  return out


_PACKAGES = ("infernix_jax", "jax", "jaxlib", "flax", "xgrammar", "llguidance")


def _request_record(prompt, ids, constraint, sampling, drafter, source, spec) -> dict:
  """What was asked, for --json-out: enough to rerun it and to know with which packages."""
  import dataclasses
  from importlib import metadata

  f = FLAGS
  versions = {}
  for name in _PACKAGES:
    try:
      versions[name] = metadata.version(name)
    except metadata.PackageNotFoundError:
      versions[name] = None
  if constraint is None:
    constraint_record = None
  else:
    constraint_record = {
        "kind": constraint.kind.value, "option": _constraint_option(),
        "source": (list(constraint.source) if isinstance(constraint.source, tuple)
                   else constraint.source),
        "lenient": constraint.lenient, "backend": f.backend}
  return {
      "prompt": {"user": f.prompt if f.prompt is not None else DEMO_PROMPT,
                 "system": f.system, "chat": f.chat, "text": prompt,
                 "token_ids": [int(i) for i in ids]},
      "constraint": constraint_record,
      "tools_file": f["tools-file"].value,
      "tool_choice": f["tool-choice"].value if f["tools-file"].value else None,
      "thinking_budget": f["thinking-budget"].value,
      "stop": list(f.stop or ()),
      "sampling": dataclasses.asdict(sampling),
      "max_tokens": f["max-tokens"].value,
      "drafter": {"flag": f.drafter, "name": drafter.name, "k": drafter.k,
                  "options": {k: v if isinstance(v, (int, float, bool, str, type(None)))
                              else repr(v) for k, v in spec.drafter_options.items()},
                  "jump_forward": bool(spec.jump_forward), "masked_q": spec.masked_q,
                  "plugins": list(spec.plugins)},
      "bridge": f.bridge,
      "device_automaton": f["device-automaton"].value,
      "model": str(f.model) if f.model is not None else None,
      "model_path": str(source),
      "dtype": f.dtype,
      "layout": spec.resolved_layout,
      "weights": f.weights,
      "mesh": f.mesh,
      "seed": f.seed,
      "versions": versions,
  }


def _tools():
  """The --tools-file definitions (ToolDefinitions) or None.

  Raises:
    UsageError: the file is missing or its definitions are malformed (with the location).
  """
  path = FLAGS["tools-file"].value
  if path is None:
    return None
  from infernix_jax.constrain import framing
  from infernix_jax.constrain.errors import ConstraintError
  p = Path(path)
  if not p.is_file():
    raise UsageError(f"--tools-file={path}: no such file")
  try:
    return framing.parse_tools(p.read_text(encoding="utf-8"))
  except ConstraintError as e:
    raise UsageError(f"--tools-file={path}: {e}") from None


def _chat_template(source):
  """The model's chat template, which --tools-file needs (checked before the model loads).

  Raises:
    UsageError: the model has none (the message names where it was looked for).
  """
  from infernix_jax.constrain import framing
  try:
    return framing.ChatTemplate.for_model(source)
  except ValueError as e:
    raise UsageError(f"--tools-file needs the model's chat template: {e}") from None


def _render_with_tools(source, vocab, messages, tools) -> str:
  """The prompt with the tool declarations (`framing.render_chat`: the model's own template
  on a Qwen-family vocabulary, else Hermes instructions in the system turn)."""
  from infernix_jax.constrain import framing
  try:
    return framing.render_chat(source, vocab, messages, tools=tools,
                               tool_choice=FLAGS["tool-choice"].value)
  except ValueError as e:
    raise UsageError(f"--tools-file: {e}") from None


def _tool_calls(vocab, prompt_ids, tools, constraint, result) -> list[dict]:
  """The completed calls, read by the same decoder the session used: [{name, arguments_json}]."""
  from infernix_jax.constrain import framing
  from infernix_jax.runtime.types import FinishReason
  prepared = framing.prepare_for_request(vocab, prompt_ids, tools=tools,
                                         tool_choice=FLAGS["tool-choice"].value,
                                         constraint=constraint)
  decoded = framing.decode_output(prepared, result.token_ids,
                                  terminated=result.finish_reason == FinishReason.STOP)
  return [{"name": c.name, "arguments_json": c.arguments_json} for c in decoded.tool_calls]


def _print_stats(result, drafter, out) -> None:
  s = out["stats"]
  print(f"--- finish={result.finish_reason.value} tokens={len(result.token_ids)} "
        f"rounds={s['rounds']} drafter={drafter.name} K={drafter.k}")
  print(f"--- accepted length={s['accepted_length']:.2f} tokens/round, acceptance="
        f"{s['acceptance_rate']:.2f} ({s['accepted']}/{s['drafted']} drafts), "
        f"{s['tokens_per_second']:.1f} tokens/s")
  if result.constraint is not None:
    c = result.constraint
    print(f"--- constraint={c.kind} complete={c.complete} terminated={c.terminated} "
          f"cache={c.cache} jump-forward drafts={c.jump_forward_tokens} mask positions="
          f"{c.mask_positions} host s: compile={c.compile_seconds:.3f} lookahead="
          f"{c.lookahead_seconds:.3f} accept={c.accept_seconds:.3f}")
  if result.error:
    print(f"--- error ({result.error_kind}): {result.error}")


def _check_demo(result, out) -> None:
  try:
    value = json.loads(result.text)
  except json.JSONDecodeError as e:
    print(f"--- output is not complete JSON ({e.msg}); finish={result.finish_reason.value}")
    return
  try:
    import jsonschema  # optional (test extra)
  except ImportError:
    print("--- output parses as JSON")
    return
  jsonschema.validate(value, json.loads(DEMO_SCHEMA))
  out["schema_valid"] = True
  print("--- output validates against the JSON Schema (jsonschema)")
