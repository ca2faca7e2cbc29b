"""`check_drafter`: the exactness checks of the built-in drafter matrix, for any drafter.

  from infernix_jax.testing import check_drafter
  report = check_drafter("mine", {"k": 3})     # a registered name (built in or a plug-in's)
  assert report.passed, report

On a tiny peaky random target with a toy vocabulary (`exact_oracle`), against FP64
enumeration of ordinary decoding:
- greedy (T = 0): every output equals ordinary greedy decoding token for token, free and
  under a choice constraint on every backend that expresses it;
- sampling (T = 1): the distribution of `samples` outputs passes a chi-square test against
  ordinary decoding's exact distribution, free and constrained, and (for a drafter whose q
  is sampled, or that proposes trees, whose illegal nodes masked q prunes) with masked q on
  and off.
One engine per jump-forward setting serves every case (greedy and sampled requests share
batches), so the cost grows linearly with the drafters checked.

Power: at 1,200 samples and p > 1e-3 the test rejects the naive acceptance rule (an illegal
draft dropped and a bonus drawn from p in its place, `acceptance="drop-illegal"`) with a
p-value below 1e-6 on the sparse block drafter (tests/runtime/test_exactness.py), and a
drafter whose sparse q puts 0.5 extra on one of its 8 candidates while drawing them
uniformly (tests/runtime/test_check_drafter.py). A drafter that ignores the grammar is not
wrong: the exact rule rejects its illegal drafts with the right residual.
"""

from __future__ import annotations

import dataclasses
import functools
from typing import Any, Mapping

__all__ = ["DrafterReport", "check_drafter"]

PROMPTS = ([1, 1, 2, 1, 1, 2, 1], [8, 12, 13, 9, 8, 12])
CHOICES = (b"abc", b"ab", b"ba1", b"cab", b"x{y}")
ALPHA = 1e-3  # a chi-square p-value below this fails the check


@dataclasses.dataclass
class DrafterReport:
  """What `check_drafter` found.

  Attributes:
    drafter: the drafter's name (with "jump+" when behind jump-forward).
    failures: one line per failed check (empty: passed).
    pvalues: chi-square p-values by case ("free", "constrained", "constrained/unmasked").
    drafted: drafts proposed over every sampled request (0: the drafter never drafted).
    accepted: drafts accepted.
  """

  drafter: str
  failures: list[str] = dataclasses.field(default_factory=list)
  pvalues: dict[str, float] = dataclasses.field(default_factory=dict)
  drafted: int = 0
  accepted: int = 0

  @property
  def passed(self) -> bool:
    return not self.failures

  def __str__(self) -> str:
    head = f"{self.drafter}: {'passed' if self.passed else 'FAILED'}"
    detail = ", ".join(f"{k} p={v:.3g}" for k, v in self.pvalues.items())
    return "; ".join([head, detail, f"drafted {self.drafted}, accepted {self.accepted}"]
                     + self.failures)


@functools.lru_cache(maxsize=None)
def _exact(prompt: int, n: int, temperature: float, constrained: bool) -> dict:
  """Ordinary decoding's exact output distribution on the tiny target (FP64 enumeration,
  `exact_oracle.exact_distribution`) after PROMPTS[prompt], n tokens at `temperature`, free
  or under CHOICES: computed once per process, every drafter's check compares against the
  same laws. The caller must not change the returned dict."""
  from infernix_jax.testing import exact_oracle as h

  cfg, model = h.tiny_model()
  return h.exact_distribution(cfg, model, PROMPTS[prompt], h.toy_vocab(), n, temperature,
                              choices=CHOICES if constrained else None)


def check_drafter(name: str, options: Mapping[str, Any] | None = None, *,
                  jump_forward: bool = False, samples: int = 1200, lanes: int = 32,
                  bridge: str = "stages", max_tokens: int = 4,
                  acceptance: str = "exact") -> DrafterReport:
  """Runs drafter `name` through the exactness checks of the built-in matrix.

  Args:
    name: a registered drafter (`infernix_jax.drafters.names()`, plug-ins included).
    options: its options (K defaults to 3 here; a network drafter with a `weights` option
      gets untrained weights, "random", unless given: trained files exist for the embedded
      model only).
    jump_forward: check it behind grammar jump-forward.
    samples: sampled requests per distribution test (power: see the module docstring).
    lanes, bridge: the engine's lanes and host bridge.
    max_tokens: output length of the sampled requests (the enumeration grows as V^n).
    acceptance: the engine's acceptance rule ("drop-illegal" only to show the test's power).

  Returns:
    A `DrafterReport`; `.passed` is False when any check failed, `.failures` says which.
  """
  from infernix_jax import constrain as ic
  from infernix_jax.constrain import backends
  from infernix_jax.runtime import drafters
  from infernix_jax.runtime.build import EngineSpec, Target, build_engine
  from infernix_jax.runtime.types import GenerationRequest, SamplingOptions
  from infernix_jax.testing import exact_oracle as h

  cfg, model = h.tiny_model()
  vocab = h.toy_vocab()
  fields = drafters.fields(name)
  opts = {key: value for key, value in (("k", 3), ("weights", "random"),
                                        ("model", h.tiny_model(seed=1)))
          if key in fields}
  opts.update(options or {})
  spec = EngineSpec(drafter=name, drafter_options=opts, jump_forward=jump_forward,
                    lanes=lanes, capacity=32, bridge=bridge, acceptance=acceptance,
                    compile_cache="")
  built = build_engine(spec, target=Target(cfg=cfg, model=model, vocab=vocab, name="tiny"))
  engine, drafter = built.engine, built.drafter
  report = DrafterReport(drafter=drafter.name)
  choice = ic.OutputConstraint.choice([c.decode() for c in CHOICES])
  supported = []
  for backend in backends.names():
    try:
      backends.get(backend).check(choice)
      supported.append(backend)
    except ic.ConstraintError:
      pass

  # Greedy: every prompt, free and under each backend, in one batch.
  cases = [(p, b) for p in range(len(PROMPTS)) for b in [None] + supported]
  greedy = [GenerationRequest(PROMPTS[p], max_tokens=6,
                              constraint=choice.with_backend(b) if b else None)
            for p, b in cases]
  # Sampling: free (unless it only drafts forced tokens, which need a grammar) and
  # constrained, with masked q off too where q is sampled.
  cells = [("constrained", True, True)]
  if not drafter.uses_forced:
    cells.insert(0, ("free", False, True))
  if drafter.sampling or drafter.tree:  # masked q off: sampled drafts kept, tree nodes unpruned
    cells.append(("constrained/unmasked", True, False))
  for masked_q in sorted({m for _, _, m in cells} | {True}, reverse=True):
    engine.masked_q = masked_q
    batch = list(greedy) if masked_q else []
    mine = [c for c in cells if c[2] == masked_q]
    for _, constrained, _ in mine:
      batch += [GenerationRequest(PROMPTS[0], max_tokens=max_tokens,
                                  constraint=choice if constrained else None,
                                  sampling=SamplingOptions(temperature=1.0, seed=s))
                for s in range(samples)]
    results = engine.generate(batch)
    errors = [r.error for r in results if r.error]
    if errors:
      report.failures.append(f"requests failed ({len(errors)}), e.g. {errors[0]}")
      continue
    if masked_q:
      for (p, b), r in zip(cases, results[:len(greedy)]):
        [want] = _exact(p, 6, 0.0, b is not None)
        if tuple(r.token_ids) != want:
          report.failures.append(f"greedy prompt {p} backend {b or 'free'}: got "
                                 f"{list(r.token_ids)}, ordinary decoding gives {list(want)}")
      results = results[len(greedy):]
    for i, (label, constrained, _) in enumerate(mine):
      part = results[i * samples:(i + 1) * samples]
      report.drafted += sum(r.drafted for r in part)
      report.accepted += sum(r.accepted for r in part)
      pvalue = h.chi_square_pvalue(_exact(0, max_tokens, 1.0, constrained),
                                   [tuple(r.token_ids) for r in part])
      report.pvalues[label] = pvalue
      if not pvalue > ALPHA:
        report.failures.append(f"sampling {label}: chi-square p={pvalue:.3g} <= {ALPHA} "
                               f"against ordinary decoding's exact distribution")
  engine.masked_q = spec.masked_q
  return report
