"""What the host hands the device is what the device reads, whatever the host writes later.

On the CPU backend `jax.device_put` of a numpy array, and a jitted call given one, share the
array's memory, and the call runs after it is dispatched. The engine reuses host buffers (a
mask buffer per width), so every upload must be a copy. Oracles: a
snapshot of each uploaded array taken at the upload, compared after the run; greedy decoding
from one whole-sequence forward of the model.
"""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from infernix_jax.models.kv_cache import KVCache
from infernix_jax.runtime import _placement, prefill
from infernix_jax.runtime.drafters import DraftInput
from tests.constrain.conftest import qwen3_vocab  # noqa: F401  (fixture)
from tests.runtime import test_thinking_budget as tb


def aligned(a: np.ndarray) -> np.ndarray:
  """A copy of `a` at a 64-byte aligned address: where XLA's CPU client shares a numpy
  array's memory instead of copying it (numpy's own allocations land there by chance)."""
  raw = np.zeros(a.nbytes + 64, np.uint8)
  offset = -raw.ctypes.data % 64
  out = raw[offset:offset + a.nbytes].view(a.dtype).reshape(a.shape)
  out[...] = a
  return out


def _draft_input(lanes: int) -> DraftInput:
  zeros = np.zeros((lanes,), np.int32)
  return DraftInput(anchor=zeros.copy(), lengths=zeros.copy(), seed=np.uint32(3),
                    position=zeros.copy(), limit=zeros.copy(),
                    forced=np.zeros((lanes, 2), np.int32), n_forced=zeros.copy())


def test_uploads_keep_their_contents_when_the_host_buffer_is_rewritten():
  buf = aligned(np.arange(24, dtype=np.int32).reshape(2, 3, 4))
  lengths = aligned(np.array([5, 7], np.int32))
  mesh_free = _placement.Placement(None, 2)
  for placement in (None, mesh_free):
    mask, lens = _placement.upload((buf, lengths), placement)
    jax.block_until_ready((mask, lens))
    buf_before, lengths_before = buf.copy(), lengths.copy()
    buf[:] = -1
    lengths += 100
    assert np.array_equal(np.asarray(mask), buf_before)
    assert np.array_equal(np.asarray(lens), lengths_before)
    buf[:], lengths[:] = buf_before, lengths_before


def test_host_copies_reaches_arrays_in_tuples_and_package_dataclasses_only():
  inp = _draft_input(2)
  state = nnx.state(tb.tiny_qwen3()[1])
  device = jnp.zeros((2,))
  out = _placement.host_copies((inp, [inp.anchor], state, device, 3))
  copied, (anchor,), state_out, device_out, three = out
  assert state_out is state and device_out is device and three == 3  # not walked or moved
  for field in dataclasses.fields(DraftInput):
    a, b = getattr(inp, field.name), getattr(copied, field.name)
    assert isinstance(b, type(a)) and np.array_equal(a, b)
    if isinstance(a, np.ndarray):
      assert not np.shares_memory(a, b)
  assert not np.shares_memory(anchor, inp.anchor)
  plain = (np.int32(1), jnp.ones(3))
  assert _placement.host_copies(plain) is plain  # nothing to copy: the same object


@pytest.fixture
def recorded_uploads(monkeypatch):
  """(every array the round uploads with a snapshot of its contents at that moment, the
  memory address of the lengths each append to the cache was given)."""
  seen = []
  upload, append = _placement.upload, prefill.append_tokens

  def recording_upload(tree, placement):
    out = upload(tree, placement)
    for leaf in jax.tree.leaves(out):
      seen.append((leaf, np.array(leaf)))
    return out

  def recording_append(graphdef, state, cache, *args, **kw):  # the call donates the cache
    appended.append(cache.lengths.unsafe_buffer_pointer())
    return append(graphdef, state, cache, *args, **kw)
  appended = []
  monkeypatch.setattr(_placement, "upload", recording_upload)
  monkeypatch.setattr(prefill, "append_tokens", recording_append)
  return seen, appended


def _greedy_oracle(prompt, out):
  """Each position's argmax given the output before it, from one forward of the sequence."""
  cfg, model = tb.tiny_qwen3()
  hidden, _ = model(jnp.asarray([prompt + out]), KVCache.init(cfg, 1, 64))
  logits = np.asarray(model.logits(hidden[0]))
  return [int(np.argmax(logits[len(prompt) - 1 + i])) for i in range(len(out))]


def test_round_uploads_and_forced_closes_read_what_the_host_handed_over(qwen3_vocab,  # noqa: F811
                                                                         recorded_uploads,
                                                                         monkeypatch):
  """Masks of every round (one reused buffer per width) still hold, after the run, what
  they held when handed over; forced closes append (at the device state's own lengths); the
  unconstrained lanes' content is greedy."""
  eng = tb.Engine(tb.tiny_qwen3()[1], qwen3_vocab, tb.NGramDrafter(k=tb.K, n=2), lanes=4,
                  capacity=64, cfg=tb.tiny_qwen3()[0])
  host = eng.host  # its buffers where the CPU client would share them
  make_buffer = host._mask_buffer
  monkeypatch.setattr(host, "_mask_buffer", lambda p: host.mask_bufs.setdefault(
      p, aligned(make_buffer(p))))
  budgets = (7, 4, 1, 9)
  requests = [tb.req(tb.THINKING, b, tb.OBJECT if i % 2 else None)
              for i, b in enumerate(budgets)]
  results = tb.generate(eng, requests)
  uploads, appended_lengths = recorded_uploads
  assert len(uploads) > 10 and appended_lengths
  for device_array, snapshot in uploads:
    assert np.array_equal(np.asarray(device_array), snapshot)
  for res, budget, constrained in zip(results, budgets, (False, True, False, True)):
    assert res.thinking_forced_close
    if not constrained:  # after the forced close, content under no rules: greedy
      got = res.token_ids
      assert got[budget + 3:] == _greedy_oracle(tb.THINKING, got)[budget + 3:]
