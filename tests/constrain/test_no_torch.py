"""Importing the package and the constraint layer, compiling and masking never import torch."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

CHILD = textwrap.dedent("""
    import json, sys
    import numpy as np
    import infernix_jax
    from infernix_jax import constrain as ic
    vocab = ic.Vocabulary.from_tokens([b"<eos>", b"{", b"}", b'"a"', b":", b"1", b" "], eos_ids=[0])
    compiled = ic.ConstraintCompiler(vocab).compile(ic.OutputConstraint.json_object())
    session = compiled.new_session()
    buf = np.zeros((3, vocab.mask_words), np.int32)
    states = session.lookahead([1, 2], out=buf)
    session.accept([1, 2, 0])
    first = int(buf[0, 0]) if list(states) == [0, 0, 0] and session.terminated else -1
    after = sorted(m for m in sys.modules if m.split(".")[0] in ("torch", "transformers", "jax"))
    import torch  # the real one must still import afterwards (the stand-ins are gone)
    print(json.dumps({"mask": first, "loaded": after, "real_torch": hasattr(torch, "zeros")}))
""")


def test_constrain_never_imports_torch_transformers_or_jax():
  out = subprocess.run([sys.executable, "-c", CHILD], capture_output=True, text=True, timeout=120)
  assert out.returncode == 0, out.stderr
  result = json.loads(out.stdout.strip().splitlines()[-1])
  assert result["loaded"] == []
  assert result["mask"] == 1 << 1  # only "{" may start a JSON object
  assert result["real_torch"]
