"""`python -m infernix_jax.cli generate|serve`."""

from infernix_jax.cli.main import run

if __name__ == "__main__":
  run()
