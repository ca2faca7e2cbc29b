"""Studies of the runner, by name (a config's `study` field).

A study module provides:

  units(config) -> int                      work units of one cell (progress bar)
  run_cell(config, ctx) -> Iterator[dict]   the cell's records (requests, measurements); the
                                            bar counts each "request" record as a unit, or a
                                            {"kind": "progress", "item": label} record where
                                            units are not requests (counted, not stored)
  summarize(records, config, out_dir) -> str
                                            the markdown body of summary.md (tables); writes
                                            its PNG plots into out_dir and links them
  group(config) -> tuple                    (optional) cells run ordered by it, so cells that
                                            share an engine run back to back
  skip(config) -> str | None                (optional) why a cell the grid spells repeats
                                            another one; such a cell is recorded, not run

`ctx` is a `Context`: a per-process cache for what consecutive cells share (models, engines).
"""

from __future__ import annotations

import importlib
from types import ModuleType

STUDIES = {
    "decode": "experiments.studies.decode",            # accepted length, tokens/s, validity
    "classification": "experiments.studies.classification",  # prompt-only vs trie answers
    "trie": "experiments.studies.trie",                # the trie paper's compile/per-step study
    "exactness": "experiments.studies.exactness",      # correct vs naive acceptance rules
    "faithful": "experiments.studies.faithful",        # local law vs μ* on a bounded Dyck grammar
    "faithful_acceptance": "experiments.studies.faithful_acceptance",  # drafters: exact-finite vs local
    # greedy classification: token-level (local) vs label-level argmax (exact-finite)
    "faithful_classification": "experiments.studies.faithful_classification",
    "jsonschemabench": "experiments.studies.jsonschemabench",  # arXiv:2501.10868 + MaskBench
}


def get(name: str) -> ModuleType:
  """The study module registered as `name`.

  Raises:
    ValueError: an unknown name (the message lists the studies).
  """
  if name not in STUDIES:
    raise ValueError(f"config.study={name!r} is not a study; known: {', '.join(STUDIES)}")
  return importlib.import_module(STUDIES[name])


class Context:
  """What consecutive cells of one process share: `get(key, make)` keeps the most recent
  value per slot, so a sweep ordered by its expensive axes builds each thing once."""

  def __init__(self):
    self._slots: dict[str, tuple] = {}

  def get(self, slot: str, key, make):
    held = self._slots.get(slot)
    if held is not None and held[0] == key:
      return held[1]
    self._slots.pop(slot, None)  # free the old value before building the new one
    value = make()
    self._slots[slot] = (key, value)
    return value
