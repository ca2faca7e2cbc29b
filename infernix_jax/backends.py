"""Constraint backends by name: the public registry, for backends written outside the package.

  from infernix_jax import backends
  backends.register(MyBackend())                         # or ("pkg.module:Class", name="x")
  ij.LLM(backend="x"); infernix-jax generate --plugin pkg.module --backend x

A backend implements the primitives of `ConstraintBackend` (`constrain/backends/base.py`);
the session transactions and the batch fill are written once over them.
"""

from infernix_jax.constrain.backends import get, names, register, resolve
from infernix_jax.constrain.backends.base import BuildResult, ConstraintBackend, ConstraintSession

__all__ = ["BuildResult", "ConstraintBackend", "ConstraintSession", "get", "names", "register",
           "resolve"]
