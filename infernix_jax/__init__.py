"""infernix_jax: constrained speculative decoding in JAX/Pallas.

Importing the package is cheap and never imports torch, transformers or jax-heavy
submodules; import the subpackages you need (`infernix_jax.constrain`, `.pallas`,
`.models`, `.runtime`).
"""

__version__ = "0.1.0"
