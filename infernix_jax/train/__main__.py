"""python -m infernix_jax.train --config=configs/train_mtp.py[:smoke] [--config.FIELD=VALUE]"""

from absl import app, flags, logging

from infernix_jax._extras import missing

try:
  from ml_collections import config_flags
except ImportError as e:
  raise missing("ml_collections", "train", "python -m infernix_jax.train") from e

_CONFIG = config_flags.DEFINE_config_file("config", None, "training config (configs/train_*.py)")
flags.mark_flags_as_required(["config"])


def main(argv):
  if len(argv) > 1:
    raise app.UsageError(f"unexpected arguments: {' '.join(argv[1:])}")
  logging.set_verbosity(logging.WARNING)  # orbax logs every checkpoint step at INFO
  from infernix_jax.train.loop import train
  summary = train(_CONFIG.value)
  evals = summary["history"]["evals"]
  print(f"done: {summary['steps']} steps in {summary['seconds']} s; final accepted length "
        f"{evals[-1]['accepted_length'] if evals else 'n/a'}")


if __name__ == "__main__":
  app.run(main)
