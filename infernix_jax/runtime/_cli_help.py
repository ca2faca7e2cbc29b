"""`infernix-jax generate --help`: the command's own flags, grouped, with defaults."""

from __future__ import annotations

import re
import textwrap

from absl import flags

USAGE = "usage: infernix-jax generate [--flags]"

# Every flag the CLI defines, under the heading it is listed in (tests check the cover).
GROUPS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("model", ("model", "dtype", "layout", "weights", "mesh", "chat", "system", "prompt")),
    ("constraint", ("json-schema-file", "json-schema", "json-object", "grammar-file", "regex",
                    "choice", "lenient", "backend", "device-automaton", "tools-file",
                    "tool-choice", "thinking-budget", "unconstrained", "stop")),
    ("drafting", ("drafter", "k", "ngram-n", "jump-forward", "masked-q", "draft-model",
                  "drafter-weights", "bridge")),
    ("sampling", ("temperature", "top-k", "top-p", "min-p", "seed", "presence-penalty",
                  "frequency-penalty", "max-tokens")),
    ("output", ("json-out", "stream", "warmup", "compile-cache")),
)

_WIDTH = 88
_INDENT = " " * 6


def _registered(name: str) -> list[str]:
  """Lines listing the registered values of --drafter or --backend ([] for other flags)."""
  if name == "drafter":
    from infernix_jax.runtime import drafters
    return [f"{n}: {drafters.entry(n).help}" for n in drafters.names()]
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


def format_help(flag_values: flags.FlagValues = flags.FLAGS) -> str:
  """The help text: usage, then each group's flags with their help and default."""
  intro = ("Constrained speculative generation. With no flags: the main job (a JSON "
           "Schema-constrained reply of the embedded SmolLM2 with n-gram + jump-forward "
           "drafting).")
  parts = [USAGE, "", textwrap.fill(intro, _WIDTH), ""]
  for heading, names in GROUPS:
    parts.append(f"{heading}:")
    parts += [_flag_text(flag_values[name]) for name in names]
    parts.append("")
  parts.append("absl's own flags (logging, ...): --helpfull")
  return "\n".join(parts)
