"""Picks a kernel or its jnp reference per device kind and size, from a measured table.

The table (`dispatch_table.json`, shipped with the package; `INFERNIX_JAX_DISPATCH_TABLE`
names another file) lists, per device kind (`jax.devices()[0].device_kind`: "cpu",
"NVIDIA H200", ...) and op, the sizes at which the kernel measured faster than its own
reference: inclusive ranges `[lo, hi]` (hi null: no bound) of the op's size (rows R of
`masked_sample`, lanes B of `spec_accept` / `tree_accept`). A device kind, op or size the
table does not list runs the reference. `write_table` writes a device kind's entry from
measurements (the GPU check calls it).

`spec_accept` and `tree_accept` have a second jnp path, `one_residual` (every position's
statistics in parallel, one residual draw per row; the same results token for token). It is
chosen like a kernel, from the entries `spec_accept_one_residual` / `tree_accept_one_residual`:
the sizes where it measured faster than the reference. Where the table lists both the kernel
and that path at a size, the kernel runs.

Overrides: per call `impl="kernel" | "reference" | "interpret" | "one_residual"` (or "auto":
the table; "one_residual" only for the two acceptance ops), or process-wide the environment
variable `INFERNIX_PALLAS_IMPL` (same values) for the Pallas ops. The CPU kernels of the
models (op "cpu_kernels", `models/cpu_kernels.py`) go through `choose` too, with their own
overrides (`INFERNIX_JAX_CPU_KERNELS=0`, `cpu_kernels.disabled()`).
"""

from __future__ import annotations

import dataclasses
import functools
import json
import math
import os
from pathlib import Path
from typing import Iterable, Mapping

import jax

from infernix_jax.pallas import masked_sample as _ms
from infernix_jax.pallas import spec_accept as _sa
from infernix_jax.pallas import tree_accept as _ta
from infernix_jax.pallas import tree_accept_parallel as _tp
from infernix_jax.pallas._types import PURPOSE_SAMPLE, SamplingParams

ENV_IMPL = "INFERNIX_PALLAS_IMPL"
ENV_TABLE = "INFERNIX_JAX_DISPATCH_TABLE"
TABLE_PATH = Path(__file__).with_name("dispatch_table.json")
OPS = ("masked_sample", "spec_accept", "tree_accept", "spec_accept_one_residual",
       "tree_accept_one_residual", "cpu_kernels")
_IMPLS = ("auto", "kernel", "reference", "interpret", "one_residual")
_ONE_RESIDUAL = ("spec_accept", "tree_accept")  # ops with the one-residual jnp path


@dataclasses.dataclass(frozen=True)
class Table:
  """Kernel sizes per device kind and op: {kind: {op: ((lo, hi | None), ...)}}."""
  kernel_sizes: Mapping[str, Mapping[str, tuple]]
  path: str = "<table>"

  def use_kernel(self, kind: str, op: str, size: int | None) -> bool:
    """Whether `op` at `size` runs its kernel on `kind`; size None: at every size (the
    table lists `[1, null]` or wider)."""
    ranges = self.kernel_sizes.get(kind, {}).get(op, ())
    if size is None:
      return any(lo <= 1 and hi is None for lo, hi in ranges)
    return any(lo <= size and (hi is None or size <= hi) for lo, hi in ranges)


def _fail(path, where: str, what: str):
  raise ValueError(f"dispatch table {path}: {where} {what} (see infernix_jax/pallas/"
                   f"dispatch.py for the format; write it with dispatch.write_table)")


def _parse(raw, path) -> Table:
  if not isinstance(raw, dict) or not isinstance(raw.get("devices"), dict):
    _fail(path, "the top level", 'must be an object with a "devices" object')
  sizes = {}
  for kind, entry in raw["devices"].items():
    where = f"devices[{kind!r}]"
    if not isinstance(entry, dict) or not isinstance(entry.get("ops"), dict):
      _fail(path, where, 'must be an object with an "ops" object')
    if not isinstance(entry.get("source"), str) or not entry["source"].strip():
      _fail(path, f"{where}.source", "must say where the measurement comes from (a string)")
    sizes[kind] = {}
    for op, spec in entry["ops"].items():
      if op not in OPS:
        _fail(path, f"{where}.ops", f"names an unknown op {op!r} (known: {', '.join(OPS)})")
      ranges = spec.get("kernel_sizes") if isinstance(spec, dict) else None
      if not isinstance(ranges, list):
        _fail(path, f"{where}.ops.{op}", 'must be an object with a "kernel_sizes" list')
      parsed = []
      for i, r in enumerate(ranges):
        ok = (isinstance(r, list) and len(r) == 2 and type(r[0]) is int and r[0] >= 1
              and (r[1] is None or (type(r[1]) is int and r[1] >= r[0])))
        if not ok:
          _fail(path, f"{where}.ops.{op}.kernel_sizes[{i}] = {r!r}",
                "must be [lo, hi]: integers with 1 <= lo <= hi, or hi null (no bound)")
        parsed.append((r[0], r[1]))
      sizes[kind][op] = tuple(parsed)
  return Table(sizes, str(path))


def load_table(path) -> Table:
  """The table of the JSON file at `path`; ValueError naming the file if it is malformed."""
  try:
    raw = json.loads(Path(path).read_text())
  except json.JSONDecodeError as err:
    raise ValueError(f"dispatch table {path}: not valid JSON ({err})") from err
  return _parse(raw, path)


@functools.cache
def _cached_table(path: str) -> Table:
  return load_table(path)


def default_table() -> Table:
  """The shipped table, or the file `INFERNIX_JAX_DISPATCH_TABLE` names (read once)."""
  return _cached_table(os.environ.get(ENV_TABLE) or str(TABLE_PATH))


def device_kind() -> str:
  return jax.devices()[0].device_kind


def choose(op: str, size: int | None = None, impl: str | None = None, *,
           table: Table | None = None, kind: str | None = None) -> str:
  """'kernel', 'reference', 'interpret' or 'one_residual' for `op` at `size` (None: every
  size).

  Args:
    op: one of OPS. size: the op's size (rows R or lanes B).
    impl: an override ("kernel", "reference", "interpret", "one_residual" for spec_accept and
      tree_accept); None or "auto": the table.
    table: the table (default: `default_table()`). kind: the device kind (default: this
      process's first device).
  """
  if op not in OPS:
    raise ValueError(f"{op=} must be one of {OPS}")
  impl = impl or "auto"
  if impl not in _IMPLS:
    raise ValueError(f"{impl=} must be one of {_IMPLS}")
  if impl == "one_residual" and op not in _ONE_RESIDUAL:
    raise ValueError(f"{impl=} is a path of {' and '.join(_ONE_RESIDUAL)} only, not of {op}")
  if impl != "auto":
    return impl
  table = table or default_table()
  kind = kind or device_kind()
  if table.use_kernel(kind, op, size):
    return "kernel"
  if op in _ONE_RESIDUAL and table.use_kernel(kind, f"{op}_one_residual", size):
    return "one_residual"
  return "reference"


def resolve_impl(impl: str | None = None, op: str | None = None,
                 size: int | None = None) -> str:
  """'kernel', 'reference', 'interpret' or 'one_residual' for a Pallas op at `size`: the
  `impl` argument, else `INFERNIX_PALLAS_IMPL`, else the table. Without `op`: the override,
  else "reference" (what every op runs where the table lists nothing). The environment's
  "one_residual" applies to the ops that have that path; the others follow the table."""
  from_env = not impl
  impl = impl or os.environ.get(ENV_IMPL, "auto")
  if impl not in _IMPLS:
    raise ValueError(f"{impl=} must be one of {_IMPLS} (argument or {ENV_IMPL})")
  if op is None:
    return "reference" if impl == "auto" else impl
  if from_env and impl == "one_residual" and op not in _ONE_RESIDUAL:
    impl = "auto"
  return choose(op, size, impl)


def _measurement(m) -> tuple:
  """(op, size, kernel_ms, reference_ms) of a tuple or a mapping with those keys."""
  op, size, kernel_ms, reference_ms = (
      (m["op"], m["size"], m["kernel_ms"], m["reference_ms"]) if isinstance(m, Mapping)
      else tuple(m))
  if op not in OPS:
    raise ValueError(f"measurement {m!r}: {op=} must be one of {OPS}")
  if type(size) is not int or size < 1 or not all(
      isinstance(t, (int, float)) and math.isfinite(t) and t > 0
      for t in (kernel_ms, reference_ms)):
    raise ValueError(f"measurement {m!r}: size must be an integer >= 1 and both times "
                     f"finite and positive (ms)")
  return op, size, float(kernel_ms), float(reference_ms)


def kernel_ranges(measurements: Iterable) -> dict[str, list]:
  """{op: [[lo, hi], ...]}: the sizes where the kernel beat its reference.

  A size counts when every measurement there (all configurations: greedy, top-k, early
  rejection, ...) has kernel_ms < reference_ms; a range joins consecutive measured sizes
  that count and never reaches past the last of them (no extrapolation).
  """
  won: dict[str, dict[int, bool]] = {}
  for op, size, kernel_ms, reference_ms in map(_measurement, measurements):
    at = won.setdefault(op, {})
    at[size] = at.get(size, True) and kernel_ms < reference_ms
  out = {}
  for op, at in won.items():
    ranges, run = [], None
    for size in sorted(at):
      if at[size]:
        run = [run[0], size] if run else [size, size]
      elif run:
        ranges.append(run)
        run = None
    out[op] = ranges + ([run] if run else [])
  return out


def write_table(path, kind: str, measurements: Iterable, source: str) -> dict:
  """Writes (or replaces) device kind `kind`'s entry of the table at `path` from
  measurements: rows (op, size, kernel_ms, reference_ms), tuples or mappings with those
  keys; `source` says where they come from (the run, the device, the date). The other
  device kinds' entries are kept. Returns the entry.
  """
  rows = [_measurement(m) for m in measurements]
  path = Path(path)
  raw = json.loads(path.read_text()) if path.exists() else {"devices": {}}
  _parse(raw, path)  # never rewrite a file this module could not read back
  ops = {op: {"kernel_sizes": ranges,
              "measured": [dict(size=s, kernel_ms=k, reference_ms=r)
                           for o, s, k, r in rows if o == op]}
         for op, ranges in kernel_ranges(rows).items()}
  entry = {"source": source, "ops": ops}
  raw["devices"][kind] = entry
  _parse(raw, path)
  path.write_text(json.dumps(raw, indent=1) + "\n")
  _cached_table.cache_clear()
  return entry


def masked_sample(logits, mask, mask_enabled, params: SamplingParams, seed, position,
                  purpose: int = PURPOSE_SAMPLE, *, vocab_size: int, impl: str | None = None):
  """Masked sampling of one token per row (see ``masked_sample_reference`` for arguments).

  Returns:
    (tokens i32[R], flags i32[R]); flagged rows (FLAG_EMPTY, FLAG_NONFINITE) have token -1.
  """
  impl = resolve_impl(impl, "masked_sample", logits.shape[0])
  if impl == "reference":
    return _ms.masked_sample_reference(logits, mask, mask_enabled, params, seed, position,
                                       purpose=purpose, vocab_size=vocab_size)
  # The kernel is the split over (rows, vocabulary chunks); rows with top-k / top-p / min-p
  # cuts take its two-pass cut (masked_sample_split), rows whose z / T overflows f32 the
  # reference's tokens.
  return _ms.masked_sample_split_kernel(logits, mask, mask_enabled, params, seed, position,
                                        purpose=purpose, vocab_size=vocab_size,
                                        interpret=impl == "interpret")


def spec_accept(logits, mask, mask_enabled, states, drafts, n_drafts, q, params, seed,
                position, *, vocab_size: int, purpose: int = PURPOSE_SAMPLE,
                impl: str | None = None) -> _sa.SpecResult:
  """Speculative acceptance under masks (see ``spec_accept_reference`` for the math).

  Returns:
    SpecResult(accepted i32[B], tokens i32[B, P], flags i32[B]).
  """
  impl = resolve_impl(impl, "spec_accept", logits.shape[0])
  if impl == "reference":
    return _sa.spec_accept_reference(logits, mask, mask_enabled, states, drafts, n_drafts, q,
                                     params, seed, position, vocab_size=vocab_size,
                                     purpose=purpose)
  if impl == "one_residual":
    return _sa.spec_accept_one_residual(logits, mask, mask_enabled, states, drafts, n_drafts,
                                        q, params, seed, position, vocab_size=vocab_size,
                                        purpose=purpose)
  return _sa.spec_accept_kernel(logits, mask, mask_enabled, states, drafts, n_drafts, q, params,
                                seed, position, vocab_size=vocab_size, purpose=purpose,
                                interpret=impl == "interpret")


def tree_accept(logits, mask, mask_enabled, states, tokens, parents, n_nodes, q, params, seed,
                position, *, vocab_size: int, purpose: int = PURPOSE_SAMPLE,
                impl: str | None = None) -> _ta.TreeResult:
  """Speculative acceptance over a token tree (see ``tree_accept_reference`` for the math).

  Returns:
    TreeResult(accepted i32[B], path i32[B, T], tokens i32[B, T], flags i32[B]).
  """
  impl = resolve_impl(impl, "tree_accept", logits.shape[0])
  if impl == "reference":
    return _ta.tree_accept_reference(logits, mask, mask_enabled, states, tokens, parents,
                                     n_nodes, q, params, seed, position, vocab_size=vocab_size,
                                     purpose=purpose)
  if impl == "one_residual":
    return _tp.tree_accept_one_residual(logits, mask, mask_enabled, states, tokens, parents,
                                        n_nodes, q, params, seed, position,
                                        vocab_size=vocab_size, purpose=purpose)
  return _ta.tree_accept_kernel(logits, mask, mask_enabled, states, tokens, parents, n_nodes, q,
                                params, seed, position, vocab_size=vocab_size, purpose=purpose,
                                interpret=impl == "interpret")
