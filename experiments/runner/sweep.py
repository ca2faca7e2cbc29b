"""Cells of a study: the config's `grid` (or union of sub-grids) expanded into runs, each with
a stable id.

A config may hold a `grid` ConfigDict that mirrors the config's own fields with a tuple of
values at each leaf:

  c.grid.drafter.name = ("ngram", "mtp")
  c.grid.constrained = (True, False)

The cells are the cartesian product over the axes in the grid's key order (ml_collections
iterates keys sorted by name), the first axis outermost; a study may run them grouped by
what they share (`group`). A config without a grid is one cell. `with_axes` adds or replaces
axes from the command line (`--grid temperature=0.0,0.7`).

A table whose axes depend on each other (jump-forward only under a constraint, trees only for
drafters that grow them, an ablation on a few rows) is a union of sub-grids instead: `grids`
holds named grids, each a product as above, expanded in name order.

  c.grids.constrained.constrained = (True,)
  c.grids.constrained.drafter.jump_forward = (True,)
  c.grids.free.constrained = (False,)

Every cell of a union names every field that any sub-grid varies (a field its own sub-grid
does not vary holds the config's value), so a cell that two sub-grids spell alike has one id
and runs once: the first in sweep order keeps its place, and `Cell.blocks` names every
sub-grid that holds it. Axes of a `grid` beside `grids` (and `--grid` axes) are crossed with
every sub-grid, replacing a sub-grid's own axis over the same field.

Shards (`shard`) deal the cells round-robin by sweep index: every shard of n holds
len(cells) // n or one more cells, the same ones on every call.
"""

from __future__ import annotations

import ast
import dataclasses
import itertools
from collections.abc import Sequence
from typing import Any

import ml_collections

GRID = "grid"
GRIDS = "grids"  # named sub-grids whose union is the sweep


@dataclasses.dataclass(frozen=True)
class Cell:
  """One run of a study.

  Attributes:
    index: position in the full (unsharded) sweep.
    id: "field=value,field=value" over the grid axes ("base" without a grid): the key that
      resume and the reports use.
    overrides: dotted field -> value.
    config: the study config with the overrides applied (its `grid` and `grids` removed),
      locked.
    blocks: the sub-grids (`grids` entries) that spell this cell, in name order (empty for
      a single grid).
  """

  index: int
  id: str
  overrides: dict
  config: ml_collections.ConfigDict
  blocks: tuple[str, ...] = ()


def _walk(config, grid, where: str) -> list[tuple[str, tuple]]:
  """(dotted field, values) of one grid's leaves in key order, each a field of `config`."""
  out = []

  def walk(node, prefix):
    for key, value in node.items():
      path = f"{prefix}{key}"
      if isinstance(value, ml_collections.ConfigDict):
        walk(value, path + ".")
      elif isinstance(value, (tuple, list)) and len(value) > 0:
        out.append((path, tuple(value)))
      else:
        raise ValueError(f"{where}.{path} = {value!r}: a grid axis is a non-empty tuple of "
                         "values")

  walk(grid, "")
  for path, _ in out:
    _lookup(config, path, where=f"{where}.{path}")
  return out


def _order(path: str) -> list[str]:
  return path.split(".")  # a nested grid's key order, for fields of several grids


def sub_grids(config: ml_collections.ConfigDict) -> list[tuple[str, list[tuple[str, tuple]]]]:
  """(name, axes) of each sub-grid of `grids` in name order, each with the axes of `grid`
  crossed in (replacing its own over the same field); [("", grid axes)] without `grids`.

  Raises:
    ValueError: a grid leaf that is not a non-empty tuple/list, a field the config lacks, or
      a `grids` that is not a non-empty group of named grids (each named).
  """
  grid = config.get(GRID)
  common = _walk(config, grid, GRID) if grid is not None else []
  grids = config.get(GRIDS)
  if grids is None:
    return [("", common)]
  if not isinstance(grids, ml_collections.ConfigDict) or not len(grids):
    raise ValueError(f"{GRIDS} = {grids!r}: a union of sub-grids is a group of named grids "
                     f"(c.{GRIDS}.NAME.FIELD = (V1, V2, ...))")
  out = []
  for name, block in grids.items():
    if not isinstance(block, ml_collections.ConfigDict):
      raise ValueError(f"{GRIDS}.{name} = {block!r}: a sub-grid is a group of axes "
                       f"(c.{GRIDS}.{name}.FIELD = (V1, V2, ...))")
    own = dict(_walk(config, block, f"{GRIDS}.{name}"))
    own.update(common)
    out.append((name, sorted(own.items(), key=lambda kv: _order(kv[0]))))
  return out


def axes(config: ml_collections.ConfigDict) -> list[tuple[str, tuple]]:
  """The sweep's (dotted field, values) pairs in key order: the grid's axes; for a union of
  sub-grids every field some sub-grid varies, with every value a cell takes there (the
  config's own where a sub-grid does not vary it).

  Raises:
    ValueError: as `sub_grids`.
  """
  blocks = sub_grids(config)
  if len(blocks) == 1 and not blocks[0][0]:
    return blocks[0][1]
  paths = sorted({p for _, ax in blocks for p, _ in ax}, key=_order)
  out = []
  for path in paths:
    values = []
    for _, ax in blocks:
      own = dict(ax)
      for v in own[path] if path in own else (_lookup(config, path, where=path),):
        v = _like(v, _lookup(config, path, where=path))
        if v not in values:
          values.append(v)
    out.append((path, tuple(values)))
  return out


def _like(value: Any, current: Any) -> Any:
  """An integer given for a float field, as the float the cell's config holds (so 0 and 0.0
  spell one cell of a union)."""
  if isinstance(current, float) and isinstance(value, int) and not isinstance(value, bool):
    return float(value)
  return value


def _lookup(config, path: str, *, where: str):
  node = config
  for part in path.split("."):
    if not isinstance(node, ml_collections.ConfigDict) or part not in node:
      raise ValueError(f"{where}: the config has no field {path!r}")
    node = node[part]
  return node


def _leaves(config, prefix: str = "") -> list[str]:
  out = []
  for key, value in config.items():
    if key in (GRID, GRIDS) and not prefix:
      continue
    if isinstance(value, ml_collections.ConfigDict):
      out += _leaves(value, f"{prefix}{key}.")
    else:
      out.append(f"{prefix}{key}")
  return out


def _coerce(text: str, current: Any, where: str) -> Any:
  """One `--grid` value in the type of the field's current value."""
  try:
    if isinstance(current, bool):
      if text.lower() not in ("true", "false", "1", "0"):
        raise ValueError
      return text.lower() in ("true", "1")
    if isinstance(current, int):
      return int(text)
    if isinstance(current, float):
      return float(text)
    if isinstance(current, (tuple, list)):
      raise ValueError
    if current is None:
      try:
        return ast.literal_eval(text)
      except (ValueError, SyntaxError):
        return text
    return text
  except ValueError:
    kind = type(current).__name__
    hint = (" (a tuple field takes a list literal: FIELD='[(\"a\", \"b\"), (\"c\",)]')"
            if isinstance(current, (tuple, list)) else "")
    raise ValueError(f"{where}: {text!r} is not a {kind} like the field's value "
                     f"{current!r}{hint}") from None


def with_axes(config: ml_collections.ConfigDict, specs: Sequence[str]) -> ml_collections.ConfigDict:
  """A copy of `config` with each spec `FIELD=V1,V2,...` as the grid axis over that field
  (added, or replacing an axis the config declares; with sub-grids, crossed with each of
  them, replacing a sub-grid's axis over the same field). Values are split on commas and take the
  type of the field's value; a spec whose values start with '[' or '(' is one Python list
  literal of values (for tuple-valued fields).

  Raises:
    ValueError: a malformed spec, or a field the config lacks (naming the spec and listing
      the config's fields).
  """
  if not specs:
    return config
  out = ml_collections.ConfigDict(config.to_dict())
  for spec in specs:
    field, sep, text = (part.strip() for part in spec.partition("="))
    where = f"--grid {spec}"
    if not sep or not field or not text:
      raise ValueError(f"{where}: expected FIELD=V1,V2,... (e.g. --grid temperature=0.0,0.7)")
    try:
      current = _lookup(out, field, where=where)
    except ValueError:
      raise ValueError(f"{where}: the config has no field {field!r}; its fields: "
                       f"{', '.join(_leaves(out))}") from None
    if isinstance(current, ml_collections.ConfigDict):
      raise ValueError(f"{where}: {field!r} is a group of fields; name one of them: "
                       f"{', '.join(_leaves(current, field + '.'))}")
    if text[0] in "[(":
      try:
        values = ast.literal_eval(text)
      except (ValueError, SyntaxError):
        raise ValueError(f"{where}: {text!r} is not a Python list literal") from None
      if not isinstance(values, (list, tuple)) or not values:
        raise ValueError(f"{where}: {text!r} is not a non-empty list of values")
      values = tuple(tuple(v) if isinstance(v, list) else v for v in values)
    else:
      values = tuple(_coerce(v.strip(), current, where) for v in text.split(","))
    node = out
    for part in [GRID, *field.split(".")[:-1]]:
      if part not in node or not isinstance(node[part], ml_collections.ConfigDict):
        node[part] = ml_collections.ConfigDict()
      node = node[part]
    node[field.split(".")[-1]] = values
  return out


def _format(value: Any) -> str:
  return ",".join(map(str, value)) if isinstance(value, (tuple, list)) else str(value)


def cell_id(overrides: dict) -> str:
  return ",".join(f"{k}={_format(v)}" for k, v in overrides.items()) or "base"


def apply(config: ml_collections.ConfigDict, overrides: dict) -> ml_collections.ConfigDict:
  """A copy of `config` without its grid(s) and with `overrides` set (types are checked)."""
  out = ml_collections.ConfigDict(config.to_dict())
  for key in (GRID, GRIDS):
    if key in out:
      del out[key]
  for path, value in overrides.items():
    *parents, leaf = path.split(".")
    node = out
    for part in parents:
      node = node[part]
    try:
      node[leaf] = value
    except TypeError as e:
      raise ValueError(f"grid.{path} = {value!r}: {e}") from None
  out.lock()
  return out


def cells(config: ml_collections.ConfigDict) -> list[Cell]:
  """Every cell of the sweep, in order: the grid's product, or the union of the sub-grids'
  products in name order with cells spelled alike kept once (at their first place)."""
  blocks = sub_grids(config)
  if len(blocks) == 1 and not blocks[0][0]:
    ax = blocks[0][1]
    names = [name for name, _ in ax]
    out = []
    for i, combo in enumerate(itertools.product(*(values for _, values in ax))):
      overrides = dict(zip(names, combo))
      out.append(Cell(i, cell_id(overrides), overrides, apply(config, overrides)))
    return out
  paths = sorted({p for _, ax in blocks for p, _ in ax}, key=_order)
  base = {p: _lookup(config, p, where=p) for p in paths}
  found: dict[str, tuple[dict, list]] = {}  # id -> (overrides, blocks), in first-seen order
  for name, ax in blocks:
    names = [p for p, _ in ax]
    for combo in itertools.product(*(values for _, values in ax)):
      given = {p: _like(v, base[p]) for p, v in zip(names, combo)}
      overrides = {p: given.get(p, base[p]) for p in paths}
      key = cell_id(overrides)
      if key not in found:
        found[key] = (overrides, [])
      if name not in found[key][1]:
        found[key][1].append(name)
  return [Cell(i, key, overrides, apply(config, overrides), tuple(spelled))
          for i, (key, (overrides, spelled)) in enumerate(found.items())]


def parse_shard(text: str) -> tuple[int, int]:
  """"i/n" -> (i, n) with 0 <= i < n.

  Raises:
    ValueError: naming the flag and the expected form.
  """
  try:
    i, n = (int(x) for x in text.split("/"))
  except ValueError:
    raise ValueError(f"--shard={text!r}: expected i/n, e.g. 0/4") from None
  if not 0 <= i < n:
    raise ValueError(f"--shard={text!r}: needs 0 <= i < n")
  return i, n


def default_shard(environ=None) -> tuple[int, int]:
  """This process's shard when `--shard` is not given, in order:
  - a SLURM job array (`SLURM_ARRAY_TASK_ID` with `SLURM_ARRAY_TASK_COUNT`): task i of n,
    counted from `SLURM_ARRAY_TASK_MIN` in steps of `SLURM_ARRAY_TASK_STEP` (so
    `--array=1-4` and `--array=0-6:2` both give shards 0..3 of 4);
  - (jax.process_index(), jax.process_count()) on a multi-host JAX setup;
  - else (0, 1).

  Args:
    environ: the environment to read (default `os.environ`).

  Raises:
    ValueError: a SLURM variable that is not an integer, or a task outside its array, named.
  """
  import os

  env = os.environ if environ is None else environ
  if "SLURM_ARRAY_TASK_ID" in env and "SLURM_ARRAY_TASK_COUNT" in env:
    def number(name: str, default: int | None = None) -> int:
      text = env.get(name)
      if text is None and default is not None:
        return default
      try:
        return int(text)
      except (TypeError, ValueError):
        raise ValueError(f"{name}={text!r}: expected an integer (the SLURM job array's "
                         "variables set the default shard; pass --shard=i/n to override)"
                         ) from None

    task, count = number("SLURM_ARRAY_TASK_ID"), number("SLURM_ARRAY_TASK_COUNT")
    first, step = number("SLURM_ARRAY_TASK_MIN", 0), number("SLURM_ARRAY_TASK_STEP", 1)
    offset = task - first
    if count < 1 or step < 1 or offset < 0 or offset % step or not offset // step < count:
      raise ValueError(
          f"SLURM_ARRAY_TASK_ID={task} is not one of the {count} tasks from "
          f"SLURM_ARRAY_TASK_MIN={first} in steps of {step}; pass --shard=i/n to override")
    return offset // step, count
  import jax

  n = jax.process_count()
  return (jax.process_index(), n) if n > 1 else (0, 1)


def select(all_cells: list[Cell], config: ml_collections.ConfigDict,
           specs: Sequence[str]) -> list[Cell]:
  """The cells whose value on each spec's axis is one of the spec's values: `FIELD=V1,V2,...`
  over a grid axis of `config` (values as the cell ids spell them). Cells keep their ids and
  sweep indices, so a run of the selection resumes and merges as the whole sweep's cells do.

  Raises:
    ValueError: a malformed spec, a field that is not a grid axis (naming the axes), or a value
      the axis lacks (naming its values).
  """
  keep = list(all_cells)
  grid = dict(axes(config))
  for spec in specs:
    field, sep, text = (part.strip() for part in spec.partition("="))
    where = f"--only {spec}"
    if not sep or not field or not text:
      raise ValueError(f"{where}: expected FIELD=V1,V2,... over a grid axis (e.g. --only "
                       "backend=auto)")
    if field not in grid:
      raise ValueError(f"{where}: {field!r} is not an axis of the grid; its axes: "
                       f"{', '.join(grid) or 'none'}")
    spelled = [_format(v) for v in grid[field]]
    wanted = [v.strip() for v in text.split(",")]
    unknown = [v for v in wanted if v not in spelled]
    if unknown:
      raise ValueError(f"{where}: {', '.join(map(repr, unknown))} not among the axis's values "
                       f"{', '.join(spelled)}")
    keep = [c for c in keep if _format(c.overrides[field]) in wanted]
  return keep


def shard(all_cells: list[Cell], i: int, n: int) -> list[Cell]:
  """Every n-th cell starting at i (by sweep index): shards of one sweep are disjoint, cover
  it, and differ by at most one cell; the same config gives the same shard on every call (so
  a shard resumes)."""
  return [c for c in all_cells if c.index % n == i]
