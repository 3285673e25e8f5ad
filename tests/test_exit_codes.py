"""Exit codes 4 (internal error) and the verdict kept through closed pipes and full disks.

Real commands in fresh processes. An internal error cannot be had from a correct lar-prec
on purpose, so those tests start the real command line with one lar-prec function replaced
by one that raises (a stand-in for a bug); MegEngine is never touched.
"""
from __future__ import annotations

import json
import os
import re
import shutil
import stat
import subprocess
import sys
from pathlib import Path
from typing import List

import pytest

from conftest import ROOT
from test_bad_input import assert_intact, error_lines, lar_prec, snapshot

PY = sys.executable


def with_bug(target: str, exc: str, argv: List[str], cwd: Path) -> subprocess.CompletedProcess:
    """``lar-prec argv`` (through cli.main, as the console script) with ``module:attr`` raising ``exc``."""
    module, _, attr = target.partition(":")
    obj, _, name = attr.rpartition(".")
    code = (f"import sys, importlib\n"
            f"m = importlib.import_module({module!r})\n"
            f"owner = eval({obj!r}, vars(m)) if {obj!r} else m\n"
            f"def bug(*a, **k):\n    raise {exc}\n"
            f"setattr(owner, {name!r}, bug)\n"
            f"from lar_prec.cli import main\n"
            f"sys.argv = ['lar-prec'] + {list(map(str, argv))!r}\n"
            f"main()\n")
    env = {**os.environ, "PYTHONPATH": str(ROOT), "TMPDIR": str(cwd)}
    env.pop("LAR_PREC_TRACEBACK", None)
    return subprocess.run([PY, "-c", code], cwd=cwd, env=env, capture_output=True, text=True, timeout=120)


def assert_internal_error(r: subprocess.CompletedProcess, type_name: str, cwd: Path) -> None:
    assert r.returncode == 4, (r.returncode, r.stderr)
    assert "Traceback" not in r.stderr, r.stderr
    lines = error_lines(r.stderr)
    assert len(lines) == 1 and lines[0].startswith(f"Error: internal error of lar-prec: {type_name}"), r.stderr
    m = re.search(r"traceback saved to (\S+)$", lines[0])
    assert m, lines[0]
    saved = Path(m.group(1))
    assert saved.parent == cwd, "the traceback file is not in $TMPDIR"
    text = saved.read_text()
    assert "Traceback (most recent call last)" in text and type_name in text and "lar-prec" in text


@pytest.fixture()
def dumps(lar_dump, tmp_path):
    a = tmp_path / "a"
    shutil.copytree(lar_dump("cnn", "default"), a)
    return a


@pytest.mark.megengine
@pytest.mark.parametrize("cmd, target, exc", [
    ("compare", "lar_prec.diagnosis.tree:VarTree.from_folders", "ZeroDivisionError('a bug')"),
    ("compare", "lar_prec.report.terminal:render_terminal", "MemoryError()"),
    ("tree", "lar_prec.workflows.compare.tree:from_tree", "KeyError('a bug')"),
])
def test_internal_error_exits_4_with_saved_traceback(dumps, tmp_path, cmd, target, exc):
    """A crash is never read as a verdict: exit 4, one line, the traceback in a file.
    MemoryError is 4 too when no check can name an input."""
    diff = tmp_path / "diff.txt"
    diff.write_text("")
    argv = ["compare", dumps, dumps] if cmd == "compare" else ["tree", diff]
    before = snapshot(tmp_path)
    r = with_bug(target, exc, argv, tmp_path)
    assert_internal_error(r, exc.split("(")[0], tmp_path)
    assert_intact(before, snapshot(tmp_path))


@pytest.mark.megengine
def test_internal_error_in_a_workflow_exits_4(manifest, tmp_path):
    case = manifest["cnn"]
    argv = ["naive-vs-default", case.model, *sum((["--input", s] for s in case.input_specs()), []),
            "--out", tmp_path / "out", "-q"]
    r = with_bug("lar_prec.report.model:from_tree", "RuntimeError('a bug')", argv, tmp_path)
    assert_internal_error(r, "RuntimeError", tmp_path)


@pytest.mark.megengine
def test_a_real_crash_is_never_a_verdict(dumps, tmp_path):
    """A symlink loop named like a dump file: a clear input error (2) once the reader names
    it, an internal error (4) before; never 0 or 1, never a traceback on the terminal."""
    b = tmp_path / "b"
    shutil.copytree(dumps, b)
    os.symlink("000fff", b / "000fff")
    r = lar_prec(["compare", dumps, b], cwd=tmp_path)
    assert r.returncode in (2, 4), (r.returncode, r.stderr)
    assert "Traceback" not in r.stderr and len(error_lines(r.stderr)) == 1, r.stderr


# --------------------------------------------------------------------- closed pipes


def closed_pipe(argv: List[str], cwd: Path, nbytes: int = 100) -> subprocess.CompletedProcess:
    """``lar-prec argv | head -c nbytes`` through a one-page pipe: the reader goes away after
    ``nbytes``, so any output longer than 4 KiB hits the closed pipe."""
    import fcntl

    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    r_fd, w_fd = os.pipe()
    fcntl.fcntl(r_fd, fcntl.F_SETPIPE_SZ, 4096)
    try:
        proc = subprocess.Popen([PY, "-m", "lar_prec", *map(str, argv)], cwd=cwd, env=env, stdout=w_fd,
                                stderr=subprocess.PIPE)
    finally:
        os.close(w_fd)
    first = b""
    while len(first) < nbytes:
        chunk = os.read(r_fd, nbytes - len(first))
        if not chunk:
            break
        first += chunk
    os.close(r_fd)
    err = proc.stderr.read().decode()
    proc.wait(timeout=120)
    return subprocess.CompletedProcess(argv, proc.returncode, first, err)


@pytest.mark.megengine
@pytest.mark.parametrize("divergent", [False, True])
def test_output_to_a_closed_pipe_keeps_the_verdict(lar_dump, tmp_path, divergent):
    """``compare --json - | head -c 100``: silent, and the exit code of the verdict (0 or 1),
    not 1 for every closed pipe; the same for the CSV table."""
    from compare_helpers import computed_float_vars, inject_fault
    from lar_prec.dumps.folder import DumpFolder

    a, b = tmp_path / "a", tmp_path / "b"
    shutil.copytree(lar_dump("resnet", "default"), a)
    if divergent:
        inject_fault(a, b, computed_float_vars(DumpFolder(a))[0], 0.01)
    else:
        shutil.copytree(a, b)
    for args, nbytes in ((["--json", "-"], 100), (["--format", "csv", "--all"], 10)):
        argv = ["compare", a, b, "--threshold", "1e-3", *args]
        full = lar_prec(argv, cwd=tmp_path)
        assert full.returncode == int(divergent) and len(full.stdout) > 4096 + nbytes, "must overflow the pipe"
        r = closed_pipe(argv, tmp_path, nbytes)
        assert r.stdout == full.stdout.encode()[:nbytes]
        assert r.returncode == full.returncode and r.stderr == "", (r.returncode, r.stderr)


@pytest.mark.megengine
def test_workflow_json_to_a_closed_pipe_keeps_the_verdict(manifest, tmp_path):
    case = manifest["resnet"]
    argv = ["naive-vs-default", case.model, *sum((["--input", s] for s in case.input_specs()), []), "-q",
            "--json", "-"]
    full = lar_prec(argv + ["--out", tmp_path / "a"], cwd=tmp_path)
    assert full.returncode in (0, 1) and len(full.stdout) > 8192, full.stderr
    r = closed_pipe(argv + ["--out", tmp_path / "b"], tmp_path)
    assert r.returncode == full.returncode and "Traceback" not in r.stderr and "Error" not in r.stderr, r.stderr


def into_a_gone_reader(argv: List[str], cwd: Path, streams: str) -> subprocess.CompletedProcess:
    """``lar-prec argv`` with ``streams`` (``stdout``, ``stderr`` or ``both``: ``2>&1 | head``)
    into a pipe whose reader has already gone: every write there meets EPIPE."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    r_fd, w_fd = os.pipe()
    os.close(r_fd)
    to = {"stdout": {"stdout": w_fd, "stderr": subprocess.PIPE}, "stderr": {"stdout": subprocess.PIPE, "stderr": w_fd},
          "both": {"stdout": w_fd, "stderr": w_fd}}[streams]
    try:
        return subprocess.run([PY, "-m", "lar_prec", *map(str, argv)], cwd=cwd, env=env, timeout=120, **to)
    finally:
        os.close(w_fd)


@pytest.mark.megengine
@pytest.mark.parametrize("streams", ["stdout", "stderr", "both"])
def test_a_reader_that_goes_away_never_changes_the_verdict(manifest, tmp_path, streams):
    """Issue 41 #10: ``naive-vs-default MODEL --input ... 2>&1 | head -2`` on a clean model exited 1
    (the notes written to stderr after the reader had gone): the analysis finishes and exits
    with its verdict's code, with stderr alone or both streams into the closed pipe."""
    case = manifest["cnn"]
    out = tmp_path / "a"
    r = into_a_gone_reader(["naive-vs-default", case.model, *sum((["--input", s] for s in case.input_specs()), []),
                            "--no-local", "--out", out], tmp_path, streams)
    report = json.loads((out / "report.json").read_text())
    assert r.returncode == int(report["diverged"]), (r.returncode, r.stdout, r.stderr)
    assert report["verdict"].startswith(("no divergence", "divergence")), report["verdict"]


# ------------------------------------------------------------------------ full disk


@pytest.fixture()
def full_disk(tmp_path):
    """A 256 KiB tmpfs holding an earlier report.json, then filled to the last byte."""
    disk = tmp_path / "disk"
    disk.mkdir()
    r = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=256k", "tmpfs", str(disk)], capture_output=True)
    if r.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {r.stderr.decode().strip()}")
    try:
        (disk / "r.json").write_text('{"earlier": "report"}\n')
        with open(disk / "filler", "wb", buffering=0) as f:
            try:
                while True:
                    f.write(b"\0" * 4096)
            except OSError:
                pass
        yield disk
    finally:
        subprocess.run(["umount", str(disk)], capture_output=True)


@pytest.mark.megengine
def test_full_disk_keeps_the_earlier_report_and_the_verdict(manifest, full_disk, tmp_path):
    """naive-vs-default --json/--html on a full disk: the verdict is printed, then exit 2 with
    one line naming the file; the earlier report is intact and no temporary file is left."""
    case = manifest["cnn"]
    before = snapshot(full_disk)
    argv = ["naive-vs-default", case.model, *sum((["--input", s] for s in case.input_specs()), []), "-q",
            "--out", tmp_path / "a", "--json", full_disk / "r.json"]
    r = lar_prec(argv, cwd=tmp_path)
    assert r.returncode == 2, r.stderr
    lines = error_lines(r.stderr)
    assert len(lines) == 1 and "r.json" in lines[0] and "No space left" in lines[0], r.stderr
    assert "Traceback" not in r.stderr
    assert "divergence" in r.stdout.lower() or "diverge" in r.stdout.lower(), "verdict not printed first"
    assert_intact(before, snapshot(full_disk))
    assert sorted(p.name for p in full_disk.iterdir()) == ["filler", "r.json"]
    assert (tmp_path / "a" / "report.json").is_file(), "the analysis folder keeps its own report"
    r = lar_prec(argv[:-2] + ["--html", full_disk / "r.html"], cwd=tmp_path)
    assert r.returncode == 2 and "r.html" in error_lines(r.stderr)[0], r.stderr
    assert sorted(p.name for p in full_disk.iterdir()) == ["filler", "r.json"]


@pytest.mark.megengine
def test_compare_json_on_a_full_disk(dumps, full_disk, tmp_path):
    before = snapshot(full_disk)
    r = lar_prec(["compare", dumps, dumps, "--json", full_disk / "r.json"], cwd=tmp_path)
    assert r.returncode == 2 and "Traceback" not in r.stderr, r.stderr
    assert "r.json" in error_lines(r.stderr)[0]
    assert_intact(before, snapshot(full_disk))
    assert sorted(p.name for p in full_disk.iterdir()) == ["filler", "r.json"]


# ----------------------------------------------------------------- atomic writes


def test_atomic_writer_keeps_the_earlier_file_on_error(tmp_path):
    from lar_prec.errors import UsageError
    from lar_prec.outputs import atomic_write_text, atomic_writer

    p = tmp_path / "r.json"
    p.write_text("earlier\n")
    with pytest.raises(RuntimeError):
        with atomic_writer(p) as f:
            f.write("half")
            raise RuntimeError("stopped mid-write")
    assert p.read_text() == "earlier\n" and sorted(x.name for x in tmp_path.iterdir()) == ["r.json"]
    link = tmp_path / "link.json"
    link.symlink_to(p)
    atomic_write_text(link, "new\n")
    assert link.is_symlink() and p.read_text() == "new\n"
    with pytest.raises(UsageError, match="folder"):
        atomic_write_text(tmp_path, "x")


@pytest.fixture()
def null_device(tmp_path):
    """A private null device (a node like /dev/null): the real one must never be at stake."""
    node = tmp_path / "null"
    try:
        os.mknod(node, 0o666 | stat.S_IFCHR, os.makedev(1, 3))
    except OSError as e:
        pytest.skip(f"cannot make a device node here: {e}")
    return node


def test_atomic_writer_writes_a_device_in_place(null_device):
    from lar_prec.outputs import atomic_write_text

    atomic_write_text(null_device, "nothing\n")
    assert null_device.is_char_device() and [p.name for p in null_device.parent.iterdir()] == ["null"]


@pytest.mark.megengine
def test_json_to_a_null_device_is_fine(dumps, null_device, tmp_path):
    r = lar_prec(["compare", dumps, dumps, "--json", null_device], cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert null_device.is_char_device()
