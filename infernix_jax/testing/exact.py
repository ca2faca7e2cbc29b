"""`exact_jit`: jit at XLA's default backend optimization level, for bit-exact comparisons.

  from infernix_jax.testing.exact import exact_jit
  both = exact_jit(lambda *a: (kernel(*a, interpret=True), reference(*a)))
  got, want = both(*args)
  np.testing.assert_array_equal(got, want)

The test suite compiles XLA's CPU code at LLVM optimization level 0
(`--xla_backend_optimization_level=0` in XLA_FLAGS, set by tests/conftest.py): compiling is
most of the suite's time. At level 0 two *different* programs that compute the same float
expression may round it differently: LLVM's optimizations (instruction selection, the
contraction of a multiply and an add into one fused multiply-add, vectorized vs scalar
paths) are what make the fused loops of, say, a Pallas kernel in interpret mode and its jnp
reference agree bit for bit. Measured: the split masked_sample kernel's partial Gumbel maxima
(z / T + g) differ from the jnp reference's by one ulp at level 0 (14.500030 vs 14.500029),
never at the default level.

A test that compares two programs bit for bit therefore compiles them at XLA's default level,
which is what production runs: `jax.jit(..., compiler_options=...)` sets the level for that
one program, over the environment's XLA_FLAGS (checked: with level 0 in XLA_FLAGS and this
option, the LLVM IR and object code XLA emits are the ones of a process without the flag, and
its dumped debug options equal the defaults). Everything else in the suite stays at level 0.
"""

from __future__ import annotations

import jax

# XLA's default `xla_backend_optimization_level` (DefaultDebugOptionsIgnoringFlags in
# xla/debug_options_flags.cc): the level every program compiles at outside the test suite.
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
