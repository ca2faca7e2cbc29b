"""Suite-wide settings: the CLI's persistent compilation cache stays off inside tests (each
test process compiles for itself; nothing is written under the user's home)."""

import os

os.environ.setdefault("INFERNIX_JAX_COMPILE_CACHE", "")
