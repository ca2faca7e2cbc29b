"""The command line (`infernix-jax generate|serve`), above the runtime and the server.

  python -m infernix_jax.cli generate --drafter ngram --drafter-opt n=2 --k 4
  python -m infernix_jax.cli serve --plugin my_drafters --drafter mine

Flags map onto one `runtime.build.EngineSpec` (`cli.generate.engine_spec`) and one
`GenerationRequest`; their errors come back under the flag that set the parameter.
"""
