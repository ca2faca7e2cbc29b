"""The high-level API: one object holds a loaded model and its engine; one call generates.

  import infernix_jax as ij
  out = ij.generate("Describe France as JSON", json_schema={"type": "object"})
  out.text, out.token_ids, out.stats["accepted_length"]

  llm = ij.LLM(drafter="ngram", k=4)            # the embedded SmolLM2-135M-Instruct
  llm.generate("Pick a colour", choice=["red", "green", "blue"]).text

Everything a request asks is checked before anything runs, and errors name the parameter
(`RequestError.param`); the CLI and the server build their requests through `LLM.prepare`.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import threading
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

from infernix_jax.errors import ParameterError

__all__ = ["Completion", "LLM", "PreparedRequest", "RequestError", "generate"]


RequestError = ParameterError  # `param` names the parameter at fault (e.g. "json_schema")


@dataclasses.dataclass
class Completion:
  """The result of one generation.

  Attributes:
    text: the whole output text (tool-call framing included).
    content: the content text (reasoning and tool calls removed); equals `text` without tools
      or thinking.
    reasoning: the reasoning text of a thinking model ("" otherwise).
    tool_calls: completed calls, `[{"name": ..., "arguments": JSON text}]`.
    token_ids: the output token ids (EOS excluded).
    finish_reason: "stop" | "length" | "stop_string" | "cancelled" | "error".
    error: the message of a failed request (None otherwise).
    prompt: the prompt text as fed to the model (chat template applied).
    prompt_tokens: its length in tokens.
    stats: rounds, drafted, accepted, accepted_length, acceptance_rate, tokens_per_second,
      wall_seconds, and the constraint's report under "constraint" (None when free).
    result: the engine's `runtime.GenerationResult`.
    trace: the generation trace (`prepare(..., trace=True)`; docs/CONTRACTS.md "Generation
      traces"), None otherwise; `infernix_jax.trace_page.write([trace], path)` draws it.
    logprobs: `prepare(..., logprobs=N)`: one `runtime.TokenLogprob(token_id, logprob, top)`
      per output token; None otherwise.
  """

  text: str
  content: str
  reasoning: str
  tool_calls: list[dict]
  token_ids: list[int]
  finish_reason: str
  error: str | None
  prompt: str
  prompt_tokens: int
  stats: dict
  result: Any = dataclasses.field(repr=False, default=None)
  trace: dict | None = dataclasses.field(repr=False, default=None)
  logprobs: list | None = dataclasses.field(repr=False, default=None)

  def json(self) -> Any:
    """The content parsed as JSON (raises json.JSONDecodeError when it is not JSON)."""
    return json.loads(self.content)


@dataclasses.dataclass
class PreparedRequest:
  """A validated request, ready for `Engine.submit`, and what decoding its output needs.

  Attributes:
    request: the engine's `runtime.GenerationRequest`.
    prompt: the prompt text fed to the model.
    framing: the tool/thinking framing (`constrain.framing.prepare_for_request`), or None.
  """

  request: Any
  prompt: str
  framing: Any = None

  def decoder(self):
    """A streaming decoder of the output, or None without framing (plain content).

    Feed it each `TokenEvent.token_ids`, then the EOS id when the request stopped on EOS;
    `feed` returns content, reasoning and tool-call events (`constrain.framing`)."""
    if self.framing is None:
      return None
    from infernix_jax.constrain import framing as fr
    return fr.new_output_decoder(self.framing)


class LLM:
  """A loaded target model with its tokenizer, constraint compiler, drafter and engine.

  Every keyword maps onto one field of `runtime.build.EngineSpec`, and the engine is
  assembled by `runtime.build.build_engine` (as the CLI, the server and the studies do);
  `LLM.from_spec(spec)` takes a spec as is.

  Args:
    model: None (the embedded SmolLM2-135M-Instruct), a .gguf file, an HF directory or an
      infernix checkpoint directory (`models.load_model`).
    drafter: drafter by registered name (`infernix_jax.drafters.names()`): "ngram"
      (default), "none", "mtp", "dflash", "dflash2", "draft", or a plug-in's.
    drafter_options: that drafter's own options (`infernix_jax.drafters.fields(name)`), e.g.
      {"n": 2} for "ngram", {"model": PATH} for "draft", {"weights": PATH} for "mtp".
    k: draft length K, shorthand for drafter_options["k"] (ignored by "none").
    jump_forward: grammar jump-forward drafts on constrained requests (default: on unless the
      drafter is "none").
    masked_q: sampling drafters' q is masked by the grammar.
    lanes: B, requests decoded together (continuous batching).
    capacity: S, KV positions per lane: prompt + max_tokens + K + 1 must fit.
    dtype, layout, weights: model storage (`models.load_model`); layout defaults to
      "unrolled" (the fastest decoding on one device).
    backend: constraint backend by registered name, or "auto".
    bridge: "stages" or "callback" (`runtime.Engine`).
    plugins: modules to import first (they register drafters or backends).
    warmup: compile the engine's steps now (else on the first requests).
    **spec: any other `EngineSpec` field (mesh, device_automaton, compile_cache, ...).

  Raises:
    RequestError: an invalid keyword (`.param` names it; drafter options as
      "drafter_options.<field>").
  """

  def __init__(self, model: str | Path | None = None, *, drafter: str = "ngram",
               drafter_options: Mapping[str, Any] | None = None, k: int | None = 4,
               jump_forward: bool | None = None, masked_q: bool = True, lanes: int = 1,
               capacity: int = 2048, dtype: str | None = None, layout: str = "unrolled",
               weights: str | None = None, backend: str = "auto", bridge: str = "stages",
               plugins: Sequence[str] = (), warmup: bool = False, **spec):
    from infernix_jax.runtime import build, drafters
    build.load_plugins(tuple(plugins))
    options = dict(drafter_options or {})
    if k is not None and "k" not in options and drafters.entry(drafter).drafts:
      options["k"] = k
    try:
      engine_spec = build.EngineSpec(
          model=None if model is None else str(model), drafter=drafter,
          drafter_options=options, jump_forward=jump_forward, masked_q=masked_q, lanes=lanes,
          capacity=capacity, dtype=dtype, layout=layout, weights=weights, backend=backend,
          bridge=bridge, plugins=tuple(plugins), **spec)
    except TypeError as e:
      raise RequestError("spec", f"{e}; EngineSpec fields: "
                         f"{', '.join(f.name for f in dataclasses.fields(build.EngineSpec))}"
                         ) from None
    self._init(engine_spec, warmup=warmup)

  @classmethod
  def from_spec(cls, spec, *, target=None, warmup: bool = False) -> "LLM":
    """An LLM over `build_engine(spec, target=target)` (a `runtime.build.Target` for a model
    already in memory)."""
    llm = cls.__new__(cls)
    llm._init(spec, target=target, warmup=warmup)
    return llm

  def _init(self, spec, *, target=None, warmup: bool) -> None:
    from infernix_jax.runtime import build
    self.spec = spec
    self.assembly = build.build_engine(spec, target=target)
    self.engine = self.assembly.engine
    self.drafter = self.assembly.drafter
    self.cfg, self.vocab = self.assembly.cfg, self.assembly.vocab
    self.tokenizer, self.compiler = self.assembly.tokenizer, self.assembly.compiler
    self.source = self.assembly.target.source
    self.drafter_name = spec.drafter  # the registered name (the drafter's own name may add parts)
    self.model_path = spec.model if spec.model is not None else str(self.source)
    self.backend = spec.backend
    self._lock = threading.Lock()  # `generate` from several threads runs one at a time
    if warmup:
      self.warmup()

  @property
  def model_name(self) -> str:
    """A short name of the model (the file or directory name)."""
    return Path(self.model_path).name

  def warmup(self, prompt_lengths=()) -> None:
    """Compiles the engine's round steps, the prefills of prompts of `prompt_lengths` tokens
    (`Engine.warmup`) and the prefill/constrained paths of short requests."""
    from infernix_jax import constrain as ic
    from infernix_jax.runtime.types import GenerationRequest
    with self._lock:
      self.engine.warmup(prompt_lengths=prompt_lengths)
      ids = self.tokenizer.encode("Hello")
      self.engine.generate([GenerationRequest(ids, max_tokens=2),
                            GenerationRequest(ids, max_tokens=2,
                                              constraint=ic.OutputConstraint.json_object())])

  # --- requests ------------------------------------------------------------------------------
  def render(self, prompt: str | Sequence[Mapping[str, Any]], *, system: str | None = None,
             tools: Any = None, tool_choice: Any = None,
             chat_template_kwargs: Mapping[str, Any] | None = None) -> str:
    """The chat prompt text of a user message (or a list of messages) with the model's template.

    Tools are rendered by the template when it has tool syntax, else as Hermes-style
    instructions in the system turn (`constrain.framing.render_chat`);
    `chat_template_kwargs` are further template variables (e.g. `enable_thinking`).
    """
    extra = dict(chat_template_kwargs or {})
    from infernix_jax.chat_template import chat_messages
    from infernix_jax.constrain import framing as fr
    if isinstance(prompt, str):
      messages = chat_messages(prompt, system)
    else:
      messages = [dict(m) for m in prompt]
      if system:
        messages.insert(0, {"role": "system", "content": system})
    if tools is None:
      return self.tokenizer.apply_chat_template(messages, add_generation_prompt=True, **extra)
    return fr.render_chat(self.source, self.vocab, messages, tools=tools,
                          tool_choice=tool_choice, **extra)

  def prepare(self, prompt: str | Sequence[Mapping[str, Any]] | Sequence[int], *,
              chat: bool | None = None, system: str | None = None,
              json_schema: Any = None, json_object: bool = False, regex: str | None = None,
              choice: Sequence[str] | None = None, grammar: str | None = None,
              lenient: bool = False, constraint: Any = None, tools: Any = None,
              tool_choice: Any = None, max_tokens: int = 256, temperature: float = 0.0,
              top_p: float = 1.0, top_k: int = 0, min_p: float = 0.0, seed: int = 0,
              presence_penalty: float = 0.0, frequency_penalty: float = 0.0,
              repetition_penalty: float = 1.0, min_tokens: int = 0, ignore_eos: bool = False,
              logprobs: int | None = None,
              stop: Sequence[str] | str | None = None, thinking_budget: int | None = None,
              on_token: Callable | None = None, request_id: str = "",
              max_drafts: int | None = None, draft_history: str | None = "auto",
              sampling_law: str = "local", law_tolerance: float = 0.0,
              trace: bool = False,
              chat_template_kwargs: Mapping[str, Any] | None = None) -> PreparedRequest:
    """Validates a request and compiles its constraint (the compile cache keeps it).

    Args:
      prompt: a user message (str, rendered with the chat template unless chat=False), a list
        of chat messages ({"role", "content"}), or token ids (used as given).
      chat: render a str prompt as a chat turn (default True).
      system: a system message (chat only).
      json_schema / json_object / regex / choice / grammar / constraint: the output constraint
        (at most one): a JSON Schema (dict or text), any JSON object, a regex over the whole
        output, a list of strings, GBNF text, or an `OutputConstraint`.
      lenient: json_schema only: drop unsupported assertion keywords instead of rejecting.
      tools, tool_choice: OpenAI-style function definitions and "auto" | "none" | "required"
        | a tool name; calls are framed and constrained (chat prompts only).
      max_tokens, temperature, top_p, top_k, min_p, seed, presence_penalty,
      frequency_penalty: sampling (`runtime.SamplingOptions`; temperature 0 = greedy).
      repetition_penalty: vLLM's (each token of the prompt or the output so far: a positive
        logit divided by it, a negative one multiplied; 1 = off, > 0).
      min_tokens: EOS is illegal until the output has this many tokens (a constraint that
        allows only EOS earlier ends the output there: `result.min_tokens_unmet`).
      ignore_eos: EOS does not end the output (kept as a token; decoding runs to
        max_tokens); not with a constraint or tools.
      logprobs: None, or N in 0..20: `Completion.logprobs` gives each output token's
        log-probability under the distribution it was sampled from and its N most probable
        alternatives (`runtime.TokenLogprob`; docs/CONTRACTS.md "runtime/").
      stop: extra stop strings (unconstrained output only).
      thinking_budget: reasoning tokens allowed (thinking models).
      on_token: a `runtime.TokenEvent` callback (streaming).
      request_id: the engine's id for the request (default: a fresh one).
      max_drafts: the most drafts a round may take for this request (None: the drafter's K;
        0: ordinary decoding; a tree drafter's depth).
      draft_history: the shared output history a history drafter (`suffix`) reads and adds
        to: "auto" (by the constraint or the tools), a name, or None (kept out).
      sampling_law: "local" (the target renormalized over the legal tokens at each position)
        or "exact-finite" (μ*(y) ∝ p_T(y)·[y valid] over the constraint's whole outputs, for
        a finite constraint, where p_T(y) is the product of the per-token tempered
        distributions softmax(logits / T): the model's p(y) at T = 1, not p(y)^(1/T)
        renormalized at T != 1; max_tokens must cover the longest output of the law; greedy = the most probable output summed over its tokenizations;
        `infernix_jax.faithful`), or "onestep" (each token weighted by the legal mass one
        step after it, an estimate of exact-finite for any constraint, unbounded ones
        included, at extra target forwards per decoded position).
      law_tolerance: exact-finite sampling only: 0 computes the law over every output;
        a tolerance in (0, 1) stops once the outputs left out weigh at most that total
        variation (certified: stats['constraint']['law_tv_bound']); far cheaper on large sets.
      trace: record a per-token trace of the generation (`Completion.trace`): drafts, their
        verification, legal sets and each token's origin; costs a little decoding speed.
      chat_template_kwargs: extra chat template variables (e.g. {"enable_thinking": False}).

    Raises:
      RequestError: an invalid parameter (its name in `.param`, the location inside it in the
        message).
    """
    from infernix_jax.constrain import framing as fr
    from infernix_jax.constrain.errors import ConstraintError
    from infernix_jax.constrain.options import constraint_from_options
    from infernix_jax.runtime.types import GenerationRequest, SamplingOptions

    content = constraint_from_options(json_schema=json_schema, json_object=json_object,
                                      regex=regex, choice=choice, grammar=grammar,
                                      lenient=lenient, constraint=constraint)
    if isinstance(stop, str):
      stop = [stop]
    chat = True if chat is None else chat
    if isinstance(prompt, str):
      if not prompt and not chat:
        raise RequestError("prompt", "is empty")
      text = (self._render(prompt, system=system, tools=tools, tool_choice=tool_choice,
                           chat_template_kwargs=chat_template_kwargs) if chat else prompt)
      ids = self.tokenizer.encode(text)
    elif prompt and all(isinstance(t, Mapping) for t in prompt):
      text = self._render(prompt, system=system, tools=tools, tool_choice=tool_choice,
                          chat_template_kwargs=chat_template_kwargs)
      ids = self.tokenizer.encode(text)
    elif prompt and all(isinstance(t, int) and not isinstance(t, bool) for t in prompt):
      ids = [int(t) for t in prompt]
      text = None
    else:
      raise RequestError("prompt", "expected a string, a non-empty list of chat messages or "
                         "a non-empty list of token ids")
    if tools is not None and not chat:
      raise RequestError("tools", "tool calls need a chat prompt (chat=True)")
    backend = None if self.backend == "auto" else self.backend
    sampling = SamplingOptions(temperature=temperature, top_k=top_k, top_p=top_p, min_p=min_p,
                               seed=seed, presence_penalty=presence_penalty,
                               frequency_penalty=frequency_penalty,
                               repetition_penalty=repetition_penalty)
    request = GenerationRequest(prompt_ids=ids, max_tokens=max_tokens, sampling=sampling,
                                constraint=content, tools=tools,
                                tool_choice=tool_choice if tools is not None else None,
                                stop=tuple(stop or ()), on_token=on_token,
                                thinking_budget=thinking_budget, backend=backend,
                                request_id=request_id, max_drafts=max_drafts,
                                draft_history=draft_history,
                                sampling_law=sampling_law, law_tolerance=law_tolerance,
                                trace=trace, min_tokens=min_tokens, ignore_eos=ignore_eos,
                                logprobs=logprobs)
    request.validate()
    self._check_fits(request)
    if text is None:
      text = self.tokenizer.decode(ids)
    framing = self._compile(request, content, ids)
    return PreparedRequest(request=request, prompt=text, framing=framing)

  def _check_fits(self, request) -> None:
    """`Engine.check_fits`, its message without the engine's internal request id (a caller
    of `prepare` knows its request by its own position or id)."""
    from infernix_jax.runtime.errors import CapacityError
    try:
      self.engine.check_fits(request)
    except CapacityError as e:
      raise CapacityError(e.param, e.message.removeprefix(f"request {request.request_id}: ")
                          ) from None

  def _compile(self, request, content, ids):
    """Compiles the request's constraint and framing (the compile cache keeps them); errors
    name the parameter whose part failed: tools, tool_choice, or the constraint option."""
    from infernix_jax.constrain import framing as fr
    from infernix_jax.constrain.errors import ConstraintError
    from infernix_jax.constrain.options import option_of
    tools, tool_choice = request.tools, request.tool_choice
    if tools is not None:
      try:
        names = {t.name for t in fr.parse_tools(tools)}
      except ConstraintError as e:
        raise RequestError("tools", str(e)) from None
      try:
        policy = (tool_choice if isinstance(tool_choice, fr.ToolChoice)
                  else fr.ToolChoice.parse(tool_choice))
      except (ConstraintError, ValueError) as e:
        raise RequestError("tool_choice", str(e)) from None
      unknown = sorted(set(policy.allowed_names or ()) - names)
      if unknown:
        raise RequestError("tool_choice", f"names {', '.join(map(repr, unknown))}, which the "
                           f"tools do not declare ({', '.join(sorted(names))})")
    if content is not None:
      try:
        self.compiler.compile(content, backend=request.backend)
      except ConstraintError as e:
        raise RequestError(option_of(content), str(e)) from None
    try:
      return fr.prepare_for_request(self.vocab, ids, tools=tools, tool_choice=tool_choice,
                                    constraint=content, compiler=self.compiler)
    except ConstraintError as e:
      raise RequestError("tools" if tools is not None else option_of(content), str(e)) from None

  def _render(self, prompt, *, system, tools, tool_choice, chat_template_kwargs=None) -> str:
    try:
      return self.render(prompt, system=system, tools=tools, tool_choice=tool_choice,
                         chat_template_kwargs=chat_template_kwargs)
    except (TypeError, KeyError) as e:
      raise RequestError("messages", f"cannot be rendered by the chat template: {e}") from None

  def complete(self, prepared: PreparedRequest, result) -> Completion:
    """The Completion of a finished request (tool calls and reasoning decoded)."""
    from infernix_jax.constrain import framing as fr
    from infernix_jax.runtime.types import FinishReason
    content, reasoning, calls = result.text, "", []
    if prepared.framing is not None and result.finish_reason != FinishReason.ERROR:
      decoded = fr.decode_output(prepared.framing, result.token_ids,
                                 terminated=result.finish_reason == FinishReason.STOP)
      content, reasoning = decoded.content, decoded.reasoning
      calls = [{"name": c.name, "arguments": c.arguments_json} for c in decoded.tool_calls]
    stats = result.to_dict()["stats"]
    stats.pop("per_round")
    stats["constraint"] = result.constraint.to_dict() if result.constraint else None
    if result.trace is not None:
      result.trace["meta"].setdefault("model", self.model_name)
    return Completion(text=result.text, content=content, reasoning=reasoning,
                      tool_calls=calls, token_ids=list(result.token_ids),
                      finish_reason=result.finish_reason.value, error=result.error,
                      prompt=prepared.prompt, prompt_tokens=len(prepared.request.prompt_ids),
                      stats=stats, result=result, trace=result.trace,
                      logprobs=result.logprobs)

  def generate(self, prompt, **options) -> Completion:
    """Generates one output; keyword options as `prepare`. Returns a `Completion`."""
    return self.generate_batch([dict(options, prompt=prompt)])[0]

  def generate_batch(self, requests: Sequence[Mapping[str, Any]]) -> list[Completion]:
    """Generates several outputs together (continuous batching over the engine's lanes).

    Args:
      requests: one dict of `prepare` keyword arguments per request (with "prompt").

    Raises:
      RequestError: any request is invalid (none runs; the message gives its index).
    """
    prepared = []
    for i, options in enumerate(requests):
      options = dict(options)
      if "prompt" not in options:
        raise RequestError("prompt", f"request {i} has no prompt")
      try:
        prepared.append(self.prepare(options.pop("prompt"), **options))
      except RequestError as e:
        if len(requests) == 1:
          raise
        raise type(e)(e.param, f"request {i}: {e.message}") from None  # same class
      except TypeError as e:
        raise RequestError("options", f"request {i}: {e}") from None
    with self._lock:
      results = self.engine.generate([p.request for p in prepared])
    return [self.complete(p, r) for p, r in zip(prepared, results)]


@functools.lru_cache(maxsize=2)
def _cached_llm(model, drafter, k, lanes, capacity) -> LLM:
  return LLM(model, drafter=drafter, k=k, lanes=lanes, capacity=capacity)


def generate(prompt, *, model: str | None = None, drafter: str = "ngram", k: int = 4,
             **options) -> Completion:
  """Generates one output with a cached `LLM` (loaded on the first call for each model).

  Args:
    prompt: a user message, a list of chat messages, or token ids (`LLM.prepare`).
    model: None (the embedded SmolLM2-135M-Instruct), a .gguf file or an HF directory.
    drafter, k: the drafter by registered name and its draft length.
    **options: `LLM.prepare` keyword arguments (json_schema=..., temperature=..., ...).

  Returns:
    A `Completion`: text, token_ids, tool_calls, finish_reason and stats.
  """
  llm = _cached_llm(None if model is None else str(model), drafter, k, 1, 2048)
  return llm.generate(prompt, **options)
