"""Tests of lar_prec.iodump: the binary dump reader, the writer, titles, dump folders (text
dumps: test_textdump.py; bad input and size scaling of every reader: test_readers.py;
property tests with hypothesis: test_iodump_props.py).

Real dumps come from running the built cases through megenginelite in fresh subprocesses
(marked ``megengine``); hand-made files cover only format corners the real runs cannot make.
"""
from __future__ import annotations

import os
import shutil
import struct
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from lar_prec.errors import DumpFolderError, DumpFormatError, LarPrecError, UsageError
from lar_prec.dumps.dtypes import DTYPES, dtype_by_name
from lar_prec.dumps.titles import HEADER_SIZE, VarInfo, contiguous_layout, format_title, parse_title
from lar_prec.dumps.folder import DumpFolder
from lar_prec.dumps.binary import dump_file_name, read_binary_dump, write_binary_dump
from lar_prec.dumps import binary
from lar_prec.compare.engine import batch
from lar_prec.dumps.textdump import read_text_dump
from test_textdump import _assert_text_matches_binary

# A real title from load_and_run.md 3.4 ([run] on MegEngine 1.13).
REAL_TITLE = (
    'var={id:11, layout:{1(2048),8(256),16(16),16(1) Float32}, Float32, '
    "owner:conv(data,c1.weight)[10]{ConvolutionForward}, name:c1.Convolution, slot:0, "
    'CompNode("cpu0:0" from "cpu0:0"), s, 4, 1} owner_opr_inputs=0={id:7, '
    "layout:{1(768),3(256),16(16),16(1) Float32}, Float32, owner:h2d[6]{Host2DeviceCopy}, "
    'name:data, slot:0, CompNode("cpu0:0" from "cpu0:0"), s, 4, 4} 1={id:9, '
    "layout:{8(27),3(9),3(3),3(1) Float32}, Float32, owner:const{8,3,3,3}[8]{ImmutableTensor}, "
    'name:c1.weight, slot:0, CompNode("cpu0:0" from "cpu0:0"), s, 2, 2}'
)
REAL_INP_TITLE = (
    'inp0: var={id:7, layout:{1(768),3(256),16(16),16(1) Float32}, Float32, '
    "owner:h2d[6]{Host2DeviceCopy}, name:data, slot:0, "
    'CompNode("cpu0:0" from "cpu0:0"), s, 4, 4} owner_opr_inputs='
)
CN = 'CompNode("cpu0:0" from "cpu0:0")'


def make_var(
    vid: int,
    shape: tuple = (2, 3),
    dtype: str = "Float32",
    name: str | None = None,
    owner: str | None = None,
    opr_type: str = "Elemwise",
    layout: bool = True,
) -> VarInfo:
    """A VarInfo like the ones MegEngine writes (contiguous layout, cpu0)."""
    owner = owner if owner is not None else f"opr{vid}[{vid - 1}]"
    return VarInfo(
        id=vid,
        name=name if name is not None else f"v{vid}",
        owner=owner,
        opr_type=opr_type,
        opr_id=vid - 1 if owner.endswith(f"[{vid - 1}]") else None,
        dtype=dtype,
        shape=tuple(shape),
        layout=contiguous_layout(shape, dtype) if layout else None,
        slot=0,
        comp_node=CN,
        storage="s",
    )


def write_var(folder: Path, var: VarInfo, values: np.ndarray, inputs=(), dtype=None) -> Path:
    return write_binary_dump(folder / dump_file_name(var.id), values, format_title(var, inputs), dtype)


def header(name_len: int, code: int, shape=(), max_ndim: int = 7) -> bytes:
    slots = list(shape) + [0] * (7 - len(shape))
    return struct.pack("<10I", name_len, code, max_ndim, *slots)


# a small valid dump file: a base for hand-made broken ones
_GOOD_TITLE = format_title(make_var(11, (2, 3)), [make_var(7, (2, 3)), make_var(9, (3,), name="a,{b}")]).encode()
_GOOD_FILE = header(len(_GOOD_TITLE), 0, (2, 3)) + _GOOD_TITLE + bytes(24)


# ----------------------------------------------------------------------------- titles


def test_parse_real_title():
    var, inputs, k = parse_title(REAL_TITLE)
    assert k is None
    assert (var.id, var.name, var.owner, var.opr_type, var.opr_id) == (
        11, "c1.Convolution", "conv(data,c1.weight)[10]", "ConvolutionForward", 10)
    assert var.shape == (1, 8, 16, 16) and var.dtype == "Float32"
    assert var.layout == "{1(2048),8(256),16(16),16(1) Float32}"
    assert (var.slot, var.comp_node, var.storage, var.shape_infer, var.value_infer) == (0, CN, "s", 4, 1)
    assert [i.id for i in inputs] == [7, 9]
    assert [i.opr_type for i in inputs] == ["Host2DeviceCopy", "ImmutableTensor"]
    assert inputs[1].owner == "const{8,3,3,3}[8]" and inputs[1].shape == (8, 3, 3, 3)
    assert format_title(var, inputs) == REAL_TITLE


def test_parse_real_inp_title():
    var, inputs, k = parse_title(REAL_INP_TITLE)
    assert (var.id, var.name, k, inputs) == (7, "data", 0, ())
    assert format_title(var, inputs, input_index=0) == REAL_INP_TITLE


def test_single_input_has_no_index_and_bin_out_dump_space():
    a, b = make_var(5), make_var(3)
    t = format_title(a, [b])
    assert "owner_opr_inputs={id:3," in t
    assert parse_title(t)[1] == (b,)
    # --bin-out-dump writes "owner_opr_inputs= %s"
    t2 = t.replace("owner_opr_inputs=", "owner_opr_inputs= ")
    assert parse_title(t2)[1] == (b,)
    assert parse_title(format_title(a).replace("owner_opr_inputs=", "owner_opr_inputs= "))[1] == ()


@pytest.mark.parametrize(
    "name",
    [
        "a, b",
        "x{y}, name:z",
        "weird}, slot:3, ",
        "a, slot:1, CompNode(\"q\"), s, 4",
        "名字 ü",
        " lead and trail ",
        "",
        "owner_opr_inputs=",
        "q} owner_opr_inputs=",
    ],
)
def test_names_with_commas_braces_quotes_parse(name):
    v = make_var(12, name=name, owner="f(a,{b})[11]")
    ins = [make_var(3, name=name + "'\""), make_var(4, shape=(1,), name="}{")]
    t = format_title(v, ins)
    var, inputs, _ = parse_title(t)
    assert var == v and inputs == tuple(ins)


def test_shape_titles_and_ids_beyond_six_hex_digits(tmp_path):
    v = make_var(0x1234567, shape=(4,), layout=False)
    assert "shape:{4}" in format_title(v)
    p = write_var(tmp_path, v, np.zeros(4, np.float32))
    assert p.name == "1234567"
    d = read_binary_dump(p)
    assert d.var == v and d.var.layout is None
    assert DumpFolder(tmp_path).ids == (0x1234567,)


def test_format_title_refuses_what_cannot_be_read_back():
    v = make_var(1, opr_type="")  # empty type names (not MegEngine's, but written by tools) read back
    assert parse_title(format_title(v))[0] == v
    for bad in (dict(storage="x"), dict(comp_node="a,b"), dict(dtype="Float 32"), dict(opr_type="a b"), dict(slot=-1)):
        with pytest.raises(UsageError, match="cannot write a title for var 1"):
            format_title(replace(v, **bad))


def test_bad_titles_raise_dump_format_error():
    with pytest.raises(DumpFormatError, match="var="):
        parse_title("garbage")
    with pytest.raises(DumpFormatError, match="slot"):
        parse_title(REAL_TITLE.replace("slot:0", "slot:x"))
    with pytest.raises(DumpFormatError, match=r"input '1="):
        parse_title(REAL_TITLE.replace(" 1={id:9", " 2={id:9"))


# ----------------------------------------------------------------------------- binary files

ROUNDTRIP_DTYPES = ["Float32", "Uint8", "Int8", "Int16", "Int32", "Byte", "Float16", "Bool",
                    "Uint16", "Complex64", "Quantized8Asymm", "QuantizedS32", "QuantizedS8",
                    "QuantizedS16"]


@pytest.mark.parametrize("dtname", ROUNDTRIP_DTYPES)
def test_every_byte_dtype_round_trips(tmp_path, dtname):
    dt = dtype_by_name(dtname)
    rng = np.random.default_rng(dt.code)
    raw = rng.integers(0, 256, size=3 * 5 * dt.storage.itemsize, dtype=np.uint8)
    if dt.kind == "bool":
        raw = raw & 1
    values = raw.view(dt.storage).reshape(3, 5)
    v = make_var(20, shape=(3, 5), dtype=dtname)
    d = read_binary_dump(write_var(tmp_path, v, values, dtype=dt.code))
    assert d.dtype is DTYPES[dt.code] and d.var.dtype == dtname
    assert d.shape == (3, 5) and d.size == 15 and d.nbytes == 15 * dt.storage.itemsize
    arr = d.array()
    assert arr.dtype == dt.value_dtype() and not arr.flags.writeable
    assert arr.tobytes() == values.tobytes()
    assert np.concatenate(list(d.chunks(4))).tobytes() == values.tobytes()


def test_quantized_keep_their_dtype(tmp_path):
    d = read_binary_dump(write_var(tmp_path, make_var(3, (4,), "QuantizedS8"),
                                   np.array([-3, 0, 5, 127], np.int8), dtype="QuantizedS8"))
    assert d.dtype.is_quantized and d.dtype.kind == "quantized"
    assert d.array().tolist() == [-3, 0, 5, 127]


def test_bfloat16_is_widened_to_float32(tmp_path):
    x = np.array([1.0, -2.5, 3.140625, np.inf, 1e-3], np.float32)
    d = read_binary_dump(write_var(tmp_path, make_var(9, (5,), "BFloat16"), x, dtype="BFloat16"))
    assert d.nbytes == 10 and d.dtype.storage == np.uint16
    a = d.array()
    assert a.dtype == np.float32
    assert a[:4].tolist() == [1.0, -2.5, 3.140625, np.inf]
    assert abs(a[4] - 1e-3) < 1e-5  # rounded to 8 mantissa bits
    assert np.concatenate(list(d.chunks(2))).tolist() == a.tolist()


def test_zero_d_scalar(tmp_path):
    d = read_binary_dump(write_var(tmp_path, make_var(2, ()), np.float32(7.5)))
    assert d.shape == () and d.size == 1 and d.array().shape == () and float(d.array()) == 7.5
    with open(d.path, "rb") as f:
        assert struct.unpack("<10I", f.read(40))[3:] == (0,) * 7


def test_lowbit_header_reads_but_values_refuse(tmp_path):
    v = make_var(4, (5,), "QuantizedS4")
    p = write_binary_dump(tmp_path / "000004", np.array([0x21, 0x43, 0x05], np.uint8),
                          format_title(v), "QuantizedS4", shape=(5,))
    d = read_binary_dump(p)
    assert d.nbytes == 3 and d.dtype.storage is None and d.dtype.is_quantized
    with pytest.raises(DumpFormatError, match="QuantizedS4"):
        d.array()
    with pytest.raises(DumpFormatError, match="QuantizedS4"):
        next(d.chunks())


def test_non_ascii_and_invalid_utf8_names(tmp_path):
    v = make_var(5, name="权重/β")
    d = read_binary_dump(write_var(tmp_path, v, np.zeros((2, 3), np.float32)))
    assert d.var.name == "权重/β"
    # bytes that are not UTF-8 are replaced, not fatal
    title = format_title(make_var(6, name="XX")).encode().replace(b"XX", b"\xff\xfe")
    p = tmp_path / "000006"
    p.write_bytes(header(len(title), 0, (2, 3)) + title + bytes(24))
    assert read_binary_dump(p).var.name == "\ufffd\ufffd"


def test_large_values_are_memory_mapped_small_ones_read_at_once_both_read_only(tmp_path):
    n = binary.READ_AT_ONCE // 4 + 1  # one float32 over the limit
    big = read_binary_dump(write_var(tmp_path, make_var(8, (n,)), np.arange(n, dtype=np.float32))).array()
    assert isinstance(big, np.memmap) or isinstance(big.base, np.memmap)
    small = read_binary_dump(write_var(tmp_path, make_var(9, (2, 500)), np.arange(1000, dtype=np.float32).reshape(2, 500))).array()
    assert not isinstance(small, np.memmap) and not isinstance(small.base, np.memmap)
    for a, want in ((big, np.arange(n, dtype=np.float32)), (small, np.arange(1000, dtype=np.float32).reshape(2, 500))):
        assert np.array_equal(a, want) and a.dtype == np.float32 and not a.flags.writeable
        with pytest.raises(ValueError):
            a[0] = 1


def test_a_small_dump_cut_after_its_header_was_read_is_a_format_error(tmp_path):
    p = write_var(tmp_path, make_var(10, (100,)), np.arange(100, dtype=np.float32))
    d = read_binary_dump(p)
    p.write_bytes(p.read_bytes()[:-8])
    with pytest.raises(DumpFormatError) as ei:
        d.array()
    assert ei.value.path == p and "400 data bytes" in str(ei.value)


def _bad(tmp_path, data: bytes, name: str = "00000b") -> DumpFormatError:
    p = tmp_path / name
    p.write_bytes(data)
    with pytest.raises(DumpFormatError) as ei:
        read_binary_dump(p)
    assert ei.value.path == p
    return ei.value


def test_bad_files(tmp_path):
    title = format_title(make_var(11, (2, 3))).encode()
    good = header(len(title), 0, (2, 3)) + title + bytes(24)
    (tmp_path / "00000b").write_bytes(good)
    assert read_binary_dump(tmp_path / "00000b").shape == (2, 3)

    e = _bad(tmp_path, b"")
    assert e.offset == 0 and "empty file" in str(e)
    e = _bad(tmp_path, good[:17])
    assert e.offset == 17 and "40-byte dump header" in str(e) and "truncated" in str(e)
    e = _bad(tmp_path, good[:60])
    assert e.offset == HEADER_SIZE and f"title of {len(title)} bytes" in str(e)
    e = _bad(tmp_path, good[:-1])
    assert e.offset == HEADER_SIZE + len(title) and "24 data bytes" in str(e) and "found 23 bytes" in str(e)
    e = _bad(tmp_path, good + b"\0")
    assert "found 25 bytes" in str(e)
    e = _bad(tmp_path, header(len(title), 77, (2, 3)) + title + bytes(24))
    assert e.offset == 4 and "unknown dtype code 77" in str(e) and "100002" in str(e)
    e = _bad(tmp_path, header(len(title), 0, (2, 3), max_ndim=4) + title + bytes(24))
    assert e.offset == 8 and "max_ndim = 7" in str(e)
    e = _bad(tmp_path, header(len(title), 0, (2, 0, 3)) + title + bytes(24))
    assert e.offset == 16 and "after the first 0" in str(e)
    # the id in the name must agree with the title
    e = _bad(tmp_path, good, name="00000c")
    assert "var id 12" in str(e)
    e = _bad(tmp_path, good, name="00000b-inp1")
    assert "inp1: " in str(e)
    assert isinstance(e, LarPrecError) and isinstance(e, ValueError)


def test_dtype_table_and_usage_errors(tmp_path):
    assert sorted(DTYPES) == [*range(15), *range(100000, 100007)]
    assert dtype_by_name("quantizeds8") is DTYPES[100002] and DTYPES[11].value_dtype() == np.float32
    assert DTYPES[8].kind == "byte" and DTYPES[12].storage == np.bool_ and DTYPES[100003].bits == 4
    with pytest.raises(UsageError, match="Float32"):
        dtype_by_name("Float64")
    with pytest.raises(UsageError, match="sub-byte"):
        DTYPES[7].value_dtype()
    d = read_binary_dump(write_var(tmp_path, make_var(1, (3,)), np.zeros(3, np.float32)))
    with pytest.raises(UsageError, match="chunk size"):
        next(d.chunks(0))
    assert d.id == 1


def test_writer_refuses_what_the_format_cannot_hold(tmp_path):
    t = format_title(make_var(1))
    with pytest.raises(UsageError, match="zero-size"):
        write_binary_dump(tmp_path / "x", np.zeros((2, 0), np.float32), t)
    with pytest.raises(UsageError, match="float64"):
        write_binary_dump(tmp_path / "x", np.zeros(2), t)
    with pytest.raises(UsageError, match="at most 7"):
        write_binary_dump(tmp_path / "x", np.zeros((1,) * 8, np.float32), t)
    with pytest.raises(UsageError, match="unknown dtype"):
        write_binary_dump(tmp_path / "x", np.zeros(2, np.float32), t, "Float64")


# ----------------------------------------------------------------------------- folders


def test_folder_order_inputs_and_strays(tmp_path):
    # diamond 2 -> {10, 5} -> 7 plus an independent 3; ids deliberately not in exec order
    v2, v10, v5, v7, v3 = (make_var(i) for i in (2, 10, 5, 7, 3))
    z = np.zeros((2, 3), np.float32)
    write_var(tmp_path, v2, z)
    write_var(tmp_path, v10, z, [v2])
    write_var(tmp_path, v5, z, [v2])
    write_var(tmp_path, v7, z, [v10, v5, make_var(99)])
    write_var(tmp_path, v3, z)
    write_binary_dump(tmp_path / "000007-inp0", z, format_title(v10, [v2], input_index=0))
    (tmp_path / "run.json").write_text("{}")
    (tmp_path / "notes.txt").write_text("x")
    (tmp_path / "00000A").write_bytes(b"")   # upper case: not a load_and_run name
    (tmp_path / "0000007").write_bytes(b"")  # 7 digits for a small id: not a load_and_run name
    (tmp_path / "sub").mkdir()
    (tmp_path / ".incomplete").write_text("")
    f = DumpFolder(tmp_path)
    assert len(f) == 5 and 7 in f and 99 not in f
    assert f.ids == (2, 3, 5, 10, 7)
    assert [d.var.id for d in f] == list(f.ids)
    assert f.inputs_of(7) == (10, 5, 99)
    assert f.var_info(99).name == "v99"
    assert f.input_files == {(7, 0): tmp_path / "000007-inp0"}
    d = f.input_dump(7, 0)
    assert (d.input_of, d.input_index, d.var.id) == (7, 0, 10)
    assert sorted(p.name for p in f.stray) == ["0000007", "00000A", "notes.txt", "run.json", "sub"]
    assert f.incomplete
    with pytest.raises(KeyError, match="var 4"):
        f[4]


def test_folder_is_lazy(tmp_path):
    write_var(tmp_path, make_var(1), np.zeros((2, 3), np.float32))
    (tmp_path / "000002").write_bytes(b"broken")
    f = DumpFolder(tmp_path)  # listing only: the broken file is not read yet
    assert f[1].var.id == 1
    with pytest.raises(DumpFormatError, match="000002"):
        f[2]


def test_folder_skip_bad(tmp_path):
    write_var(tmp_path, make_var(1), np.zeros((2, 3), np.float32))
    write_var(tmp_path, make_var(3), np.zeros((2, 3), np.float32), [make_var(1), make_var(2)])
    (tmp_path / "000002").write_bytes(_GOOD_FILE[:30])  # a dump cut while being written
    with pytest.raises(DumpFormatError, match="000002"):
        DumpFolder(tmp_path).ids
    f = DumpFolder(tmp_path, skip_bad=True)
    assert f.ids == (1, 3) and 2 not in f and len(f) == 2
    assert list(f.bad) == [tmp_path / "000002"] and "truncated" in str(f.bad[tmp_path / "000002"])
    assert f.var_info(2).name == "v2"  # still known from var 3's title


def test_folder_errors(tmp_path):
    with pytest.raises(DumpFolderError, match="does not exist"):
        DumpFolder(tmp_path / "nope")
    (tmp_path / "file").write_text("")
    with pytest.raises(DumpFolderError, match="not a directory"):
        DumpFolder(tmp_path / "file")


# ----------------------------------------------------------------------------- real dumps
# Real runs of the built cases (bundled load_and_run on megenginelite, fresh processes; the
# ``lar_dump`` and ``manifest`` fixtures live in conftest.py and cache runs per session).

DUMP_INPUT = {"MGB_DUMP_INPUT": "1"}



def _listing(f: DumpFolder):
    return f._files, f.input_files, f.stray, f.incomplete


@pytest.mark.megengine
def test_kernel_listing_is_the_folder_listing(lar_dump, tmp_path):
    """The compare engine's C listing (DumpFolder's lister) gives what the folder's own gives:
    on a real run's folder with its -inp files, and with every corner of a name added."""
    if batch.list_folder(str(tmp_path)) is None:
        pytest.skip("the C kernel is not built")
    real = lar_dump("cnn", "naive", env=DUMP_INPUT)
    fast = DumpFolder(real, lister=batch.list_folder)
    assert _listing(fast) == _listing(DumpFolder(real)) and fast.input_files and len(fast) >= 15
    d = tmp_path / "d"
    shutil.copytree(real, d)
    (d / "1000000000000000").write_bytes(b"")  # 16 hex digits: beyond the kernel's 15, the folder reads it
    (d / "00000A").write_bytes(b"")  # upper case
    (d / "0000007").write_bytes(b"")  # a zero before a seventh digit
    (d / "00abc").write_bytes(b"")  # five digits
    (d / "abcdef").mkdir()  # a directory under a dump's name: stray
    os.mkfifo(d / "abcdee")  # neither file nor directory: stray
    (d / ".incomplete").write_text("")
    (d / "run.json").write_text("{}")
    assert batch.list_folder(str(d)) is not None
    fast = DumpFolder(d, lister=batch.list_folder)
    assert _listing(fast) == _listing(DumpFolder(d))
    assert fast.incomplete and 1 << 60 in fast and 0xabcdef not in fast
    assert {p.name for p in fast.stray} == {"00000A", "0000007", "00abc", "abcdef", "abcdee", "run.json"}
    # a symlink needs a stat per entry: the folder lists such a directory itself
    first = sorted(p for p in real.iterdir() if "-" not in p.name)[0]
    (d / "fffff0").symlink_to(first)
    assert batch.list_folder(str(d)) is None
    assert _listing(DumpFolder(d, lister=batch.list_folder)) == _listing(DumpFolder(d)) and 0xfffff0 in DumpFolder(d)


def _assert_topological(folder: DumpFolder) -> None:
    pos = {v: i for i, v in enumerate(folder.ids)}
    assert sorted(pos) == sorted(folder.paths())
    for v in folder.ids:
        for u in folder.inputs_of(v):
            if u in pos:
                assert pos[u] < pos[v], (u, v)



@pytest.mark.megengine
def test_real_binary_folder_with_input_dumps(lar_dump, manifest):
    f = DumpFolder(lar_dump("cnn", "naive", env=DUMP_INPUT))
    assert len(f) >= 15 and f.stray == () and not f.incomplete
    _assert_topological(f)
    types = {d.var.opr_type for d in f}
    assert {"Host2DeviceCopy", "ImmutableTensor", "ConvolutionForward", "SoftmaxForward"} <= types
    for d in f:
        assert d.shape == d.var.shape and d.dtype.name == d.var.dtype == "Float32"
        assert d.input_index is None and d.input_of is None and d.var.layout is not None
        assert d.var.comp_node.startswith("CompNode(") and d.var.storage in "sd"
        for i in d.inputs:  # inputs in the title agree with their own dumps
            if i.id in f:
                assert (f[i.id].var.name, f[i.id].shape) == (i.name, i.shape)
    (h2d,) = [d for d in f if d.var.opr_type == "Host2DeviceCopy"]
    np.testing.assert_array_equal(h2d.array(), np.load(dict(manifest["cnn"].inputs)["data"]))
    out = f[f.ids[-1]]
    assert out.var.opr_type == "SoftmaxForward"
    assert np.allclose(out.array().sum(axis=-1), 1.0, atol=1e-5)
    assert len(f.input_files) >= 10
    for (o, k) in f.input_files:
        di = f.input_dump(o, k)
        assert (di.input_of, di.input_index) == (o, k)
        assert di.var.id == f.inputs_of(o)[k]
        if di.var.id in f:
            main = f[di.var.id]
            assert (di.var, di.inputs, di.shape) == (main.var, main.inputs, main.shape)
            if main.var.opr_type in ("ImmutableTensor", "Host2DeviceCopy"):
                np.testing.assert_array_equal(di.array(), main.array())


@pytest.mark.megengine
def test_real_naive_and_default_have_the_same_structure(lar_dump):
    naive = DumpFolder(lar_dump("cnn", "naive", env=DUMP_INPUT))
    default = DumpFolder(lar_dump("cnn", "default"))
    assert naive.ids == default.ids and default.input_files == {}
    for a, b in zip(naive, default):
        assert (a.var, a.inputs) == (b.var, b.inputs)
        if a.var.opr_type == "ImmutableTensor":
            assert a.array().tobytes() == b.array().tobytes()
        else:
            np.testing.assert_allclose(a.array(), b.array(), rtol=1e-4, atol=1e-5)


@pytest.mark.megengine
def test_real_quantized_dump_keeps_raw_integers(lar_dump):
    f = DumpFolder(lar_dump("quantized", "default"))
    _assert_topological(f)
    q = [d for d in f if d.dtype.is_quantized]
    assert {d.dtype.name for d in q} >= {"QuantizedS8", "QuantizedS32"}
    for d in q:
        assert d.var.dtype == d.dtype.name
        assert d.array().dtype == {"QuantizedS8": np.int8, "QuantizedS32": np.int32}[d.dtype.name]
    _assert_text_matches_binary(read_text_dump(lar_dump("quantized", "default", text=True)), f)


@pytest.mark.megengine
@pytest.mark.parametrize("case,dtypes", [("int_ops", {"Int32", "Bool"}), ("fp16", {"Float16"})])
def test_real_integer_bool_and_half_dumps(lar_dump, manifest, case, dtypes):
    f = DumpFolder(lar_dump(case, "naive", env=DUMP_INPUT))
    _assert_topological(f)
    assert {d.dtype.name for d in f} == dtypes
    for d in f:
        assert d.array().dtype == d.dtype.value_dtype()
        if d.dtype.name == "Bool":
            assert set(np.unique(d.array().view(np.uint8))) <= {0, 1}
    inputs = dict(manifest[case].inputs)
    for d in f:
        if d.var.opr_type == "Host2DeviceCopy":
            np.testing.assert_array_equal(d.array(), np.load(inputs[d.var.name]))
    _assert_text_matches_binary(read_text_dump(lar_dump(case, "naive", text=True)), f)


@pytest.fixture(scope="session")
def crashed_bn_run(manifest, tmp_path_factory):
    """The bn_unfused case: its zero-size Byte var makes both dumps fail mid-run (3.5)."""
    case = manifest["bn_unfused"]
    out = tmp_path_factory.mktemp("crashed")
    runs = {}
    for kind in ("txt", "bin"):
        dest = out / ("io.txt" if kind == "txt" else "bin")
        argv = [sys.executable, "-m", "lar_prec.lar", str(case.model), "--input", ";".join(case.input_specs()),
                "--iter", "1", "--warmup-iter", "0", "--io-dump" if kind == "txt" else "--bin-io-dump", str(dest)]
        if kind == "bin":
            dest.mkdir()
        proc = subprocess.run(argv, capture_output=True, text=True, timeout=300,
                              cwd=Path(__file__).resolve().parents[2])
        runs[kind] = (dest, proc)
    return runs


@pytest.mark.megengine
def test_real_crashed_text_dump_parses_up_to_the_cut(crashed_bn_run):
    path, proc = crashed_bn_run["txt"]
    assert proc.returncode != 0 and "Byte" in proc.stderr
    td = read_text_dump(path)
    assert td.truncated is not None and "value line of var" in td.truncated and "cut off" in td.truncated
    vars_ = td.executions[-1]
    assert vars_[-1].dtype == "Byte" and vars_[-1].shape == (0,) and vars_[-1].val is None
    assert vars_[-1].opr_type == "BatchNormForward" and len(vars_[-1].deps) >= 3
    assert all(v.val is not None for v in vars_[:-1]) and len(vars_) >= 5


@pytest.mark.megengine
def test_real_crashed_binary_dump_keeps_what_was_written(crashed_bn_run):
    path, proc = crashed_bn_run["bin"]
    assert proc.returncode != 0
    f = DumpFolder(path)
    assert len(f) >= 3
    _assert_topological(f)
    for d in f:
        assert d.array().size == d.size


@pytest.mark.megengine
def test_real_resnet_reads_every_dump(lar_dump):
    f = DumpFolder(lar_dump("resnet", "naive", env=DUMP_INPUT))
    assert len(f) >= 30 and len(f.input_files) >= 30
    _assert_topological(f)
    total = 0
    for d in f:  # streaming in chunks and the whole-array view see the same values
        s = sum(float(c.astype(np.float64).sum()) for c in d.chunks(1000))
        assert np.isclose(s, float(d.array().astype(np.float64).sum()), rtol=1e-9, atol=1e-9)
        total += d.size
    for o, k in f.input_files:
        assert f.input_dump(o, k).array().size > 0
    assert total > 10_000
    _assert_text_matches_binary(read_text_dump(lar_dump("resnet", "naive", text=True)), f)
