"""The error raised where an optional extra's package is imported but not installed."""

from __future__ import annotations


def missing(package: str, extra: str, needed_for: str) -> ImportError:
  """An ImportError naming the extra that provides `package`.

  Use as `except ImportError as e: raise missing("optax", "train", "training") from e`.
  """
  return ImportError(f"{needed_for} needs {package}, which comes with the {extra} extra: "
                     f"pip install -e '.[{extra}]' (from the repository root; or "
                     f"make setup-test, which installs every extra)")
