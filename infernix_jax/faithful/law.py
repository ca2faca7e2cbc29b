"""The grammar-faithful law μ*(y) ∝ p(y)·[y ∈ L] of a finite language, as a Doob transform.

p(y) = Π_i softmax(logits_i / T)(y_i), the product of the per-token tempered distributions
(EOS included): at T = 1 the model's probability of y; at T != 1 it is not p(y)^(1/T)
renormalized.

With the future validity Φ(y) = Pr_p[a valid completion | y], μ* decodes token by token with
p*(t | y) = p(t | y)·Φ(y t) / Φ(y), EOS counting as a token with Φ(y EOS) = [y ∈ L]
(Park et al., "Grammar-Aligned Decoding", NeurIPS 2024). For a finite language Φ is exact:
a sum over the token trie (`faithful.trie`) of the target's probabilities (`faithful.target`).
"""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np

from infernix_jax.faithful import target as _target
from infernix_jax.faithful.trie import TokenTrie

LAWS = ("local", "exact-finite", "onestep")  # GenerationRequest.sampling_law values
# A legal token a greedy lane must not take gets this bias: finite (never flagged non-finite),
# far below any real logit.
GREEDY_BLOCK = -1e30


@dataclasses.dataclass
class ExactFiniteLaw:
  """μ* of one request: the trie, the target's node log-probabilities, log Φ, and costs.

  Attributes:
    trie: the TokenTrie of the constraint.
    temperature: the T of p (greedy requests use T = 1: member probabilities under the model).
    edge: f64[N] log p(token[node] | parent); eos: f64[N] log p(EOS | node) (-inf off members).
    log_phi: f64[N] log Φ(node).
    cost: the target forwards that computed them (faithful.target.ForwardCost).
    greedy_path: the most probable tokenization of the most probable member (EOS excluded);
      under `one_step`, the law's own token-by-token argmax.
    one_step: log_phi holds the one-step estimate Φ̂(y) = the legal mass of p(· | y) (with
      EOS at a member) instead of the exact Φ (`onestep`).
    tv_bound: 0 for the whole trie; for a best-first trie (`search`), the certified bound on
      the total variation to μ* of this law (μ* restricted to the members found).
    stop: why the trie ends: "complete", "greedy" (argmax certified) or "tolerance".
  """

  trie: TokenTrie
  temperature: float
  edge: np.ndarray
  eos: np.ndarray
  log_phi: np.ndarray
  cost: Any
  greedy_path: tuple[int, ...] = ()
  one_step: bool = False
  tv_bound: float = 0.0
  stop: str = "complete"

  @classmethod
  def compute(cls, graphdef: Any, state: Any, cfg: Any, prompt, trie: TokenTrie,
              vocab: Any, temperature: float) -> ExactFiniteLaw:
    """Runs the target over the trie and builds the law (T = 0 builds greedy's law at T = 1).

    Raises:
      FeatureConflictError: the language has no member with positive probability.
    """
    t = float(temperature) if temperature > 0 else 1.0
    edge, eos, cost = _target.node_logprobs(graphdef, state, cfg, prompt, trie, vocab.size, t)
    return cls._build(trie, edge, eos, cost, t, vocab)

  @classmethod
  def _build(cls, trie: TokenTrie, edge, eos, cost, t: float, vocab: Any,
             **extra) -> ExactFiniteLaw:
    """The law from the node log-probabilities: Φ, the refusal of an empty law, greedy_path.

    Raises:
      FeatureConflictError: no member of positive probability.
    """
    from infernix_jax.constrain.errors import FeatureConflictError
    phi = _target.log_phi(trie, edge, eos)
    if not np.isfinite(phi[0]):
      raise FeatureConflictError(
          "sampling_law='exact-finite': every member of the constraint's language has "
          "probability 0 under the target (or the language is empty)")
    law = cls(trie=trie, temperature=t, edge=edge, eos=eos, log_phi=phi, cost=cost, **extra)
    law.greedy_path = law._greedy(vocab)
    return law

  @classmethod
  def search(cls, graphdef: Any, state: Any, cfg: Any, prompt, session: Any, vocab: Any,
             temperature: float, *, tolerance: float = 0.0, max_nodes: int, max_depth: int,
             name: str = "the constraint", width: int = 64
             ) -> ExactFiniteLaw:
    """The law from a best-first trie (`faithful.search.expand`), without the whole trie.

    Greedy (T = 0): expands until the most probable member is certain; greedy_path is exact.
    Sampling: expands until μ* restricted to the members found is within `tolerance` of μ*
    in total variation (0: the whole language; the law is μ*). `width`: trie nodes (with
    their ancestors) scored per round.

    Raises:
      FeatureConflictError: no member of positive probability.
      LanguageTooLargeError: the budgets run out before the stopping rule holds.
    """
    from infernix_jax.faithful import search as _search
    t = float(temperature) if temperature > 0 else 1.0
    scorer = _target.TreeScorer(graphdef, state, cfg, prompt, vocab.size, t, width)
    found = _search.expand(scorer, session, vocab, greedy=temperature <= 0,
                           tolerance=tolerance, max_nodes=max_nodes, max_depth=max_depth,
                           name=name)
    return cls._build(found.trie, found.edge, found.eos, found.cost, t, vocab,
                      tv_bound=found.tv_bound, stop=found.stop)

  def onestep(self) -> ExactFiniteLaw:
    """The same trie under the one-step estimate Φ̂(y t) = Σ_{u legal after y t} p(u | y t):
    p̂*(t | y) ∝ p(t | y)·Φ̂(y t). On a finite trie it costs nothing beyond the exact law's
    forwards (the legal mass at each node is already there); it exists to measure the
    estimate against μ*. Greedy: the token-by-token argmax of p̂*."""
    acc = self.eos.copy()
    idx = np.arange(1, self.trie.size)
    np.logaddexp.at(acc, self.trie.parent[idx], self.edge[idx])
    law = dataclasses.replace(self, log_phi=acc, one_step=True)
    node, path = 0, []
    while True:
      tokens, lp, lp_eos = law.next_logprobs(node)
      if not len(tokens) or lp_eos >= lp.max():
        break
      path.append(int(tokens[int(np.argmax(lp))]))
      node = self.trie.children[node][path[-1]]
    law.greedy_path = tuple(path)
    return law

  def _base(self, node: int) -> float:
    """log Σ_t p(t | node)·Φ(child_t) + p(EOS | node): log Φ(node) for the exact Φ; the
    normalizer of p* for an estimate."""
    if not self.one_step:
      return float(self.log_phi[node])
    kids = np.fromiter(self.trie.children[node].values(), np.int64)
    return float(np.logaddexp.reduce(np.append(self.edge[kids] + self.log_phi[kids],
                                               self.eos[node])))

  # --- the law -------------------------------------------------------------------------------
  def path_logp(self) -> np.ndarray:
    """f64[N] log p(path to node) (product of edge probabilities from the root)."""
    out = np.zeros(self.trie.size)
    for d in range(1, int(self.trie.depth.max(initial=0)) + 1):
      idx = np.flatnonzero(self.trie.depth == d)
      out[idx] = out[self.trie.parent[idx]] + self.edge[idx]
    return out

  def distribution(self) -> dict[tuple[int, ...], float]:
    """The law over member token sequences (EOS excluded), as the product of its steps
    (μ* = p(y)·p(EOS | y) / Φ(root) for the exact Φ)."""
    base = np.asarray([self._base(i) for i in range(self.trie.size)])
    with np.errstate(invalid="ignore"):  # below a node of Φ = 0 (no member): never read
      return self._distribution(base)

  def _distribution(self, base: np.ndarray) -> dict[tuple[int, ...], float]:
    step = np.zeros(self.trie.size)
    idx = np.arange(1, self.trie.size)
    step[idx] = self.edge[idx] + self.log_phi[idx] - base[self.trie.parent[idx]]
    lp = np.zeros(self.trie.size)
    for d in range(1, int(self.trie.depth.max(initial=0)) + 1):
      at = np.flatnonzero(self.trie.depth == d)
      lp[at] = lp[self.trie.parent[at]] + step[at]
    lp += self.eos - base
    return {tuple(self.trie.path(int(i))): float(np.exp(lp[i]))
            for i in np.flatnonzero(self.trie.member)}

  def next_logprobs(self, node: int) -> tuple[np.ndarray, np.ndarray, float]:
    """log p*(· | node): (tokens i32[C], log probs f64[C] of the children, log p*(EOS))."""
    kids = self.trie.children[node]
    tokens = np.fromiter(kids.keys(), np.int32, len(kids))
    nodes = np.fromiter(kids.values(), np.int64, len(kids))
    base = self._base(node)
    return tokens, self.edge[nodes] + self.log_phi[nodes] - base, float(self.eos[node] - base)

  def sample(self, rng: np.random.Generator) -> tuple[int, ...]:
    """One output from μ*, token by token with p* (EOS excluded)."""
    node, out = 0, []
    while True:
      tokens, lp, lp_eos = self.next_logprobs(node)
      probs = np.exp(np.append(lp, lp_eos))
      i = int(rng.choice(len(probs), p=probs / probs.sum()))
      if i == len(tokens):
        return tuple(out)
      out.append(int(tokens[i]))
      node = self.trie.children[node][out[-1]]

  def _greedy(self, vocab: Any) -> tuple[int, ...]:
    """The most probable member, its probability summed over every tokenization (ties: the
    smaller byte string); output its most probable tokenization (ties: the first found)."""
    lp = self.path_logp() + self.eos
    best: dict[bytes, list] = {}
    for i in np.flatnonzero(self.trie.member):
      path = self.trie.path(int(i))
      text = vocab.decode(path)
      entry = best.setdefault(text, [-np.inf, -np.inf, ()])
      entry[0] = np.logaddexp(entry[0], lp[i])
      if lp[i] > entry[1]:
        entry[1], entry[2] = lp[i], tuple(path)
    text = min(best, key=lambda s: (-best[s][0], s))
    return best[text][2]

  # --- what the engine applies ---------------------------------------------------------------
  def advance(self, node: int, tokens) -> int:
    """The state after `tokens` (EOS excluded) from state `node`: their trie node, -1 off it."""
    return self.trie.walk(tokens, node) if node >= 0 else -1

  def bias_row(self, node: int, drafts, out: np.ndarray, temperature: float) -> None:
    """Writes the bias of every verified position of one lane: out[i] (f32[Vm], zeroed) gets
    that of the state after drafts[:i], for i in 0 .. len(drafts)."""
    for i in range(len(drafts) + 1):
      self.bias(node, out[i], temperature)
      if i < len(drafts):
        node = self.advance(node, drafts[i:i + 1])

  def bias(self, node: int, out: np.ndarray, temperature: float) -> None:
    """Writes this node's additive logit bias into `out` (f32[Vm], zeroed by the caller).

    Sampling (T > 0): T·(log Φ(child_t) − log Φ(node)) on each child token and −T·log Φ(node)
    on the EOS ids at a member, so softmax(logits / T + bias / T) over the legal set is p*.
    Greedy (T = 0): 0 on the next token of `greedy_path`, GREEDY_BLOCK on every other legal
    token. Nodes off the trie (-1) or of Φ = 0 get no bias (the law never reaches them).
    """
    if node < 0:
      return
    kids = self.trie.children[node]
    if temperature > 0:
      base = self._base(node)
      if not np.isfinite(base):
        return  # Φ(node) = 0: no law reaches it (a draft into it was already rejected)
      for t, child in kids.items():  # Φ = 0 (probability 0, or left unexpanded): blocked
        out[t] = max(temperature * (self.log_phi[child] - base), GREEDY_BLOCK)
      if self.trie.member[node]:
        out[list(self.trie.eos_ids)] = -temperature * base
      return
    depth = int(self.trie.depth[node])
    path = self.greedy_path
    if self.trie.path(node) != list(path[:depth]):
      return  # off the forced path: an earlier position rejects this draft anyway
    out[list(kids)] = GREEDY_BLOCK
    if self.trie.member[node]:
      out[list(self.trie.eos_ids)] = GREEDY_BLOCK
    nxt = path[depth] if depth < len(path) else self.trie.eos_ids[0]
    out[nxt] = 0.0
