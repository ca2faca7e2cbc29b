"""What a run ran on: package versions, git revision, device, host; and the code version that
resume compares (revision, a hash of uncommitted code changes, package versions)."""

from __future__ import annotations

import hashlib
import importlib.metadata
import os
import platform
import subprocess
import time
from pathlib import Path

PACKAGES = ("infernix_jax", "jax", "jaxlib", "flax", "numpy", "xgrammar", "llguidance",
            "ml_collections", "optax", "tokenizers", "gguf", "matplotlib")
ROOT = Path(__file__).resolve().parents[2]
# What a study's numbers depend on: uncommitted changes elsewhere (reports, docs) are not code.
CODE_PATHS = ("infernix_jax", "experiments", "configs", "benchmarks", "pyproject.toml")


def _git(*args: str) -> str:
  try:
    return subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True,
                          timeout=10).stdout.strip()
  except (OSError, subprocess.SubprocessError):
    return ""


def code_diff_hash() -> str:
  """sha256 (12 hex digits) of the uncommitted changes to the code paths: the diff of tracked
  files against HEAD plus the contents of untracked, not ignored files there; "" when there
  are none (or outside a git checkout)."""
  diff = _git("diff", "HEAD", "--binary", "--", *CODE_PATHS)
  untracked = sorted(filter(None, _git("ls-files", "--others", "--exclude-standard", "--",
                                       *CODE_PATHS).splitlines()))
  if not diff and not untracked:
    return ""
  h = hashlib.sha256(diff.encode())
  for name in untracked:
    h.update(b"\0" + name.encode() + b"\0")
    try:
      h.update((ROOT / name).read_bytes())
    except OSError:
      continue
  return h.hexdigest()[:12]


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
  diff = code_diff_hash()
  return {
      "packages": versions,
      "python": platform.python_version(),
      "git": {"revision": _git("rev-parse", "HEAD"), "dirty": bool(diff), "diff_hash": diff},
      "device": {"platform": devices[0].platform, "kind": devices[0].device_kind,
                 "count": len(devices), "process_count": jax.process_count()},
      "host": {"machine": platform.machine(), "cpus": os.cpu_count(),
               "system": platform.system()},
      "started": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
  }


def version_id(env: dict) -> str:
  """A short label of the code version in `env`: the revision's first 10 hex digits, with
  '+<diff hash>' for uncommitted changes ('+dirty' where an older run recorded no hash)."""
  git = env.get("git", {})
  rev = (git.get("revision") or "unknown")[:10]
  if git.get("diff_hash"):
    return f"{rev}+{git['diff_hash']}"
  return f"{rev}+dirty" if git.get("dirty") else rev


def version_differences(old: dict, new: dict) -> list[str]:
  """How the code versions of two environments differ, one phrase per difference ("then vs
  now"): the git revision, the uncommitted changes, and each package's version. Changes an
  older record cannot compare (dirty without a hash) count as a difference."""
  out = []
  og, ng = old.get("git", {}), new.get("git", {})
  if (og.get("revision") or "") != (ng.get("revision") or ""):
    out.append(f"git revision {(og.get('revision') or 'unknown')[:10]} vs "
               f"{(ng.get('revision') or 'unknown')[:10]}")
  o_diff = og.get("diff_hash", "unhashed" if og.get("dirty") else "")
  n_diff = ng.get("diff_hash", "unhashed" if ng.get("dirty") else "")
  if o_diff != n_diff or o_diff == "unhashed":
    out.append(f"uncommitted code changes {o_diff or 'none'} vs {n_diff or 'none'}")
  op, np_ = old.get("packages", {}), new.get("packages", {})
  for name in sorted(set(op) | set(np_)):
    if op.get(name) != np_.get(name):
      out.append(f"{name} {op.get(name)} vs {np_.get(name)}")
  return out
