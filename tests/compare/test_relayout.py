"""relayout: NCHWx / NHWCD4 / CHWN4 tensors back to NCHW, and deciding which layout a dump has.

The packed arrays here are built element by element from the layouts' definitions (not by
inverting the code under test); real dumps of every layout are checked against the plain
run in tests/lar/test_graphopts.py::test_relayout_of_every_layout_kind_on_real_dumps.
"""
from __future__ import annotations

import itertools

import numpy as np
import pytest

from lar_prec.errors import UsageError
from lar_prec.compare.relayout import BLOCK, FORMAT_KIND, candidates, detect, packed_shape, to_nchw, to_plain


def pack(x: np.ndarray, kind: str) -> np.ndarray:
    """Lay out NCHW ``x`` as ``kind`` by the definition of each layout, padding channels with 0."""
    n, c, h, w = x.shape
    k = BLOCK[kind]
    out = np.zeros(packed_shape(kind, x.shape), x.dtype)
    for ni, ci, hi, wi in itertools.product(range(n), range(c), range(h), range(w)):
        blk, lane = divmod(ci, k)
        if kind == "nhwcd4":
            out[ni, hi, blk, wi, lane] = x[ni, ci, hi, wi]
        elif kind == "chwn4":
            out[blk, hi, wi, ni, lane] = x[ni, ci, hi, wi]
        else:
            out[ni, blk, hi, wi, lane] = x[ni, ci, hi, wi]
    return out


@pytest.mark.parametrize("kind", sorted(BLOCK))
@pytest.mark.parametrize("shape", [(1, 16, 5, 3), (2, 6, 4, 4), (1, 3, 2, 7)])
def test_round_trip_with_channel_padding(kind, shape):
    rng = np.random.default_rng(7)
    x = rng.standard_normal(shape).astype(np.float32)
    packed = pack(x, kind)
    back = to_nchw(packed, kind, shape)
    assert back.shape == shape and back.flags.c_contiguous
    np.testing.assert_array_equal(back, x)


def test_shapes_of_each_layout():
    assert packed_shape("nchw4", (1, 16, 32, 32)) == (1, 4, 32, 32, 4)
    assert packed_shape("nchw88", (1, 3, 8, 8)) == (1, 1, 8, 8, 8)
    assert packed_shape("nhwcd4", (1, 16, 32, 32)) == (1, 32, 4, 32, 4)
    assert packed_shape("chwn4", (2, 8, 16, 16)) == (2, 16, 16, 2, 4)
    with pytest.raises(UsageError, match="has shape"):
        to_nchw(np.zeros((1, 4, 8, 8, 4), np.float32), "nchw88", (1, 16, 8, 8))
    with pytest.raises(UsageError, match="4-dim"):
        packed_shape("nchw4", (2, 16))


def test_detect_prefers_format_then_layout_string_then_shape():
    # (1,8,8,8,4) is NCHW4 and NHWCD4 of (1,32,8,8): shapes alone cannot tell
    amb = detect((1, 8, 8, 8, 4), (1, 32, 8, 8))
    assert amb.kind == "ambiguous" and set(amb.candidates) == {"nchw4", "nhwcd4"} and not amb.ok
    assert "format" in amb.reason
    assert detect((1, 8, 8, 8, 4), (1, 32, 8, 8), fmt="NCHW44").kind == "nchw4"
    assert detect((1, 8, 8, 8, 4), (1, 32, 8, 8), fmt="NCHW44").source == "format"
    lay = "{1(2048),8(256),8(32),8(4),4(1) @ I2D{2,1} Float32}"
    assert detect((1, 8, 8, 8, 4), (1, 32, 8, 8), layout=lay).kind == "nhwcd4"
    assert detect((1, 4, 32, 32, 4), (1, 16, 32, 32)).kind == "nchw4"
    assert detect((1, 10), (1, 10)).kind == "nchw"
    assert detect((1, 7), (1, 10)).kind == "unknown"
    # a format that does not fit the shape (a var converted back) falls back to the shapes
    assert detect((1, 4, 32, 32, 4), (1, 16, 32, 32), fmt="NHWCD4").kind == "nchw4"
    assert set(FORMAT_KIND.values()) <= {"nchw", *BLOCK}
    assert candidates((1, 4, 32, 32, 4), (1, 16, 32, 32)) == ("nchw4",)
    x = np.arange(32 * 64, dtype=np.float32).reshape(1, 32, 8, 8)
    back, det = to_plain(pack(x, "nhwcd4"), x.shape, layout=lay)
    np.testing.assert_array_equal(back, x)
    assert to_plain(pack(x, "nhwcd4"), x.shape)[0] is None  # ambiguous: no guess


def test_channels_padded_to_a_multiple_of_4_or_8_come_back_cut():
    """Issue 20 #1: NCHW44 relays some vars back to NCHW with 58 channels padded to 60; that is
    not a shape mismatch: the padding is cut off."""
    import numpy as np

    from lar_prec.compare.relayout import PADDED, detect, to_plain

    plain = np.arange(58 * 4 * 4, dtype=np.float32).reshape(1, 58, 4, 4)
    padded = np.concatenate([plain, np.zeros((1, 2, 4, 4), np.float32)], axis=1)
    assert detect(padded.shape, plain.shape).kind == PADDED
    back, det = to_plain(padded, plain.shape)
    assert det.kind == PADDED and np.array_equal(back, plain)
    assert detect((1, 70, 4, 4), (1, 58, 4, 4)).kind == "unknown"  # 12 more is no padding
