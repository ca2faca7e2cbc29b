"""The vLLM-style request fields: validation (errors name the field) and the min_tokens mask."""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np
import pytest

from infernix_jax import constrain as ic
from infernix_jax import mask_layout
from infernix_jax.errors import ParameterError, RequestConflictError
from infernix_jax.runtime import _min_tokens
from infernix_jax.runtime.types import GenerationRequest, SamplingOptions

CHOICE = ic.OutputConstraint.choice(["ab", "c"])


@pytest.mark.parametrize("fields,param,message", [
    (dict(sampling=SamplingOptions(repetition_penalty=0.0)), "repetition_penalty", "> 0"),
    (dict(sampling=SamplingOptions(repetition_penalty=float("inf"))), "repetition_penalty",
     "finite"),
    (dict(sampling=SamplingOptions(repetition_penalty="2")), "repetition_penalty", "number"),
    (dict(sampling=SamplingOptions(temperature=float("inf"))), "temperature",
     r"temperature=inf must be a finite number >= 0"),
    (dict(sampling=SamplingOptions(temperature=float("nan"))), "temperature",
     r"temperature=nan must be a finite number >= 0"),
    (dict(sampling=SamplingOptions(temperature=-0.5)), "temperature", "finite number >= 0"),
    (dict(stop=("",)), "stop", "non-empty strings, got ''"),
    (dict(stop=("x", "")), "stop", "non-empty strings, got ''"),
    (dict(stop=(3,)), "stop", "non-empty strings, got 3"),
    (dict(min_tokens=-1), "min_tokens", r"\[0, max_tokens=8\]"),
    (dict(min_tokens=9), "min_tokens", r"\[0, max_tokens=8\]"),
    (dict(min_tokens=True), "min_tokens", "integer"),
    (dict(ignore_eos=1), "ignore_eos", "true or false"),
    (dict(ignore_eos=True, constraint=CHOICE), "ignore_eos", "constraint or tools"),
    (dict(logprobs=21), "logprobs", r"\[0, 20\]"),
    (dict(logprobs=-1), "logprobs", r"\[0, 20\]"),
    (dict(logprobs=2.0), "logprobs", "integer"),
    (dict(min_tokens=2, constraint=CHOICE, sampling_law="onestep"), "sampling_law",
     "min_tokens"),
    (dict(constraint=CHOICE, sampling_law="onestep",
          sampling=SamplingOptions(repetition_penalty=1.2)), "sampling_law",
     "repetition_penalty"),
])
def test_invalid_fields_name_themselves(fields, param, message):
  request = GenerationRequest([1, 2], max_tokens=8, **fields)
  with pytest.raises(ParameterError, match=message) as err:
    request.validate()
  assert err.value.param == param
  if fields.get("ignore_eos") is True:
    assert isinstance(err.value, RequestConflictError)


def test_valid_fields_pass():
  GenerationRequest([1], max_tokens=4, min_tokens=4, ignore_eos=True, logprobs=20,
                    sampling=SamplingOptions(repetition_penalty=0.5)).validate()
  GenerationRequest([1], max_tokens=4, min_tokens=2, logprobs=0, constraint=CHOICE).validate()


def test_min_tokens_mask_clears_eos_unless_it_is_the_only_legal_token():
  """Lane 0 (constrained): EOS cleared at positions < 2, kept where the grammar allows EOS
  alone (position 1) and at position 2; lane 1 (unconstrained, no mask yet): enabled with
  every id < V but EOS; lane 2: no ban, unchanged."""
  v, eos = 40, (0, 33)
  legal = np.zeros((3, 3, v), bool)
  legal[0, 0, [0, 5, 33]] = True
  legal[0, 1, [0]] = True
  legal[0, 2, [0, 7]] = True
  legal[2, :, 3] = True
  mask = jnp.asarray(mask_layout.pack(legal))
  states = jnp.zeros((3, 3), jnp.int8).at[1].set(mask_layout.UNREACHABLE)
  enabled = jnp.asarray([True, False, True])
  out, st, on = _min_tokens.apply(mask, states, enabled, jnp.asarray([2, 3, 0]), positions=3,
                                  vocab_size=v, eos_ids=eos)
  got = mask_layout.unpack(np.asarray(out), v)
  assert list(np.flatnonzero(got[0, 0])) == [5]
  assert list(np.flatnonzero(got[0, 1])) == [0]             # EOS alone: the grammar decides
  assert list(np.flatnonzero(got[0, 2])) == [0, 7]          # past min_tokens
  assert got[1].sum(-1).tolist() == [v - 2] * 3 and not got[1][:, list(eos)].any()
  np.testing.assert_array_equal(got[2], legal[2])
  assert np.asarray(on).tolist() == [True, True, True]
  assert np.asarray(st)[1].tolist() == [mask_layout.READY] * 3
  none = _min_tokens.apply(None, None, None, jnp.asarray([0, 1, 0]), positions=2,
                           vocab_size=v, eos_ids=eos)
  assert np.asarray(none[2]).tolist() == [False, True, False]
  assert mask_layout.unpack(np.asarray(none[0]), v)[1, 1].sum() == v  # position 1: free
