"""Drafters by name: the public registry, for drafters written outside the package.

  import infernix_jax as ij
  from infernix_jax import drafters

  @dataclasses.dataclass(frozen=True)
  class MyOptions(drafters.DrafterOptions):   # k, plus the drafter's own fields
    width: int = 2

  drafters.register("mine", build, options=MyOptions, help="...")   # build(options, context)
  ij.LLM(drafter="mine", drafter_options={"width": 3})
  infernix_jax.testing.check_drafter("mine", {"k": 3})              # exactness checks

A module that registers on import is a plug-in: `infernix-jax generate --plugin MODULE`,
`LLM(plugins=[MODULE])`, a study config's `c.plugins`. The interface (`Drafter`, `Proposal`,
`DraftInput`, `Committed`) is `runtime.drafters.base`'s.
"""

from infernix_jax.runtime.drafters import (BuildContext, Committed, DraftInput, Drafter,
                                           DrafterOptions, DrafterSpec, JumpForward,
                                           NoOptions, OptionError, Proposal, create, entry,
                                           fields, names, options, register,
                                           resolve_jump_forward)
from infernix_jax.runtime.drafters.base import one_hot_rows

__all__ = ["BuildContext", "Committed", "DraftInput", "Drafter", "DrafterOptions",
           "DrafterSpec", "JumpForward", "NoOptions", "OptionError", "Proposal", "create",
           "entry", "fields", "names", "one_hot_rows", "options", "register",
           "resolve_jump_forward"]
