"""infernix_jax: constrained speculative decoding in JAX/Pallas.

  import infernix_jax as ij
  out = ij.generate("Name a colour", choice=["red", "green", "blue"])   # or ij.LLM(...)

Importing the package is cheap and never imports torch, transformers or jax-heavy
submodules: `generate`, `LLM` and the other names of `infernix_jax.api` load on first use.
Import the subpackages you need (`infernix_jax.constrain`, `.pallas`, `.models`, `.runtime`).
"""

__version__ = "0.1.0"

_API = ("Completion", "LLM", "PreparedRequest", "RequestError", "generate")


def __getattr__(name):
  if name in _API:
    from infernix_jax import api
    return getattr(api, name)
  raise AttributeError(f"module 'infernix_jax' has no attribute {name!r}")


def __dir__():
  return sorted(list(globals()) + list(_API))
