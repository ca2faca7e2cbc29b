"""`infernix-jax generate --help`: the command's own flags, grouped, with defaults."""

from __future__ import annotations

import re
import textwrap

from absl import flags

USAGE = "usage: infernix-jax generate|serve [--flags]"

# Every flag the CLI defines, under the heading it is listed in (tests check the cover).
GROUPS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("model", ("model", "dtype", "layout", "weights", "mesh", "chat", "system", "prompt")),
    ("constraint", ("json-schema-file", "json-schema", "json-object", "grammar-file", "regex",
                    "choice", "lenient", "backend", "device-automaton", "tools-file",
                    "tool-choice", "thinking-budget", "unconstrained", "stop")),
    ("drafting", ("drafter", "k", "drafter-opt", "plugin", "jump-forward", "masked-q",
                  "bridge")),
    ("sampling", ("temperature", "top-k", "top-p", "min-p", "seed", "presence-penalty",
                  "frequency-penalty", "repetition-penalty", "max-tokens", "min-tokens",
                  "ignore-eos", "logprobs", "sampling-law", "law-tolerance")),
    ("output", ("json-out", "trace", "stream", "warmup", "compile-cache")),
)

# `trace view FILE [FILE2]`: the page's flags.
TRACE_GROUPS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("page", ("out", "title")),
)

# `serve`: the server's own flags, then the model and drafting flags it shares with generate.
SERVE_GROUPS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("server", ("host", "port", "lanes", "capacity", "served-model-name", "api-key",
                "max-body-bytes", "max-queued", "request-timeout", "drain-seconds")),
    ("requests", ("strict", "lenient", "max-tool-calls")),
    ("model", ("model", "dtype", "layout", "weights")),
    ("drafting", ("drafter", "k", "drafter-opt", "plugin", "jump-forward", "masked-q",
                  "bridge", "backend")),
    ("output", ("compile-cache",)),
)

INTROS = {
    "generate": ("Constrained speculative generation. With no flags: the main job (a JSON "
                 "Schema-constrained reply of the embedded SmolLM2 with n-gram + jump-forward "
                 "drafting)."),
    "serve": ("An OpenAI-compatible HTTP server (/v1/chat/completions, /v1/completions, "
              "/v1/responses, /v1/models, /health, /metrics) on one engine shared by every "
              "connection; output "
              "constraints, tools, sampling and speculative options are per request."),
    "trace": ("Draws generation traces (generate --trace FILE) as one self-contained HTML "
              "page: each token coloured by origin, a hover panel with the round's drafts, "
              "the target's top-k and the legal-set size, and a strip chart; two files are "
              "drawn side by side."),
}

_WIDTH = 88
_INDENT = " " * 6


def _registered(name: str) -> list[str]:
  """Lines listing the registered values of --drafter or --backend ([] for other flags)."""
  if name == "drafter":
    from infernix_jax.runtime import drafters
    lines = []
    for n in drafters.names():
      opts = ", ".join(f"{key}={value!r}" for key, value in drafters.fields(n).items())
      lines.append(f"{n}: {drafters.entry(n).help} (options: {opts or 'none'})")
    return lines
  if name == "backend":
    from infernix_jax.constrain import backends
    return ["auto"] + list(backends.names())
  return []


def _flag_text(flag: flags.Flag) -> str:
  boolean = isinstance(flag, flags.BooleanFlag)
  head = f"  --[no]{flag.name}" if boolean else f"  --{flag.name}"
  default = flag.default
  if isinstance(default, list):
    default = ",".join(default) or None
  text = re.sub(r";\s+repeat this option to specify a list of values$", " (repeatable)",
                flag.help)
  body = textwrap.fill(f"{text} (default: {default!r})", _WIDTH,
                       initial_indent=_INDENT, subsequent_indent=_INDENT)
  lines = [head, body]
  values = _registered(flag.name)
  if values:
    lines.append(f"{_INDENT}registered:")
    lines += [textwrap.fill(v, _WIDTH, initial_indent=_INDENT + "  ",
                            subsequent_indent=_INDENT + "    ") for v in values]
  return "\n".join(lines)


def format_help(flag_values: flags.FlagValues = flags.FLAGS, command: str = "generate") -> str:
  """The help text of a command: usage, then each group's flags with their help and default."""
  groups = {"serve": SERVE_GROUPS, "trace": TRACE_GROUPS}.get(command, GROUPS)
  usage = "trace view FILE [FILE2]" if command == "trace" else command
  parts = [USAGE.replace("generate|serve", usage), "", textwrap.fill(INTROS[command], _WIDTH),
           ""]
  for heading, names in groups:
    parts.append(f"{heading}:")
    parts += [_flag_text(flag_values[name]) for name in names]
    parts.append("")
  other = "serve" if command == "generate" else "generate"
  parts.append(f"The other command: infernix-jax {other} --help. absl's own flags (logging, "
               f"...): --helpfull")
  return "\n".join(parts)
