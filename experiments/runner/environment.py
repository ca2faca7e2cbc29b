"""What a run ran on: package versions, git revision, device, host."""

from __future__ import annotations

import importlib.metadata
import os
import platform
import subprocess
from pathlib import Path

PACKAGES = ("infernix_jax", "jax", "jaxlib", "flax", "numpy", "xgrammar", "llguidance",
            "ml_collections", "optax", "tokenizers", "gguf", "matplotlib")
ROOT = Path(__file__).resolve().parents[2]


def _git(*args: str) -> str:
  try:
    return subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True,
                          timeout=10).stdout.strip()
  except (OSError, subprocess.SubprocessError):
    return ""


def collect() -> dict:
  """A JSON-ready description of this process's software and hardware."""
  versions = {}
  for name in PACKAGES:
    try:
      versions[name] = importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
      versions[name] = None
  import jax

  devices = jax.devices()
  return {
      "packages": versions,
      "python": platform.python_version(),
      "git": {"revision": _git("rev-parse", "HEAD"),
              "dirty": bool(_git("status", "--porcelain", "--untracked-files=no"))},
      "device": {"platform": devices[0].platform, "kind": devices[0].device_kind,
                 "count": len(devices), "process_count": jax.process_count()},
      "host": {"machine": platform.machine(), "cpus": os.cpu_count(),
               "system": platform.system()},
  }
