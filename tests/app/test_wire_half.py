"""Half-precision arrays cross the worker pipe bit for bit (app.wire): bfloat16 by its name
(ml_dtypes' numpy kind is "V", which the wire refuses for every other dtype), float16 as numpy
spells it. A mutation run (docs/testing.md) found the bfloat16 branch held by no in-process test."""

from __future__ import annotations

import json

import ml_dtypes
import numpy as np
import pytest

from tapescope.app.wire import decode_array, encode_array


@pytest.mark.parametrize("dtype", [ml_dtypes.bfloat16, np.float16])
@pytest.mark.parametrize("shape", [(), (3,), (2, 3)])
def test_half_arrays_round_trip_through_json_bit_for_bit(dtype, shape):
    bits = np.arange(int(np.prod(shape)), dtype=np.uint16) * 4099 + 1  # NaNs, subnormals, ±
    a = bits.view(dtype).reshape(shape)
    d = encode_array(a)
    assert set(d) == {"dtype", "shape", "data"} and d["shape"] == list(shape)
    assert d["dtype"] == ("bfloat16" if dtype is ml_dtypes.bfloat16 else np.dtype(dtype).str)
    back = decode_array(json.loads(json.dumps(d)))
    assert back.dtype == np.dtype(dtype) and back.shape == shape
    assert np.array_equal(back.view(np.uint16), a.view(np.uint16))


def test_a_non_contiguous_bfloat16_view_is_sent_in_c_order():
    a = (np.arange(12, dtype=np.uint16) + 16000).view(ml_dtypes.bfloat16).reshape(3, 4).T
    back = decode_array(json.loads(json.dumps(encode_array(a))))
    assert np.array_equal(back.view(np.uint16), np.ascontiguousarray(a).view(np.uint16))


def test_other_void_arrays_are_still_refused():
    with pytest.raises(ValueError, match="numeric dtypes only"):
        encode_array(np.zeros(2, dtype="V2"))
