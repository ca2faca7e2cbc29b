"""Test and study support (random walkers, schema oracles, the drafter checker); the runtime
never imports it.

  from infernix_jax.testing import check_drafter
  assert check_drafter("mine", {"k": 3}).passed
"""


def __getattr__(name):
  if name in ("check_drafter", "DrafterReport"):
    from infernix_jax.testing import check
    return getattr(check, name)
  raise AttributeError(f"module 'infernix_jax.testing' has no attribute {name!r}")
