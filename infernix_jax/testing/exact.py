"""`exact_jit`: jit at XLA's default backend optimization level, for bit-exact comparisons.

  from infernix_jax.testing.exact import exact_jit
  both = exact_jit(lambda *a: (kernel(*a, interpret=True), reference(*a)))
  got, want = both(*args)
  np.testing.assert_array_equal(got, want)

Compiling is most of the test suite's time, and XLA's CPU code compiles about 1.7 times
faster at LLVM optimization level 0 (`--xla_backend_optimization_level=0` in XLA_FLAGS;
measured on the masked_sample reference and the split kernel). But at level 0 two *different*
programs that compute the same float expression may round it differently (instruction
selection, the contraction of a multiply and an add into one fused multiply-add, vectorized
against scalar paths), and a Pallas kernel in interpret mode (a loop over blocks) is a very
different program from its jnp reference. Measured on an AMD EPYC: the split masked_sample
kernel's partial Gumbel maxima (z / T + g) differ from the jnp split's by one ulp at level 0
(14.500030 against 14.500029, in every shape of its test); at XLA's default level they are
equal, as in production. The suite runs at the default level (level 0 was measured on one CPU
model only); a test that compares such programs bit for bit compiles them through
`exact_jit`, so that it holds whatever XLA_FLAGS a developer runs it under.

`jax.jit(..., compiler_options=...)` sets the level for that one program, over the
environment's XLA_FLAGS (checked: with level 0 in XLA_FLAGS and this option, the LLVM IR and
the object code XLA emits are those of a process without the flag, and its dumped debug
options equal the defaults).
"""

from __future__ import annotations

import jax

# XLA's default `xla_backend_optimization_level` (DefaultDebugOptionsIgnoringFlags in
# xla/debug_options_flags.cc): the level every program compiles at unless XLA_FLAGS lowers it.
DEFAULT_LEVEL = 3


def exact_jit(fn, **jit_kwargs):
  """``jax.jit(fn, **jit_kwargs)`` compiled at XLA's default optimization level.

  Args:
    fn: the function to compile; the jitted functions it calls are inlined into its one
      program, so they compile at this level too.
    **jit_kwargs: passed to ``jax.jit`` (``static_argnames``, ...); ``compiler_options`` is
      merged, its own ``xla_backend_optimization_level`` kept if given.

  Returns:
    The jitted function.
  """
  options = dict(jit_kwargs.pop("compiler_options", None) or {})
  options.setdefault("xla_backend_optimization_level", DEFAULT_LEVEL)
  return jax.jit(fn, compiler_options=options, **jit_kwargs)
