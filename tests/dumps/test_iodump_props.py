"""Property tests of lar_prec.iodump (hypothesis): the writer and the reader round-trip any
var, the fast title path agrees with the careful parser, and any bytes are either a dump or a
DumpFormatError naming the file. Example-based tests: test_iodump.py.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from fuzz_helpers import read_or_refused
from lar_prec.errors import DumpFormatError
from lar_prec.dumps.dtypes import DTYPES
from lar_prec.dumps.binary import BinaryDump, _name_ids, dump_file_name, read_binary_dump, write_binary_dump
from lar_prec.dumps.titles import VarInfo, contiguous_layout, format_title, parse_title
from test_iodump import _GOOD_FILE, CN, header


# ----------------------------------------------------------------------------- hypothesis

_RT_CODES = sorted(c for c, d in DTYPES.items() if d.storage is not None)
# names: anything printable, including the grammar's own punctuation
_NAME = st.text(
    alphabet=st.one_of(st.sampled_from(list("{}(),:=[] \"'<>@slotidnameowner")), st.characters(blacklist_categories=("Cs",))),
    max_size=24,
)


@st.composite
def _var_infos(draw, vid=None):
    shape = tuple(draw(st.lists(st.integers(1, 4), max_size=7)))
    dtype = DTYPES[draw(st.sampled_from(_RT_CODES))].name
    opr_id = draw(st.integers(0, 10**6))
    owner = draw(_NAME) + f"[{opr_id}]"
    return VarInfo(
        id=draw(st.integers(0, 2**40)) if vid is None else vid,
        name=draw(_NAME),
        owner=owner,
        opr_type=draw(st.sampled_from(["ConvolutionForward", "Elemwise", "ImmutableTensor", "opr::X_1"])),
        opr_id=opr_id,
        dtype=dtype,
        shape=shape,
        layout=contiguous_layout(shape, dtype) if draw(st.booleans()) else None,
        slot=draw(st.integers(0, 3)),
        comp_node=draw(st.sampled_from([CN, 'CompNode("cpu:default" from "cpu:default")', "invalid"])),
        storage=draw(st.sampled_from("sd")),
        shape_infer=draw(st.sampled_from([1, 2, 4, 8])),
        value_infer=draw(st.sampled_from([1, 2, 4, 8])),
    )


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    var=_var_infos(),
    inputs=st.lists(_var_infos(), max_size=4),
    code=st.sampled_from(_RT_CODES),
    k=st.one_of(st.none(), st.integers(0, 12)),
    seed=st.integers(0, 2**32 - 1),
)
def test_writer_reader_round_trip(tmp_path, var, inputs, code, k, seed):
    dt = DTYPES[code]
    size = int(np.prod(var.shape)) if var.shape else 1
    raw = np.random.default_rng(seed).integers(0, 256, size=size * dt.storage.itemsize, dtype=np.uint8)
    if dt.kind == "bool":
        raw &= 1
    values = raw.view(dt.storage).reshape(var.shape)
    title = format_title(var, inputs, input_index=k)
    assert parse_title(title) == (var, tuple(inputs), k)
    name = dump_file_name(var.id if k is None else var.id + 1, k)
    path = write_binary_dump(tmp_path / name, values, title, code)
    d = read_binary_dump(path)
    assert isinstance(d, BinaryDump)
    assert (d.var, d.inputs, d.input_index, d.title) == (var, tuple(inputs), k, title)
    assert d.input_of == (None if k is None else var.id + 1)
    assert (d.dtype, d.shape, d.size) == (dt, var.shape, size)
    if dt.name == "BFloat16":
        back = d.array()
        assert back.dtype == np.float32
        assert (back.view(np.uint32) >> 16).astype(np.uint16).tobytes() == values.tobytes()
    else:
        assert d.array().tobytes() == values.tobytes()
    assert d.array().shape == var.shape
    assert sum(c.size for c in d.chunks(7)) == size


def _careful_parse(title: str):
    """parse_title with the one-match forms turned off: every block read step by step."""
    import lar_prec.dumps.titles as titles

    saved = (titles._VAR, titles._LAST, titles._NEXT, titles._HEAD)
    never = __import__("re").compile(r"(?!)")
    titles._VAR, titles._LAST, titles._NEXT = ((never, p[1]) for p in saved[:3])
    titles._HEAD = never
    try:
        return parse_title(title)
    except DumpFormatError as e:
        return str(e)
    finally:
        titles._VAR, titles._LAST, titles._NEXT, titles._HEAD = saved


def _either(title: str):
    try:
        return parse_title(title)
    except DumpFormatError as e:
        return str(e)


@settings(max_examples=300, deadline=None)
@given(var=_var_infos(), inputs=st.lists(_var_infos(), max_size=4), k=st.one_of(st.none(), st.integers(0, 3)),
       cut=st.integers(0, 400), junk=st.sampled_from(["", ", slot:0, x, s, 4, 1}", " 1={id:5, layout:{2(1) Float32}", "}, name:", "{"]))
def test_fast_title_path_agrees_with_the_careful_parser(var, inputs, k, cut, junk):
    import lar_prec.dumps.titles as iodump

    # awkward names (the grammar's own punctuation) and titles spliced with grammar pieces:
    # the one-match form must give what the steps give, result or error, and the ids-only
    # reading of the inputs what the full one gives
    title = format_title(var, inputs, input_index=k)
    for t in (title, title[:cut] + junk + title[cut:]):
        careful = _careful_parse(t)
        assert _either(t) == careful
        if not isinstance(careful, str):  # the ids alone, as folders read them for ordering
            head = iodump._parse_head(t)
            assert iodump._input_ids_at(t, head[1]) == tuple(v.id for v in careful[1])


def _check_binary_bytes(folder: Path, data: bytes, name: str = "00000b") -> None:
    """The fuzz property: a byte string is a dump (and its values read) or DumpFormatError."""
    d = read_or_refused(read_binary_dump, folder / name, data)
    if d is None:
        return
    assert d.data_offset + d.nbytes == len(data)
    try:
        arr = d.array()
        assert arr.shape == d.shape
        for _ in d.chunks(3):
            pass
    except DumpFormatError:
        assert d.dtype.storage is None




@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.binary(max_size=120))
def test_fuzz_random_bytes(tmp_path, data):
    _check_binary_bytes(tmp_path, data)


@settings(max_examples=1000, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    seed=st.integers(0, 2**32 - 1),
    n_edits=st.integers(0, 6),
    cut=st.one_of(st.none(), st.integers(0, len(_GOOD_FILE))),
    name=st.sampled_from(["00000b", "00000b-inp0", "x.bin", "000007"]),
)
def test_fuzz_mutated_dump(tmp_path, seed, n_edits, cut, name):
    # edits come from a seeded RNG: cheap to generate, so thousands of files stay fast
    rng = np.random.default_rng(seed)
    b = bytearray(_GOOD_FILE)
    for _ in range(n_edits):
        pos = int(rng.integers(0, len(b) + 1))
        op = rng.integers(0, 3)
        if op == 0 and pos < len(b):
            b[pos] = int(rng.integers(0, 256))
        elif op == 1:
            b.insert(pos, int(rng.integers(0, 256)))
        elif pos < len(b):
            del b[pos]
    if cut is not None:
        del b[cut:]
    _check_binary_bytes(tmp_path, bytes(b), name)


_TITLE_PIECES = [b"var=", b"inp0: ", b"{id:11, ", b"layout:{2(3),3(1) Float32}", b"shape:{2,3}", b", Float32, owner:",
                 b"f[1]{Elemwise}", b", name:", b"x", b", slot:0, ", CN.encode(), b", s, 4, 1}", b" owner_opr_inputs=",
                 b"0=", b" 1=", b"{", b"}", b",", b" ", b"\xff", b"\xc3\xa9"]


@settings(max_examples=600, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    pieces=st.lists(st.sampled_from(_TITLE_PIECES), max_size=30),
    code=st.one_of(st.sampled_from(sorted(DTYPES)), st.integers(0, 2**32 - 1)),
    shape=st.lists(st.integers(0, 5), max_size=7),
    max_ndim=st.sampled_from([7, 7, 7, 0, 8]),
    extra=st.integers(-3, 3),
    name=st.sampled_from(["00000b", "00000b-inp0", "x.bin"]),
)
def test_fuzz_structured_dump(tmp_path, pieces, code, shape, max_ndim, extra, name):
    title = b"".join(pieces)
    size = int(np.prod([d for d in shape if d] or [1]))
    dt = DTYPES.get(code)
    nbytes = dt.nbytes(size) if dt else size
    data = header(len(title), code, shape, max_ndim) + title + bytes(max(0, nbytes + extra))
    _check_binary_bytes(tmp_path, data, name)


_NAMES = (st.text(alphabet="0123456789abcdefABCDEFxg_ +-\u00e9\u0663", max_size=12)
          | st.integers(0, 2**40).map(lambda v: f"{v:06x}") | st.integers(0, 2**40).map(lambda v: f"{v:08x}")
          | st.sampled_from(["0x1234", " 12345", "12_345", "+abcdef", "\u0663" * 6, "00000a", "0000000"]))


@settings(max_examples=3000)
@given(name=_NAMES)
def test_a_main_file_name_is_exactly_what_load_and_run_writes(name):
    # the round trip through "%06x": a folder's listing takes only the names load_and_run writes
    try:
        vid = int(name, 16)
        want = (vid, None) if vid >= 0 and dump_file_name(vid) == name else None
    except ValueError:
        want = None
    if "-" not in name:
        assert _name_ids(name) == want
