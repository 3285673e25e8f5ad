"""Bad input and size scaling for every reader (issue 12): the compare_binary_iodump text
(``lar-prec tree``), ``--io-dump`` text dumps, binary dumps and dump folders.

Real files come from real runs of the built cases (``lar_dump``) and MegEngine's own
``compare_binary_iodump``; damaged copies of them are made here. The commands run as a user
runs them (``python -m lar_prec ...`` in a fresh process): exit code, one ``Error:`` line
naming the file, no traceback, the input left as it was.
"""
from __future__ import annotations

import gc
import os
import re
import struct
import subprocess
import sys
import time
import zlib
from pathlib import Path
from typing import Callable

import pytest

from compare_helpers import computed_float_vars, copy_dump, inject_fault, pick_spread
from conftest import ROOT
from fuzz_helpers import fuzz_lines, mutated, read_or_refused
from lar_prec.errors import DumpFormatError
from lar_prec.dumps.folder import DumpFolder
from lar_prec.dumps.binary import read_binary_dump
from lar_prec.dumps.titles import format_title
from lar_prec.dumps.textdump import read_text_dump
from lar_prec.diagnosis.megcompat import read_megengine_diff
from lar_prec.dumps.titles import VarInfo

PY = sys.executable
#: a Python warning as compare_binary_iodump prints it on stderr (its source line follows)
WARNING = re.compile(r"\S.*:\d+: [A-Za-z]*Warning: ")
CN = 'CompNode("cpu0:0" from "cpu0:0")'


def lar_prec(*args: str, cwd: Path = ROOT) -> subprocess.CompletedProcess:
    """One real ``lar-prec`` command in a fresh process."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run([PY, "-m", "lar_prec", *args], capture_output=True, text=True, timeout=300, cwd=cwd, env=env)


def assert_input_error(proc: subprocess.CompletedProcess, path: Path, *words: str) -> str:
    """Exit 2, one ``Error:`` line that names ``path`` (and ``words``), no traceback."""
    assert proc.returncode == 2, (proc.returncode, proc.stdout[-500:], proc.stderr[-1500:])
    assert "Traceback" not in proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("Error: "), proc.stderr
    assert str(path) in lines[0], lines[0]
    for w in words:
        assert w in lines[0], lines[0]
    assert "differing" not in proc.stdout
    return lines[0]


def compare_binary_iodump(a: Path, b: Path, out: Path, e: float = 1e-3) -> Path:
    """What MegEngine's own tool prints for two dump folders, saved to ``out``."""
    p = subprocess.run([PY, "-m", "megengine.tools.compare_binary_iodump", str(a), str(b), "-e", repr(e)],
                       capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr[-1500:]
    out.write_text(p.stdout)
    return out


def png_bytes() -> bytes:
    """A real 1x1 PNG."""
    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF)

    ihdr = struct.pack(">IIBBBBB", 1, 1, 8, 2, 0, 0, 0)
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", ihdr) + chunk(b"IDAT", zlib.compress(b"\x00\xff\x00\x00")) + chunk(b"IEND", b"")


# ============================================================================ lar-prec tree


@pytest.fixture(scope="module")
def real_diff(lar_dump, tmp_path_factory):
    """Real dump folders of the cnn case and MegEngine's compare output of a fault in them."""
    base = tmp_path_factory.mktemp("diff")
    naive = Path(lar_dump("cnn", "naive"))
    default = Path(lar_dump("cnn", "default"))
    victim = pick_spread(computed_float_vars(DumpFolder(default)), 3)[0]
    faulty = base / "faulty"
    inject_fault(default, faulty, victim, 1e-2)
    diff = compare_binary_iodump(naive, faulty, base / "diff.txt")
    return {"naive": naive, "default": default, "faulty": faulty, "diff": diff, "victim": victim, "base": base}


def _not_a_diff(kind: str, real_diff, lar_dump, tmp: Path) -> Path:
    p = tmp / f"{kind}.txt"
    if kind == "random bytes":
        p.write_bytes(os.urandom(4096))
    elif kind == "png":
        p.write_bytes(png_bytes())
    elif kind == "binary dump":
        p.write_bytes(next(iter(DumpFolder(real_diff["naive"]))).path.read_bytes())
    elif kind == "report.json":
        proc = lar_prec("compare", str(real_diff["naive"]), str(real_diff["faulty"]), "--json", str(p))
        assert proc.returncode == 1 and p.stat().st_size > 100, proc.stderr
    elif kind == "io-dump text":
        p.write_bytes(Path(lar_dump("cnn", "default", text=True)).read_bytes())
    elif kind == "cut before the first failure":
        text = real_diff["diff"].read_text()
        p.write_text(text[: text.index(" not equal: ")])
    return p


@pytest.mark.megengine
@pytest.mark.parametrize("kind", ["random bytes", "png", "binary dump", "report.json", "io-dump text",
                                  "cut before the first failure"])
def test_tree_refuses_what_is_not_compare_output(kind, real_diff, lar_dump, tmp_path):
    """Each of these printed '0 differing var(s)' and exited 0: a false all-clear."""
    p = _not_a_diff(kind, real_diff, lar_dump, tmp_path)
    before = p.read_bytes()
    line = assert_input_error(lar_prec("tree", str(p)), p, "compare_binary_iodump" if kind != "cut before the first failure" else "cut")
    if kind == "cut before the first failure":
        assert "line" in line and "ends inside the entry" in line
    assert p.read_bytes() == before


@pytest.mark.megengine
def test_tree_accepts_the_tools_zero_difference_output(real_diff, tmp_path):
    """compare_binary_iodump prints nothing when nothing differs: that is a valid all-clear."""
    same = copy_dump(real_diff["naive"], tmp_path / "same")
    diff = compare_binary_iodump(real_diff["naive"], same, tmp_path / "same.txt")
    assert diff.read_bytes() == b""
    proc = lar_prec("tree", str(diff))
    assert proc.returncode == 0 and "0 differing var(s)" in proc.stdout, proc.stderr
    assert proc.stderr == ""


@pytest.mark.megengine
def test_tree_reads_the_real_output_and_says_where_a_later_cut_is(real_diff, tmp_path):
    text = real_diff["diff"].read_text()
    whole = lar_prec("tree", str(real_diff["diff"]))
    assert whole.returncode == 1 and f"var {real_diff['victim']})" in whole.stdout and whole.stderr == ""
    n_entries = text.count(" not equal: ")
    assert n_entries >= 2
    second = text.index(" not equal: ", text.index(" not equal: ") + 1)
    cut = tmp_path / "cut.txt"
    cut.write_text(text[: second + 5])  # inside the second failure line
    proc = lar_prec("tree", str(cut))
    assert proc.returncode == 1 and "1 differing var(s)" in proc.stdout
    assert "was cut: line" in proc.stderr and "Traceback" not in proc.stderr
    cut.write_text(text[: second - 3])  # inside the second entry's title
    md = read_megengine_diff(cut)
    assert len(md.entries) == 1 and "ends inside the entry" in md.truncated


def test_compare_output_noise_and_crashes(tmp_path):
    a = f"var={{id:5, shape:{{2}}, Float32, owner:x[4]{{Elemwise}}, name:x, slot:0, {CN}, s, 4, 1}} owner_opr_inputs="
    entry = f"d/000005: \n{a}\n{a}\n not equal: shape=(2,) nonequal_idx=(1,) v0=1.0 v1=2.0 err=0.5\n"
    warn = "/x/compare_binary_iodump.py:70: RuntimeWarning: invalid value encountered in subtract\n  err = np.abs(v0 - v1) / vdiv\n"
    p = tmp_path / "d.txt"
    for text, n in [("", 0), ("\n\n", 0), (entry, 1), (warn + entry + entry, 2), ("note: x\n" + entry, 1)]:
        p.write_text(text)
        md = read_megengine_diff(p)
        assert len(md.entries) == n and md.truncated is None and md.crashed is None
    # -s: the tool stops by raising the first failure, whose message is the entry
    p.write_text("Traceback (most recent call last):\n  File \"c.py\", line 1\n    raise exc\nAssertionError: " + entry)
    md = read_megengine_diff(p)
    assert md.crashed.startswith("AssertionError") and [e.var_id for e in md.entries] == [5]
    for bad, where in [("note: x\n", "line 1"), ("d/000005: \nvar={id:5, x\n" + entry, "line 3"),
                       (entry.replace(f"{a}\n", f"{a}\n{a}\n", 1).replace(f"{a}\n{a}\n{a}\n", f"{a}\n{a}\n{a}\n"), "line 4")]:
        p.write_text(bad)
        with pytest.raises(DumpFormatError, match=where) as ei:
            read_megengine_diff(p)
        assert ei.value.path == p


# ============================================================================ text dumps


@pytest.mark.megengine
def test_lazy_text_dump_with_several_recorded_sections(lar_dump, tmp_path):
    """MegEngine writes one '==== recorded values' section per flush of a network that ran
    several times. The bundled load_and_run flushes once (at exit), so the second section is
    made from the real first one with every value changed the way a later execution would."""
    real = Path(lar_dump("cnn", "default", text=True, flags=("--record_comp_seq", "--iter", "2"))).read_text()
    plain = read_text_dump(lar_dump("cnn", "default", text=True, flags=("--iter", "2")))
    head, sep, values = real.partition("==== recorded values\n")
    assert sep and "==== recorded values" not in values
    later = re.sub(r"min=\S+", "min=-7", values)  # what another input would have given
    p = tmp_path / "lazy2.txt"
    p.write_text(head + sep + values + sep + later)
    td = read_text_dump(p)
    assert td.lazy and td.truncated is None and len(td.executions) == 2
    assert [v.id for v in td.executions[0]] == [v.id for v in td.executions[1]] == list(plain.order)
    first, second = td.execution(0), td.execution(1)
    assert all(v.val is not None for v in td.executions[1])
    for vid, v in second.items():
        assert v.val.head == first[vid].val.head and v.val.min != first[vid].val.min
        assert v.deps == first[vid].deps and v.name == plain.last()[vid].name
    # a var declared after the second section, whose values were never flushed
    late = "var999 produced: name=late layout={2(1) Float32} owner_opr=o{Elemwise} opr999\n deps:\n val: <see lazy value below> s\n"
    p.write_text(head + sep + values + sep + later + late)
    td = read_text_dump(p)
    assert td.truncated and "declared after the last" in td.truncated and len(td.executions) == 3


@pytest.mark.megengine
def test_cut_text_dump_says_where_and_compare_says_so(lar_dump, tmp_path):
    naive, default = Path(lar_dump("cnn", "naive")), Path(lar_dump("cnn", "default"))
    text = Path(lar_dump("cnn", "default", text=True, flags=("--iter", "2"))).read_bytes()
    lines = text.splitlines(keepends=True)
    # cut at a line end between two var blocks of the second execution: each block is whole
    starts = [i for i, ln in enumerate(lines) if b" produced: name=" in ln]
    n_per_exec = len(starts) // 2
    cut_at = starts[n_per_exec + n_per_exec // 2]
    cut = tmp_path / "cut.txt"
    cut.write_bytes(b"".join(lines[:cut_at]))
    td = read_text_dump(cut)
    assert td.truncated and "the last execution has" in td.truncated
    cut.write_bytes(text[: len(text) // 2 + 7])  # in the middle of a line
    td = read_text_dump(cut)
    assert td.truncated and td.truncated.startswith("line ")
    proc = lar_prec("compare", str(naive), str(default), "--text-dump", str(cut))
    assert proc.returncode in (0, 1) and "Traceback" not in proc.stderr
    assert f"text dump {cut} was cut (line" in proc.stderr


# ============================================================================ dump folders


@pytest.mark.megengine
def test_symlink_loops_are_named_not_tracebacks(lar_dump, tmp_path):
    naive, default = Path(lar_dump("cnn", "naive")), Path(lar_dump("cnn", "default"))
    a = copy_dump(naive, tmp_path / "a")
    victim = sorted(DumpFolder(a).paths().values())[3]
    victim.unlink()
    os.symlink(victim.name, victim)  # 00000x -> 00000x
    assert_input_error(lar_prec("compare", str(a), str(default)), victim, "symlink loop")
    loop = tmp_path / "loop"
    os.symlink(loop.name, loop)
    assert_input_error(lar_prec("compare", str(loop), str(default)), loop, "is a symlink loop")
    broken = tmp_path / "broken"
    os.symlink("nowhere", broken)
    assert_input_error(lar_prec("compare", str(broken), str(default)), broken, "broken symlink")
    assert_input_error(lar_prec("tree", str(loop)), loop)


# ============================================================================ linear in the input


def _assert_linear(make: Callable[[int], Path], read: Callable[[Path], object], n: int) -> None:
    """Reading 8x the input takes well under 64x the time (what a quadratic reader takes).

    This process's CPU time, not the wall clock (a parallel test run on two cores once made the
    larger read's best of five wall times 36x the smaller's while its CPU time is 8x); best of
    five, the two sizes interleaved, and without the garbage collector's pauses (they depend on
    what else lives)."""
    files = (make(n), make(8 * n))
    best = [float("inf"), float("inf")]
    gc.collect()
    gc.disable()
    try:
        for _ in range(5):
            for i, p in enumerate(files):
                t0 = time.process_time()
                try:
                    read(p)
                except DumpFormatError:
                    pass
                best[i] = min(best[i], time.process_time() - t0)
    finally:
        gc.enable()
    assert best[1] < 32 * max(best[0], 1e-4), f"{n}: {best[0]:.4f} s, {8 * n}: {best[1]:.4f} s"


def _title_file(tmp: Path, name: str, title: str) -> Path:
    raw = title.encode()
    p = tmp / name
    p.write_bytes(struct.pack("<10I", len(raw), 0, 7, 2, 0, 0, 0, 0, 0, 0) + raw + bytes(8))
    return p


def _read_whole_dump(p: Path) -> object:
    d = read_binary_dump(p)
    return d.var, d.inputs


@pytest.mark.parametrize("shape", ["owner and name", "tails", "inputs"])
def test_binary_dump_reader_is_linear(tmp_path, shape):
    def make(n: int) -> Path:
        head = "var={id:1, shape:{2}, Float32, owner:"
        if shape == "owner and name":  # many owner splits, no legal end: 9 s at n=4000 before
            title = head + "o{E}, name:" * n + ", slot:0, x, s, 4, 1}" * n
        elif shape == "tails":
            title = head + "o{E}, name:" + ", slot:0, x, s, 4, 1}" * n + f", slot:0, {CN}, s, 4, 1}} owner_opr_inputs="
        else:
            v = VarInfo(2, " 1={id:, name:", "o", "E", None, "Float32", (2,), None, 0, CN, "s")
            title = format_title(v, [v] * n)
        return _title_file(tmp_path, f"{shape[:5]}-{n}", title)

    _assert_linear(make, _read_whole_dump, 4000)


def test_text_dump_reader_is_linear(tmp_path):
    def make(n: int) -> Path:
        p = tmp_path / f"io-{n}.txt"
        # one produced line of n " layout={" (24 s at n=10,000 before), then n small blocks
        lines = ["var1 produced: name=" + " layout={" * n + " owner_opr=o{E} opr1"]
        for i in range(2, n + 2):
            lines += [f"var{i} produced: name=v layout={{2(1) Float32}} owner_opr=o{{E}} opr{i}", " deps:",
                      f"  [i0]var{i - 1}: [1, 2] s", " val: [1, 2]min=1 max=2 mean=1.5 l2=1.58 sd=0.707 s"]
        p.write_text("\n".join(lines) + "\n")
        return p

    _assert_linear(make, read_text_dump, 2000)


def test_compare_output_reader_is_linear(tmp_path):
    title = f"var={{id:5, shape:{{2}}, Float32, owner:x[4]{{Elemwise}}, name:x, slot:0, {CN}, s, 4, 1}} owner_opr_inputs="

    def make(n: int) -> Path:
        p = tmp_path / f"d-{n}.txt"
        entry = f"d/000005: \n{title}\n{title}\n not equal: shape=(2,) nonequal_idx=(1,) v0=1.0 v1=2.0 err=0.5\n"
        long_title = "var={id:7, shape:{2}, Float32, owner:" + "o{E}, name:" * n
        p.write_text(entry * n + "d/000007: \n" + long_title + "\n  " + "x, " * n + "\n" + long_title + "\n not equal: x\n")
        return p

    _assert_linear(make, read_megengine_diff, 500)


# ============================================================================ fuzzing the compare output reader

_ENTRY = (f"d/00000b: \nvar={{id:11, shape:{{2}}, Float32, owner:conv(a,b)[10]{{ConvolutionForward}}, name:c1,\n"
          f"  slot:0, {CN}, s, 4, 1}} owner_opr_inputs=0={{id:7, shape:{{2}}, Float32,\n"
          f"  owner:h2d[6]{{Host2DeviceCopy}}, name:data, slot:0, {CN}, s, 4, 4}} 1={{id:9,\n"
          f"  shape:{{2}}, Float32, owner:const[8]{{ImmutableTensor}}, name:w, slot:0, {CN}, s, 2, 2}}\n"
          f"var={{id:11, shape:{{2}}, Float32, owner:conv(a,b)[10]{{ConvolutionForward}}, name:c1,\n"
          f"  slot:0, {CN}, s, 4, 1}} owner_opr_inputs=0={{id:7, shape:{{2}}, Float32,\n"
          f"  owner:h2d[6]{{Host2DeviceCopy}}, name:data, slot:0, {CN}, s, 4, 4}} 1={{id:9,\n"
          f"  shape:{{2}}, Float32, owner:const[8]{{ImmutableTensor}}, name:w, slot:0, {CN}, s, 2, 2}}\n"
          " not equal: shape=(2,) nonequal_idx=(1,) v0=1.0 v1=2.0 err=0.5\n"
          "d/00000c: \n"
          f"inp0: var={{id:11, shape:{{2}}, Float32, owner:conv[10]{{ConvolutionForward}}, name:c1, slot:0, {CN}, s, 4, 1}} owner_opr_inputs=\n"
          f"inp0: var={{id:11, shape:{{2}}, Float32, owner:conv[10]{{ConvolutionForward}}, name:c1, slot:0, {CN}, s, 4, 1}} owner_opr_inputs=\n"
          " not finite: sum=nan vs sum=1.0\n"
          "Traceback (most recent call last):\n  File \"x\", line 1\nKeyError: 12\n"
          "/x/c.py:70: RuntimeWarning: overflow\n  err = a - b\n")
_DIFF_LINES = _ENTRY.splitlines(keepends=True)


@fuzz_lines(_DIFF_LINES, max_size=30, max_examples=600)
def test_fuzz_compare_output(tmp_path, picks, edits, cut):
    """Any bytes: entries with ids, or DumpFormatError naming the file; binary data never reads."""
    data = mutated(picks, edits, cut)
    md = read_or_refused(read_megengine_diff, tmp_path / "diff.txt", data)
    if md is None:
        return
    assert b"\0" not in data
    if not md.entries and md.crashed is None:  # read as "nothing differs": only blanks and warnings
        text = data.decode()
        assert all(not ln.strip() or ln.startswith(" ") or WARNING.match(ln) for ln in text.split("\n")), text
    for e in md.entries:
        assert isinstance(e.var_id, int) and e.line >= 1 and e.kind in ("not equal", "not finite", "shape mismatch")


def test_fifos_and_folders_are_refused_not_waited_on(tmp_path):
    """A FIFO given as a file would block the reader forever (nothing ever writes to it)."""
    fifo = tmp_path / "00000b"
    os.mkfifo(fifo)
    for read in (read_binary_dump, read_text_dump, read_megengine_diff):
        for p, kind in ((fifo, "a FIFO"), (tmp_path, "a directory")):
            with pytest.raises(DumpFormatError, match=kind) as ei:
                read(p)
            assert ei.value.path == p
    proc = lar_prec("tree", str(fifo))
    assert_input_error(proc, fifo, "a FIFO")
