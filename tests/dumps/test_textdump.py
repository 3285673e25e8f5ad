"""Tests of lar_prec.dumps.textdump: the ``--io-dump`` text reader on hand-made corners, fuzzed
bytes and real dumps of the built cases (which must agree with the binary dumps of the same
run)."""
from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from fuzz_helpers import fuzz_lines, mutated
from lar_prec.errors import DumpFormatError
from lar_prec.dumps.folder import DumpFolder
from lar_prec.dumps.textdump import read_text_dump

DUMP_INPUT = {"MGB_DUMP_INPUT": "1"}


# ----------------------------------------------------------------------------- text dumps

TEXT_EXEC = """\
var3 produced: name=x, {y} layout={2(1) Float32} owner_opr=f(a,b)[2]{Elemwise} opr2
 deps:
  var1:  <dev comp order> s
  [i0]var5:  <shape dep[s]> {2} d
  [i1]var6:  <host value[d]> [2] s
  [i2]var7: <invalid> s
  [i3]var8: [1, 2] s
 val: [1, 2]min=1 max=2 mean=1.5 l2=1.58 sd=0.707 s
var4 produced: name=inv layout=<invalid> owner_opr=g[3]{Foo} opr3
var8 produced: name=one layout={1(1) Float16} owner_opr=const{1}[7]{ImmutableTensor} opr7
 deps:
 val: [2]min=2 max=2 mean=2 l2=2 sd=N/A s
var9 produced: name=Subtensor layout={1(0),0(1) Float32} owner_opr=subtensor(data)[6]{Subtensor} opr6
 deps:
 val: []min=3.4e+38 max=-3.4e+38 mean=-nan l2=-nan sd=N/A s
var11 produced: name=c1 layout={1(6),6(1) Float32} owner_opr=conv(data,c1.weight)[10]{ConvolutionForward} opr10
 deps:
  [i0]var9: [0.2113, 0.4514, 0.8303, 0.1285, 0.4549, ...] s
 val: [0.02368, -inf, nan, 1e+10, -0.008106, ...]min=-2.14 max=1.36 mean=-0.45 l2=0.809 sd=0.673 d
"""


def test_text_dump_all_line_kinds(tmp_path):
    p = tmp_path / "io.txt"
    p.write_text(TEXT_EXEC + TEXT_EXEC.replace("mean=1.5", "mean=1.25"))
    td = read_text_dump(p)
    assert td.truncated is None and not td.lazy
    assert [[v.id for v in ex] for ex in td.executions] == [[3, 4, 8, 9, 11]] * 2
    assert td.order == (3, 4, 8, 9, 11)
    last = td.last()
    assert last[3].val.mean == 1.25 and td.execution(0)[3].val.mean == 1.5
    v3 = last[3]
    assert (v3.name, v3.owner, v3.opr_type, v3.opr_id, v3.dtype, v3.shape) == (
        "x, {y}", "f(a,b)[2]", "Elemwise", 2, "Float32", (2,))
    assert [(d.var_id, d.input_index, d.kind, d.text, d.storage, d.flag) for d in v3.deps] == [
        (1, None, "dev_comp_order", "", "s", None),
        (5, 0, "shape", "{2}", "d", "s"),
        (6, 1, "host_value", "[2]", "s", "d"),
        (7, 2, "value", "<invalid>", "s", None),
        (8, 3, "value", "[1, 2]", "s", None),
    ]
    assert td.inputs_of(3) == (5, 6, 7, 8)
    assert (1, 3, "dev_comp_order") in td.edges() and (5, 3, "shape") in td.edges()
    assert v3.val.head == (1.0, 2.0) and not v3.val.more and v3.val.sd == pytest.approx(0.707)
    assert last[4].layout is None and last[4].val is None and last[4].deps == () and last[4].shape is None
    assert last[8].val.sd is None and last[8].dtype == "Float16"
    v9 = last[9]
    assert v9.shape == (1, 0) and v9.val.head == () and np.isnan(v9.val.mean) and v9.val.sd is None
    v11 = last[11]
    assert v11.val.more and v11.storage == "d" and v11.line == 35
    assert v11.val.head[1] == -np.inf and np.isnan(v11.val.head[2]) and v11.val.head[3] == 1e10


def test_text_dump_cut_off_mid_line(tmp_path):
    p = tmp_path / "io.txt"
    cut = TEXT_EXEC.index(" val: [0.02368")
    p.write_text(TEXT_EXEC[: cut + len(" val: ")])  # what a failing print_host_val leaves
    td = read_text_dump(p)
    assert td.truncated.startswith("line 19: value line of var11 cut off")
    assert [v.id for v in td.executions[-1]] == [3, 4, 8, 9, 11]
    assert td.last()[11].val is None and td.last()[11].deps[0].var_id == 9
    assert td.last()[9].val is not None


def test_text_dump_cut_off_between_lines(tmp_path):
    p = tmp_path / "io.txt"
    p.write_text(TEXT_EXEC.split(" val: [1, 2]")[0])
    td = read_text_dump(p)
    assert "file ended inside the block of var3" in td.truncated
    assert td.last()[3].val is None and len(td.last()[3].deps) == 5


def test_text_dump_bad_line_names_the_line(tmp_path):
    p = tmp_path / "io.txt"
    lines = TEXT_EXEC.splitlines(keepends=True)
    lines.insert(4, "hello world\n")
    p.write_text("".join(lines))
    with pytest.raises(DumpFormatError, match=r"line 5") as ei:
        read_text_dump(p)
    assert ei.value.offset == len("".join(lines[:4]).encode())
    p.write_text(TEXT_EXEC.replace("min=1 max=2", "min=1 max=?"))
    with pytest.raises(DumpFormatError, match="line 8"):
        read_text_dump(p)


def test_text_dump_empty_file(tmp_path):
    p = tmp_path / "io.txt"
    p.write_text("")
    td = read_text_dump(p)
    assert td.executions == () and td.truncated is None and td.last() == {} and td.order == ()
    with pytest.raises(DumpFormatError, match="readable"):
        read_text_dump(tmp_path / "missing.txt")


LAZY = """\
==== begin lazy value recording
var45 produced: name=fc.weight layout={10(1024),1024(1) Float32} owner_opr=const{10,1024}[44]{ImmutableTensor} opr44
 deps:
 val: <see lazy value below> s
var46 produced: name=y [odd] layout={10(1) Float32} owner_opr=f(fc.weight)[45]{Elemwise} opr45
 deps:
  [i0]var45: <see lazy value below> s
 val: <see lazy value below> s
"""
LAZY_VALUES = """\
==== recorded values
#0: opr44 const{10,1024}[44]{ImmutableTensor}
  var45: name=fc.weight [0.02935, 0.08677, 0.03806, -0.008629, -0.0123, ...]min=-0.114 max=0.127 mean=-0.000642 l2=0.0316 sd=0.0316
#1: opr45 f(fc.weight)[45]{Elemwise}
  var46: name=y [odd] [1]min=1 max=1 mean=1 l2=1 sd=N/A
"""


def test_text_dump_lazy(tmp_path):
    p = tmp_path / "io.txt"
    p.write_text(LAZY + LAZY_VALUES)
    td = read_text_dump(p)
    assert td.lazy and td.truncated is None and len(td.executions) == 1
    last = td.last()
    assert last[45].val.min == -0.114 and last[45].val.more
    assert last[46].name == "y [odd]" and last[46].val.sd is None and td.inputs_of(46) == (45,)
    assert last[46].deps[0].text == "<see lazy value below>"
    # the process died before the values were flushed
    p.write_text(LAZY)
    td = read_text_dump(p)
    assert "never flushed" in td.truncated and all(v.val is None for v in td.executions[-1])
    p.write_text(LAZY + LAZY_VALUES[:-20])
    td = read_text_dump(p)
    assert td.truncated.startswith("line 13:") and td.last()[45].val is not None and td.last()[46].val is None


_TEXT_LINES = (TEXT_EXEC + LAZY + LAZY_VALUES).splitlines(keepends=True)


@fuzz_lines(_TEXT_LINES, max_size=25, max_examples=800)
def test_fuzz_text_dump(tmp_path, picks, edits, cut):
    p = tmp_path / "io.txt"
    p.write_bytes(mutated(picks, edits, cut))
    try:
        td = read_text_dump(p)
    except DumpFormatError as e:
        assert e.path == p
        return
    for ex in td.executions:
        for v in ex:
            assert isinstance(v.id, int) and v.line >= 1
    td.last()
    td.edges()


# ----------------------------------------------------------------------------- real dumps


def _close3(text_value: float, actual: float, scale: float) -> bool:
    """Does a ``%.3g`` number from a text dump agree with the value computed from the binary?"""
    return bool(np.isclose(text_value, actual, rtol=6e-3, atol=1e-6 * max(scale, 1.0))) or (
        np.isnan(text_value) and np.isnan(actual))



def _assert_text_matches_binary(td, folder: DumpFolder) -> None:
    last = td.last()
    assert set(last) == set(folder.ids)
    for d in folder:
        t = last[d.var.id]
        assert (t.name, t.opr_type, t.opr_id, t.owner, t.dtype, t.shape) == (
            d.var.name, d.var.opr_type, d.var.opr_id, d.var.owner, d.var.dtype, d.shape)
        assert td.inputs_of(d.var.id) == folder.inputs_of(d.var.id)
        a = d.array().astype(np.float64).ravel()
        l2 = float(np.sqrt(np.mean(a * a)))
        assert _close3(t.val.min, a.min(), l2) and _close3(t.val.max, a.max(), l2), d.var.name
        assert _close3(t.val.mean, a.mean(), l2) and _close3(t.val.l2, l2, l2), d.var.name
        assert t.val.more == (a.size > 5) and len(t.val.head) == min(5, a.size)
        assert np.allclose(t.val.head, a[:5], rtol=1e-3, atol=1e-12), d.var.name


@pytest.mark.megengine
@pytest.mark.parametrize("config", ["naive", "default"])
def test_real_text_dump_agrees_with_binary(lar_dump, config):
    td = read_text_dump(lar_dump("cnn", config, text=True, flags=("--iter", "2")))
    assert td.truncated is None and not td.lazy
    assert len(td.executions) == 2
    assert [v.id for v in td.executions[0]] == [v.id for v in td.executions[1]]
    first = td.execution(0)
    assert first == {k: replace(v, line=first[k].line) for k, v in td.last().items()}
    kinds = {d.kind for v in td.executions[-1] for d in v.deps}
    assert kinds == {"value", "host_value"}  # the Reshape's target shape is a host value
    _assert_text_matches_binary(td, DumpFolder(lar_dump("cnn", config, env=DUMP_INPUT if config == "naive" else None)))


@pytest.mark.megengine
def test_real_lazy_text_dump(lar_dump):
    lazy = read_text_dump(lar_dump("cnn", "default", text=True, flags=("--record_comp_seq",)))
    plain = read_text_dump(lar_dump("cnn", "default", text=True, flags=("--iter", "2")))
    assert lazy.lazy and lazy.truncated is None and len(lazy.executions) == 1
    assert lazy.order == plain.order
    for vid, v in lazy.last().items():
        p = plain.last()[vid]
        assert (v.name, v.layout, v.owner, v.opr_type) == (p.name, p.layout, p.owner, p.opr_type)
        assert v.val == p.val
        assert [(d.var_id, d.input_index, d.kind) for d in v.deps] == [(d.var_id, d.input_index, d.kind) for d in p.deps]
