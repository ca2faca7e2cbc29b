"""The teacher-scored corpus: written and self-generated chat turns, scored by the target.

One batched causal forward of the frozen target over a whole sequence gives, at every
position, its hidden states and its next-token distribution: the training signal of a
drafter, whoever wrote the text. No token is generated for the written part (`sources`),
so the corpus grows at prefill speed, not decode speed. The target's own generations
(`corpus.generate`, the self-distillation corpus) are kept as the self-generated share.

Stored per position (float16 unless said), sharded on disk under
`cache_root() / <key>` where the key hashes the model, the item list and the config:
  tokens     i32[N]            the sequence (chat-framed prompt, answer, EOS)
  features   f16[N, F]         outputs of the target layers `taps` (EAGLE-3's fused
                               low / middle / high features, F = len(taps) * D)
  last       f16[N, D]         the last layer's output before the final norm (MTP, block)
  top_ids    i32[N, J]         the target's J most probable next tokens at each position
  top_logp   f16[N, J]         their log-probabilities (full-vocabulary softmax, T = 1)
Row j of every array is the state after token j, predicting token j + 1.

The build is resumable (a shard is written whole, then its index; finished shards are
skipped), shows a progress bar with tokens/s and records its mix and speed in
`manifest.json`.

  python -m infernix_jax.train.teacher_corpus --config=configs/corpus.py[:smoke]
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import json
import sys
import time
from pathlib import Path
from typing import Sequence

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from infernix_jax.models.drafters import eagle3
from infernix_jax.models.kv_cache import KVCache
from infernix_jax.train import corpus, prompts, sources

FORMAT = "infernix-scored-corpus-v1"
ARRAYS = ("tokens", "features", "last", "top_ids", "top_logp")


@dataclasses.dataclass(frozen=True)
class Turn:
  """One sequence to score: identity, where its answer starts, its ids."""

  name: str
  family: str
  source: str
  ids: tuple[int, ...]
  prompt_len: int


def written_sequences(tok, eos: int, items: Sequence[sources.Item], max_len: int
                      ) -> tuple[list[Turn], int]:
  """Chat-frames each item (prompt, answer, EOS); items longer than max_len are dropped.

  Returns:
    (sequences, dropped count).
  """
  out, dropped = [], 0
  for it in items:
    head = corpus.framed_ids(tok, prompts.Prompt(it.name, it.family, it.prompt, None, 0))
    ids = head + list(tok.encode(it.answer)) + [eos]
    if len(ids) > max_len:
      dropped += 1
      continue
    out.append(Turn(it.name, it.family, it.source, tuple(ids), len(head)))
  return out, dropped


def self_sequences(records: Sequence[corpus.Record], max_len: int) -> list[Turn]:
  """The self-distillation corpus's records as sequences (the target's own text)."""
  return [Turn(r.name, r.family, "self", tuple(r.ids[:max_len]), r.prompt_len)
          for r in records if len(r.ids) - r.prompt_len >= 2]


def corpus_key(model_id: str, seqs: Sequence[Turn], taps, top_k: int) -> str:
  """Stable hash of (format, model identity, taps, J, every sequence)."""
  h = hashlib.sha256(f"{FORMAT}|{model_id}|{tuple(taps)}|{top_k}".encode())
  for s in seqs:
    h.update(f"{s.name}|{s.source}|{s.prompt_len}|".encode())
    h.update(np.asarray(s.ids, np.int32).tobytes())
  return h.hexdigest()[:16]


def plan_shards(seqs: Sequence[Turn], tokens_per_shard: int) -> list[list[int]]:
  """Sequence indices per shard: consecutive runs of about `tokens_per_shard` tokens."""
  shards, cur, n = [], [], 0
  for i, s in enumerate(seqs):
    cur.append(i)
    n += len(s.ids)
    if n >= tokens_per_shard:
      shards.append(cur)
      cur, n = [], 0
  if cur:
    shards.append(cur)
  return shards


@functools.partial(jax.jit, static_argnums=(0,), static_argnames=("taps", "top_k"))
def _score(graphdef, state, tokens, *, taps: tuple[int, ...], top_k: int):
  """tokens i32[R, N] -> features f16[R, N, F], last f16[R, N, D], top ids i32[R, N, J],
  top log-probs f16[R, N, J] (causal: padding after a row's end never reaches it)."""
  model = nnx.merge(graphdef, state)
  r, n = tokens.shape
  cache = KVCache.init(model.cfg, batch=r, capacity=n)
  d = model.cfg.dim
  both, _ = model(tokens, cache, taps=(*taps, model.cfg.num_layers - 1), span=n)
  feats, last = both[..., :-d], both[..., -d:]
  logp = jax.nn.log_softmax(model.logits(last), axis=-1)  # f32[R, N, Vm]
  top_logp, top_ids = jax.lax.top_k(logp, top_k)
  return (feats.astype(jnp.float16), last.astype(jnp.float16), top_ids.astype(jnp.int32),
          top_logp.astype(jnp.float16))


def _bucket(n: int, step: int) -> int:
  return step * -(-n // step)


def score_shard(graphdef, state, seqs: Sequence[Turn], *, taps, top_k: int,
                rows_tokens: int, bucket_step: int, on_batch=None) -> dict[str, np.ndarray]:
  """Scores sequences (any order) -> the shard's concatenated arrays (ARRAYS), in order.

  Sequences are batched by length bucket (a multiple of `bucket_step`), about
  `rows_tokens` tokens per call.
  """
  lengths = [len(s.ids) for s in seqs]
  offsets = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)
  out: dict[str, np.ndarray] = {}
  order = sorted(range(len(seqs)), key=lambda i: lengths[i])
  start = 0
  while start < len(order):
    width = _bucket(lengths[order[start]], bucket_step)
    rows = max(1, rows_tokens // width)
    group = [i for i in order[start:start + rows] if _bucket(lengths[i], bucket_step) == width]
    start += len(group)
    tokens = np.zeros((rows, width), np.int32)
    for r, i in enumerate(group):
      tokens[r, :lengths[i]] = seqs[i].ids
    feats, last, top_ids, top_logp = jax.device_get(
        _score(graphdef, state, jnp.asarray(tokens), taps=tuple(taps), top_k=top_k))
    if not out:
      total = int(offsets[-1])
      out = {"tokens": np.zeros((total,), np.int32),
             "features": np.zeros((total, feats.shape[-1]), np.float16),
             "last": np.zeros((total, last.shape[-1]), np.float16),
             "top_ids": np.zeros((total, top_k), np.int32),
             "top_logp": np.zeros((total, top_k), np.float16)}
    for r, i in enumerate(group):
      a, n = offsets[i], lengths[i]
      out["tokens"][a:a + n] = seqs[i].ids
      out["features"][a:a + n] = feats[r, :n]
      out["last"][a:a + n] = last[r, :n]
      out["top_ids"][a:a + n] = top_ids[r, :n]
      out["top_logp"][a:a + n] = top_logp[r, :n]
    if on_batch is not None:
      on_batch(sum(lengths[i] for i in group))
  return out


def _write_shard(path: Path, arrays: dict[str, np.ndarray], seqs: Sequence[Turn]) -> None:
  path.mkdir(parents=True, exist_ok=True)
  for name in ARRAYS:
    np.save(path / f"{name}.npy", arrays[name])
  index = [{"name": s.name, "family": s.family, "source": s.source, "length": len(s.ids),
            "prompt_len": s.prompt_len} for s in seqs]
  tmp = path / "index.json.tmp"
  tmp.write_text(json.dumps(index))
  tmp.replace(path / "index.json")  # written last: a shard with an index is complete


class ScoredCorpus:
  """A built corpus, memory-mapped: `len(c)` sequences, `c.sequence(i)` their arrays."""

  def __init__(self, directory: Path):
    self.directory = Path(directory)
    manifest = self.directory / "manifest.json"
    if not manifest.is_file():
      raise FileNotFoundError(f"{self.directory} holds no finished scored corpus (no "
                              f"manifest.json); build it with python -m "
                              f"infernix_jax.train.teacher_corpus")
    self.manifest = json.loads(manifest.read_text())
    self.shards, self.index = [], []
    for s, name in enumerate(self.manifest["shards"]):
      path = self.directory / name
      arrays = {a: np.load(path / f"{a}.npy", mmap_mode="r") for a in ARRAYS}
      self.shards.append(arrays)
      offset = 0
      for row in json.loads((path / "index.json").read_text()):
        self.index.append({**row, "shard": s, "offset": offset})
        offset += row["length"]

  def __len__(self) -> int:
    return len(self.index)

  @property
  def tokens(self) -> int:
    return sum(r["length"] for r in self.index)

  def sequence(self, i: int, arrays: Sequence[str] = ARRAYS) -> dict[str, np.ndarray]:
    """The arrays of sequence i (a view of the memory map; copy to keep)."""
    row = self.index[i]
    a, n = row["offset"], row["length"]
    return {k: self.shards[row["shard"]][k][a:a + n] for k in arrays}


def draft_vocabulary(scored: "ScoredCorpus", rows, size: int, vocab_size: int,
                     always=()) -> np.ndarray:
  """The `size` target ids the sequences `rows` use most, sorted: counts of their tokens plus
  the target's most probable next token at each position; `always` ids (EOS) are kept.

  Raises:
    ValueError: size outside [len(always) + 1, vocab_size].
  """
  if not len(always) < size <= vocab_size:
    raise ValueError(f"draft_vocab={size} must be in [{len(always) + 1}, {vocab_size}]")
  counts = np.zeros((vocab_size,), np.int64)
  for i in rows:
    seq = scored.sequence(i, ("tokens", "top_ids"))
    counts += np.bincount(seq["tokens"], minlength=vocab_size)[:vocab_size]
    counts += np.bincount(seq["top_ids"][:, 0], minlength=vocab_size)[:vocab_size]
  counts[list(always)] = counts.max() + 1
  order = np.lexsort((np.arange(vocab_size), -counts))  # most used first, ties to small ids
  return np.sort(order[:size]).astype(np.int32)


class ScoredSampler:
  """Batches from a scored corpus, deterministic in (seed, step)."""

  def __init__(self, scored: "ScoredCorpus", rows, *, seqs: int, anchors: int, seed: int,
               answer_share: float, arrays: Sequence[str], bucket: int = 128):
    unknown = set(arrays) - set(ARRAYS[1:])
    if unknown:
      raise ValueError(f"arrays {sorted(unknown)} are not stored (the corpus has "
                       f"{', '.join(ARRAYS[1:])})")
    self.scored, self.seqs, self.anchors, self.seed = scored, seqs, anchors, seed
    self.arrays = tuple(arrays)
    self.answer_share, self.bucket = answer_share, bucket
    self.buckets: dict[int, list[int]] = {}
    for i in rows:
      row = scored.index[i]
      if row["length"] - row["prompt_len"] >= 1 and row["length"] >= 3:
        self.buckets.setdefault(bucket * -(-row["length"] // bucket), []).append(i)
    if not self.buckets:
      raise ValueError("the scored corpus has no sequence with an answer to train on")
    self.sizes = sorted(self.buckets)
    tokens = np.array([s * len(self.buckets[s]) for s in self.sizes], np.float64)
    self.p = tokens / tokens.sum()  # buckets drawn in proportion to their tokens

  def batch(self, step: int) -> dict[str, np.ndarray]:
    """ids i32[S, N], each asked array [S, N, ...] in its stored dtype, n / p_len i32[S],
    anchors i32[S, A], ok bool[S, A] (anchors whose drafts are answer tokens make up
    `answer_share` of each row's, the rest anywhere before its last token)."""
    rng = np.random.default_rng([self.seed, step])
    size = self.sizes[rng.choice(len(self.sizes), p=self.p)]
    picks = rng.choice(self.buckets[size], size=self.seqs)
    first = self.scored.sequence(int(picks[0]), self.arrays)
    out = {"ids": np.zeros((self.seqs, size), np.int32),
           **{a: np.zeros((self.seqs, size) + first[a].shape[1:], first[a].dtype)
              for a in self.arrays},
           "n": np.zeros((self.seqs,), np.int32), "p_len": np.zeros((self.seqs,), np.int32),
           "anchors": np.zeros((self.seqs, self.anchors), np.int32),
           "ok": np.zeros((self.seqs, self.anchors), bool)}
    for s, i in enumerate(picks):
      seq, row = self.scored.sequence(int(i), ("tokens", *self.arrays)), self.scored.index[int(i)]
      m, p_len = row["length"], row["prompt_len"]
      out["ids"][s, :m] = seq["tokens"]
      for a in self.arrays:
        out[a][s, :m] = seq[a]
      out["n"][s], out["p_len"][s] = m, p_len
      answer = np.arange(max(p_len - 1, 0), m - 1)  # anchors whose drafts are answer tokens
      own = rng.choice(answer, size=min(len(answer), round(self.anchors * self.answer_share)),
                       replace=False)
      rest = np.setdiff1d(np.arange(0, m - 1), own)
      more = rng.choice(rest, size=min(len(rest), self.anchors - len(own)), replace=False)
      take = np.sort(np.concatenate([own, more]).astype(np.int32))
      out["anchors"][s, :len(take)], out["ok"][s, :len(take)] = take, True
    return out


def mix_report(seqs: Sequence[Turn]) -> dict:
  """Sequences, tokens and answer tokens per source."""
  out: dict[str, dict] = {}
  for s in seqs:
    row = out.setdefault(s.source, {"sequences": 0, "tokens": 0, "answer_tokens": 0})
    row["sequences"] += 1
    row["tokens"] += len(s.ids)
    row["answer_tokens"] += len(s.ids) - s.prompt_len
  return out


def build(c, log=sys.stderr) -> ScoredCorpus:
  """Builds (or resumes, or reuses) the scored corpus of config `c` (configs/corpus.py)."""
  from infernix_jax.progress import Progress, format_seconds
  target, model_id = corpus.load_target(c.model or None)
  cfg, tok = target.cfg, target.tokenizer
  taps = tuple(int(t) for t in c.taps) if len(c.taps) else eagle3.default_taps(cfg.num_layers)
  bad = [t for t in taps if not 0 <= t < cfg.num_layers]
  if bad:
    raise ValueError(f"config.taps {bad} are not layer indices of the {cfg.num_layers}-layer "
                     f"target")
  eos = min(target.vocab.eos_ids)
  t0 = time.perf_counter()
  items = sources.items(dict(c.sources), "train")
  seqs, dropped = written_sequences(tok, eos, items, c.max_len)
  self_meta = {}
  if sum(dict(c.self_mix).values()):
    mix = prompts.prompt_mix(dict(c.self_mix), "train")
    if c.self_max_tokens:
      mix = [dataclasses.replace(p, max_tokens=min(p.max_tokens, c.self_max_tokens))
             for p in mix]
    records, self_meta, _ = corpus.build_corpus(
        target, model_id, mix, seed=c.seed, lanes=c.self_lanes,
        root=Path(c.cache_dir) / "distill" if c.cache_dir else None, log=log)
    seqs += self_sequences(records, c.max_len)
  rng = np.random.default_rng(c.seed)
  seqs = [seqs[i] for i in rng.permutation(len(seqs))]  # shards mix every source
  key = corpus_key(model_id, seqs, taps, c.top_k)
  root = Path(c.cache_dir) if c.cache_dir else corpus.cache_root().parent
  directory = root / "scored" / key
  if (directory / "manifest.json").is_file():
    print(f"scored corpus: cached {directory}", file=log, flush=True)
    return ScoredCorpus(directory)
  plan = plan_shards(seqs, c.shard_tokens)
  total = sum(len(s.ids) for s in seqs)
  todo = [k for k in range(len(plan)) if not (directory / f"shard_{k:05d}" / "index.json").is_file()]
  done_tokens = total - sum(len(seqs[i].ids) for k in todo for i in plan[k])
  print(f"scored corpus: {len(seqs)} sequences, {total} tokens in {len(plan)} shards -> "
        f"{directory} ({len(plan) - len(todo)} shards already done)", file=log, flush=True)
  graphdef, state = nnx.split(target.model)
  bar = Progress(total, "scored corpus", stream=log, start=done_tokens)
  scored, t_score = 0, time.perf_counter()

  def on_batch(n):
    nonlocal scored
    scored += n
    bar.update(done_tokens + scored,
               tok_s=scored / max(time.perf_counter() - t_score, 1e-9))

  for k in todo:
    shard = [seqs[i] for i in plan[k]]
    arrays = score_shard(graphdef, state, shard, taps=taps, top_k=c.top_k,
                         rows_tokens=c.rows_tokens, bucket_step=c.bucket_step,
                         on_batch=on_batch)
    _write_shard(directory / f"shard_{k:05d}", arrays, shard)
  bar.close()
  seconds = time.perf_counter() - t_score
  manifest = {"format": FORMAT, "key": key, "model": model_id, "taps": list(taps),
              "dim": cfg.dim, "top_k": c.top_k, "config": json.loads(c.to_json()),
              "sequences": len(seqs), "tokens": total, "dropped_longer_than_max_len": dropped,
              "mix": mix_report(seqs), "self_generation": self_meta,
              "scoring": {"tokens": scored, "seconds": round(seconds, 1),
                          "tokens_per_second": round(scored / max(seconds, 1e-9), 1),
                          "device": jax.devices()[0].device_kind},
              "build_seconds": round(time.perf_counter() - t0, 1),
              "shards": [f"shard_{k:05d}" for k in range(len(plan))]}
  (directory / "manifest.json").write_text(json.dumps(manifest, indent=1) + "\n")
  print(f"scored corpus: {total} tokens, scored at {manifest['scoring']['tokens_per_second']} "
        f"tok/s, built in {format_seconds(manifest['build_seconds'])}", file=log, flush=True)
  return ScoredCorpus(directory)


def main(argv):
  from absl import app
  if len(argv) > 1:
    raise app.UsageError(f"unexpected arguments: {' '.join(argv[1:])}")
  c = build(_CONFIG.value)
  print(f"done: {len(c)} sequences, {c.tokens} tokens in {c.directory}")


if __name__ == "__main__":
  from absl import app, flags
  from ml_collections import config_flags
  _CONFIG = config_flags.DEFINE_config_file("config", None, "corpus config (configs/corpus.py)")
  flags.mark_flags_as_required(["config"])
  app.run(main)
