"""Loads a study config file the way `--config=configs/<name>.py[:variant]` does."""

from __future__ import annotations

import importlib.util
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DATA = ROOT.parent / "shared" / "data"


def load(name: str, variant: str = ""):
  spec = importlib.util.spec_from_file_location(f"configs.{name}", ROOT / "configs" / f"{name}.py")
  module = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(module)
  return module.get_config(variant) if variant else module.get_config()
