"""The bad-input matrix (issue 12): every way a user can hand lar-prec something wrong.

One parametrised test per family (dump folders, text inputs, models and inputs, runs and
binaries, outputs, signals). Every row runs the real ``lar-prec`` command in a fresh process
on real models and damaged copies of real dumps, and asserts: the documented exit code, one
``Error: ...`` line naming the file and what was expected, no traceback on the terminal, and
every file that existed before still byte for byte intact.
"""
from __future__ import annotations

import hashlib
import os
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Dict, List, Optional, Sequence

import pytest

from conftest import ROOT

FAKE_LAR = ROOT / "tests" / "fake_lar.py"
PY = sys.executable


# ------------------------------------------------------------------------------ helpers


def lar_prec(args: Sequence[str], *, cwd: Path, env: Optional[Dict[str, str]] = None,
             timeout: float = 120) -> subprocess.CompletedProcess:
    """The real command line in a fresh process (``python -m lar_prec``)."""
    full = {**os.environ, "PYTHONPATH": str(ROOT), **(env or {})}
    return subprocess.run([PY, "-m", "lar_prec", *map(str, args)], cwd=cwd, env=full, capture_output=True,
                          text=True, timeout=timeout, stdin=subprocess.DEVNULL)


def snapshot(*roots: Path) -> Dict[str, str]:
    """sha256 of every regular file under ``roots`` (files or folders), symlinks not followed."""
    out: Dict[str, str] = {}
    for root in roots:
        paths = [root] if not root.is_dir() or root.is_symlink() else sorted(root.rglob("*"))
        for p in paths:
            if p.is_symlink() or not p.is_file():
                continue
            try:
                out[str(p)] = hashlib.sha256(p.read_bytes()).hexdigest()
            except OSError:  # a FIFO is not a regular file; unreadable files are not data
                continue
    return out


def assert_intact(before: Dict[str, str], after: Dict[str, str]) -> None:
    changed = [p for p, h in before.items() if after.get(p) != h]
    assert not changed, f"files changed or removed: {changed}"


def error_lines(stderr: str) -> List[str]:
    return [line for line in stderr.splitlines() if line.startswith("Error:")]


def assert_one_line_error(stderr: str, names: Sequence[str], expect: Sequence[str], scratch: str = "") -> None:
    """One ``Error:`` line, naming every string of ``names`` and saying what was expected
    (one of ``expect``, looked for in the line without the ``scratch`` folder, whose
    pytest-made name could hold any word)."""
    assert "Traceback" not in stderr, stderr
    lines = error_lines(stderr)
    assert len(lines) == 1, stderr
    for n in names:
        assert n.lower() in lines[0].lower(), (n, lines[0])
    rest = (lines[0].replace(scratch, "<tmp>") if scratch else lines[0]).lower()
    assert any(e.lower() in rest for e in expect), (expect, lines[0])


@dataclass
class Ctx:
    """What a row may use: a scratch folder, the cnn case, copies of its real dumps."""

    tmp: Path
    model: Path
    data: Path
    dump_a: Path
    dump_b: Path
    diff_txt: Path
    env: Dict[str, str] = field(default_factory=dict)
    cwd: Optional[Path] = None

    def inputs(self) -> List[str]:
        return ["--input", f"data:{self.data}"]


@pytest.fixture()
def ctx(manifest, lar_dump, tmp_path) -> Ctx:
    case = manifest["cnn"]
    model = tmp_path / "model.mge"
    shutil.copyfile(case.model, model)
    data = tmp_path / "data.npy"
    shutil.copyfile(dict(case.inputs)["data"], data)
    from compare_helpers import computed_float_vars, inject_fault
    from lar_prec.dumps.folder import DumpFolder

    # b = a with a 1% fault born at the first computed var: a divergence on every CPU
    a, b = tmp_path / "dump_a", tmp_path / "dump_b"
    shutil.copytree(lar_dump("cnn", "default"), a)
    inject_fault(a, b, computed_float_vars(DumpFolder(a))[0], 0.01)
    diff = tmp_path / "diff.txt"
    r = lar_prec(["compare", a, b, "--format", "megengine", "--threshold", "0"], cwd=tmp_path)
    assert r.returncode == 1 and " not equal" in r.stdout, r.stderr
    diff.write_text(r.stdout)
    return Ctx(tmp_path, model, data, a, b, diff)


@dataclass(frozen=True)
class Row:
    """One bad input: ``setup(ctx)`` returns the argv; the run must end with ``code`` and an
    Error line naming every ``names(ctx)`` string and one of ``expect``."""

    id: str
    setup: Callable[[Ctx], List[str]]
    code: int
    names: Callable[[Ctx], List[str]]
    expect: Sequence[str]
    xfail: str = ""
    timeout: float = 120


def params(rows: Sequence[Row]) -> list:
    return [pytest.param(r, id=r.id, marks=[pytest.mark.xfail(strict=False, reason=r.xfail)] if r.xfail else [])
            for r in rows]


def check_row(row: Row, ctx: Ctx) -> subprocess.CompletedProcess:
    try:
        argv = row.setup(ctx)
        names = row.names(ctx)
        before = snapshot(ctx.tmp)
        r = lar_prec(argv, cwd=ctx.cwd or ctx.tmp, env=ctx.env, timeout=row.timeout)
    finally:
        if "_UMOUNT" in ctx.env:
            subprocess.run(["umount", ctx.env.pop("_UMOUNT")], capture_output=True)
    assert_intact(before, snapshot(ctx.tmp))
    assert r.returncode == row.code, (r.returncode, r.stderr[-2000:])
    assert_one_line_error(r.stderr, names, row.expect, str(ctx.tmp))
    return r


def first_dump_file(folder: Path) -> Path:
    return sorted(p for p in folder.iterdir() if p.name.isalnum())[0]


# ------------------------------------------------------------------------ dump folders


def _missing_folder(c: Ctx) -> List[str]:
    return ["compare", c.dump_a, c.tmp / "nope"]


def _empty_folder(c: Ctx) -> List[str]:
    (c.tmp / "empty").mkdir()
    return ["compare", c.dump_a, c.tmp / "empty"]


def _file_not_folder(c: Ctx) -> List[str]:
    return ["compare", c.dump_a, c.data]


def _truncated_dump(c: Ctx) -> List[str]:
    f = first_dump_file(c.dump_b)
    f.write_bytes(f.read_bytes()[:30])
    return ["compare", c.dump_a, c.dump_b]


def _random_bytes_dump(c: Ctx) -> List[str]:
    f = first_dump_file(c.dump_b)
    f.write_bytes(os.urandom(f.stat().st_size))
    return ["compare", c.dump_a, c.dump_b]


def _symlink_loop_file(c: Ctx) -> List[str]:
    os.symlink("000fff", c.dump_b / "000fff")
    return ["compare", c.dump_a, c.dump_b]


def _symlink_loop_folder(c: Ctx) -> List[str]:
    os.symlink(c.tmp / "loop", c.tmp / "loop")
    return ["compare", c.dump_a, c.tmp / "loop"]


DUMP_FOLDERS = [
    Row("missing-folder", _missing_folder, 2, lambda c: ["nope"], ["does not exist", "expected"]),
    Row("empty-folder", _empty_folder, 2, lambda c: ["empty"], ["no binary dump files", "expected"]),
    Row("file-not-folder", _file_not_folder, 2, lambda c: ["data.npy"], ["folder", "expected"]),
    Row("truncated-dump", _truncated_dump, 2, lambda c: [first_dump_file(c.dump_b).name], ["expected"]),
    Row("random-bytes-dump", _random_bytes_dump, 2, lambda c: [first_dump_file(c.dump_b).name], ["expected"]),
    Row("symlink-loop-dump-file", _symlink_loop_file, 2, lambda c: ["000fff"], ["symlink", "link", "expected"],
        ),
    Row("symlink-loop-folder", _symlink_loop_folder, 2, lambda c: ["loop"], ["symlink", "link"]),
]


@pytest.mark.megengine
@pytest.mark.parametrize("row", params(DUMP_FOLDERS))
def test_bad_dump_folders(row: Row, ctx: Ctx) -> None:
    check_row(row, ctx)


# ------------------------------------------------------------------------- text inputs


def _tree_of(content: Callable[[Ctx], bytes], name: str = "bad.txt") -> Callable[[Ctx], List[str]]:
    def setup(c: Ctx) -> List[str]:
        (c.tmp / name).write_bytes(content(c))
        return ["tree", c.tmp / name]
    return setup


PNG = b"\x89PNG\r\n\x1a\n" + bytes(range(256)) * 4


def _report_json(c: Ctx) -> bytes:
    r = lar_prec(["compare", c.dump_a, c.dump_b, "--json", "-"], cwd=c.tmp)
    return r.stdout.encode()


def _cut_diff(c: Ctx) -> bytes:
    """compare_binary_iodump output cut in its first block, before its first failure."""
    text = c.diff_txt.read_text()
    return text[: text.index(" not equal") // 2].encode()


def _text_dump_missing(c: Ctx) -> List[str]:
    return ["compare", c.dump_a, c.dump_b, "--text-dump", c.tmp / "none.txt"]


def _text_dump_random(c: Ctx) -> List[str]:
    (c.tmp / "td.txt").write_bytes(os.urandom(4096))
    return ["compare", c.dump_a, c.dump_b, "--text-dump", c.tmp / "td.txt"]


TEXT_INPUTS = [
    Row("tree-missing", lambda c: ["tree", c.tmp / "none.txt"], 2, lambda c: ["none.txt"], ["does not exist", "expected"]),
    Row("tree-only-traceback", _tree_of(lambda c: b"Traceback (most recent call last):\n  File \"x\"\nKeyError: 12\n"),
        2, lambda c: ["bad.txt"], ["expected"]),
    Row("tree-random-bytes", _tree_of(lambda c: os.urandom(4096)), 2, lambda c: ["bad.txt"], ["expected"],
        ),
    Row("tree-png", _tree_of(lambda c: PNG, "img.png"), 2, lambda c: ["img.png"], ["expected"]),
    Row("tree-binary-dump", _tree_of(lambda c: first_dump_file(c.dump_a).read_bytes()), 2, lambda c: ["bad.txt"],
        ["expected"]),
    Row("tree-report-json", _tree_of(_report_json, "report.json"), 2, lambda c: ["report.json"], ["expected"],
        ),
    Row("tree-cut-output", _tree_of(_cut_diff, "cut.txt"), 2, lambda c: ["cut.txt"], ["cut", "expected"],
        ),
    Row("text-dump-missing", _text_dump_missing, 2, lambda c: ["none.txt"], ["does not exist", "expected"]),
    Row("text-dump-random-bytes", _text_dump_random, 2, lambda c: ["td.txt"], ["expected"]),
]


@pytest.mark.megengine
@pytest.mark.parametrize("row", params(TEXT_INPUTS))
def test_bad_text_inputs(row: Row, ctx: Ctx) -> None:
    check_row(row, ctx)


# ------------------------------------------------------------------ models and inputs


def _nvd(c: Ctx, *extra: object, model: Optional[Path] = None, inputs: Optional[List[str]] = None) -> List[str]:
    return ["naive-vs-default", model or c.model, *(c.inputs() if inputs is None else inputs),
            "--out", c.tmp / "out", "-q", *extra]


def _model_is_folder(c: Ctx) -> List[str]:
    (c.tmp / "m.mge").mkdir()
    return _nvd(c, model=c.tmp / "m.mge")


def _model_garbage(c: Ctx) -> List[str]:
    (c.tmp / "junk.mge").write_bytes(os.urandom(2048))
    return ["run", c.tmp / "junk.mge", *c.inputs(), "--out", c.tmp / "out"]


def _input_not_npy(c: Ctx) -> List[str]:
    (c.tmp / "x.npy").write_bytes(b"not an npy file at all")
    return _nvd(c, inputs=["--input", f"data:{c.tmp / 'x.npy'}"])


def _input_fifo(c: Ctx) -> List[str]:
    os.mkfifo(c.tmp / "fifo.npy")
    return ["run", c.model, "--input", f"data:{c.tmp / 'fifo.npy'}", "--out", c.tmp / "out", "--timeout", "20"]


MODELS_AND_INPUTS = [
    Row("model-missing", lambda c: _nvd(c, model=c.tmp / "nope.mge"), 2, lambda c: ["nope.mge"],
        ["does not exist", "expected"]),
    Row("model-is-folder", _model_is_folder, 2, lambda c: ["m.mge"], ["folder", "not a file", "expected"]),
    Row("run-model-is-folder", lambda c: ["run", _model_is_folder(c)[1], *c.inputs(), "--out", c.tmp / "out"], 2,
        lambda c: ["m.mge"], ["folder", "not a file"]),
    Row("model-garbage", _model_garbage, 3, lambda c: ["out"], ["failed"]),
    Row("input-missing", lambda c: _nvd(c, inputs=["--input", f"data:{c.tmp / 'none.npy'}"]), 2,
        lambda c: ["none.npy"], ["does not exist", "expected", "not found"]),
    Row("input-not-npy", _input_not_npy, 2, lambda c: ["x.npy"], ["npy", "expected"]),
    Row("input-name-unknown-file", lambda c: _nvd(c, inputs=["--input", f"nosuch:{c.data}"]), 2,
        lambda c: ["nosuch"], ["data", "expected"]),
    Row("input-name-unknown-shape", lambda c: _nvd(c, inputs=["--input", "nosuch:{1,3,32,32}"]), 2,
        lambda c: ["nosuch"], ["data", "expected"]),
    Row("seed-negative", lambda c: _nvd(c, "--seed", "-5", inputs=["--input", "data:{1,3,32,32}"]), 2,
        lambda c: ["seed"], ["expected", ">= 0", "non-negative"]),
    Row("input-absurd-shape", lambda c: _nvd(c, inputs=["--input", "data:{99999,99999,99999}"]), 2,
        lambda c: ["data"], ["expected", "too large", "memory"]),
    Row("input-fifo", _input_fifo, 2, lambda c: ["fifo.npy"], ["regular file", "expected"],
        timeout=30),
]


@pytest.mark.megengine
@pytest.mark.parametrize("row", params(MODELS_AND_INPUTS))
def test_bad_models_and_inputs(row: Row, ctx: Ctx) -> None:
    check_row(row, ctx)


# ------------------------------------------------------------------- runs and binaries


def _readonly_mount(c: Ctx) -> Path:
    """A read-only place even for root: a read-only bind mount, or skip when mount fails."""
    ro = c.tmp / "ro"
    ro.mkdir()
    r = subprocess.run(["mount", "-t", "tmpfs", "-o", "ro,size=64k", "tmpfs", str(ro)], capture_output=True)
    if r.returncode != 0:
        pytest.skip("cannot mount a read-only tmpfs here")
    c.env["_UMOUNT"] = str(ro)
    return ro




def _fake(c: Ctx, mode: str, *extra: object) -> List[str]:
    c.env.update({"FAKE_LAR_MODE": mode, "FAKE_LAR_SOURCE_DUMP": str(c.dump_b),
                  "FAKE_LAR_CHILD_PID": str(c.tmp / "child.pid")})
    return ["run", c.model, *c.inputs(), "--lar", FAKE_LAR, "--out", c.tmp / "out", *extra]


def _fake_stall(c: Ctx) -> List[str]:
    c.env["LAR_PREC_STALL_AFTER"] = "1"
    return _fake(c, "stall", "--timeout", "120")


def _with_env(c: Ctx, env: dict, argv: List[str]) -> List[str]:
    c.env.update(env)
    return argv


def _lar_not_executable(c: Ctx) -> List[str]:
    (c.tmp / "lar.txt").write_text("not a program\n")
    return ["run", c.model, *c.inputs(), "--lar", c.tmp / "lar.txt", "--out", c.tmp / "out"]


def _out_under_file(c: Ctx) -> List[str]:
    (c.tmp / "somefile").write_text("x\n")
    return ["run", c.model, *c.inputs(), "--out", c.tmp / "somefile" / "run"]


def _run_in_readonly_cwd(c: Ctx) -> List[str]:
    c.cwd = _readonly_mount(c)
    return ["run", c.model, *c.inputs()]


RUNS_AND_BINARIES = [
    Row("lar-missing", lambda c: ["run", c.model, *c.inputs(), "--lar", c.tmp / "no_lar"], 2, lambda c: ["no_lar"],
        ["does not exist", "not found", "expected"]),
    Row("lar-not-executable", _lar_not_executable, 2, lambda c: ["lar.txt"], ["executable", "cannot run", "expected"]),
    Row("lar-exit-1", lambda c: _fake(c, "exit1"), 3, lambda c: ["out"], ["failed", "exit"]),
    Row("lar-segv", lambda c: _fake(c, "segv"), 3, lambda c: ["out"], ["SIGSEGV", "signal", "crash"]),
    Row("lar-timeout", lambda c: _fake(c, "sleep", "--timeout", "2"), 3, lambda c: ["out"], ["did not finish within", "timed out"]),
    Row("lar-stalls", lambda c: _fake_stall(c), 3, lambda c: ["out"], ["stalled", "Xbyak"]),
    Row("stall-setting-bad", lambda c: _with_env(c, {"LAR_PREC_STALL_AFTER": "soon"}, _fake(c, "ok")), 2,
        lambda c: ["LAR_PREC_STALL_AFTER"], ["seconds", "expected", "must"]),
    Row("devices-local-lar-missing", lambda c: ["devices", c.model, *c.inputs(), "--local", "--lar", c.tmp / "no_lar",
                                                "--out", c.tmp / "out"], 2, lambda c: ["no_lar"], ["does not exist"]),
    Row("remote-dir-semicolon", lambda c: ["naive-vs-default", c.model, *c.inputs(), "--remote", "ssh:127.0.0.1:1",
                                           "--remote-dir", "/tmp/x;rm -rf /", "--out", c.tmp / "out"], 2,
        lambda c: ["--remote-dir"], ["expected"]),
    Row("remote-dir-newline", lambda c: ["naive-vs-default", c.model, *c.inputs(), "--remote", "ssh:127.0.0.1:1",
                                         "--remote-dir", "/tmp/a\nb", "--out", c.tmp / "out"], 2,
        lambda c: ["--remote-dir"], ["expected"]),
    Row("timeout-nan", lambda c: _fake(c, "ok", "--timeout", "nan"), 2, lambda c: ["timeout"],
        ["expected", "number", "positive"]),
    Row("out-under-a-file", _out_under_file, 2, lambda c: ["somefile"], ["folder", "expected", "cannot"]),
    Row("out-read-only", lambda c: ["run", c.model, *c.inputs(), "--out", _readonly_mount(c) / "run"], 2,
        lambda c: ["ro"], ["read-only", "not writable", "cannot"]),
    Row("default-out-in-read-only-cwd", _run_in_readonly_cwd, 2, lambda c: ["lar-prec-out"],
        ["read-only", "not writable", "cannot"]),
]


@pytest.mark.megengine
@pytest.mark.parametrize("row", params(RUNS_AND_BINARIES))
def test_bad_runs_and_binaries(row: Row, ctx: Ctx) -> None:
    check_row(row, ctx)


@pytest.mark.megengine
def test_an_unknown_reference_lists_each_target_once(ctx: Ctx) -> None:
    """Issue 41 #6: `devices MODEL --local --reference nosuch` listed the targets as "(local, local)"."""
    row = Row("devices-reference-unknown", lambda c: ["devices", c.model, *c.inputs(), "--local", "--reference",
                                                      "nosuch", "--out", c.tmp / "out"], 2,
              lambda c: ["--reference 'nosuch'"], ["is not one of the targets"])
    r = check_row(row, ctx)
    assert error_lines(r.stderr)[0].endswith("is not one of the targets; expected one of local"), r.stderr


def _run_json(folder: Path) -> dict:
    import json

    return json.loads(next(folder.rglob("run.json")).read_text())


@pytest.mark.megengine
def test_a_wrapper_waiting_on_a_lock_is_not_a_dead_run(ctx: Ctx) -> None:
    """Issue 41 #1: `run MODEL --lar lar.sh --timeout 60` where lar.sh is `flock gpu.lock
    load_and_run "$@"` and another job holds the lock for 10 s: the run waits (no CPU, asleep
    in the lock) past the stall watch's 5 s and finishes ok, exit 0 (it was "stalled", exit 3)."""
    import fcntl
    import threading

    lock = ctx.tmp / "gpu.lock"
    wrapper = ctx.tmp / "lar.sh"
    wrapper.write_text(f"#!/bin/sh\nexport PYTHONPATH={ROOT}\n"
                       f"[ \"$1\" = --version ] && exec {PY} -m lar_prec.lar --version\n"
                       f"exec flock {lock} {PY} -m lar_prec.lar \"$@\"\n")
    wrapper.chmod(0o755)
    with open(lock, "w") as held:
        fcntl.flock(held, fcntl.LOCK_EX)
        release = threading.Timer(10, held.close)  # the other job ends in 10 s
        release.start()
        try:
            r = lar_prec(["run", ctx.model, *ctx.inputs(), "--lar", wrapper, "--timeout", "60", "--out", ctx.tmp / "out"],
                         cwd=ctx.tmp, env={k: v for k, v in ctx.env.items() if k != "LAR_PREC_STALL_AFTER"})
        finally:
            release.cancel()
    assert r.returncode == 0, r.stderr
    rec = _run_json(ctx.tmp / "out")
    assert rec["status"] == "ok" and rec["seconds"] > 5, rec  # it waited past the grace period


@pytest.mark.megengine
def test_a_dead_megengine_is_stalled_within_10_s(ctx: Ctx) -> None:
    """Issue 41 #1: `run MODEL --lar fake_lar.py --timeout 60`, the stand-in printing MegEngine's
    fatal line, then every thread parked in a futex: "stalled", exit 3, under the default grace."""
    r = lar_prec(_fake(ctx, "stall", "--timeout", "60"), cwd=ctx.tmp, env=ctx.env)
    assert r.returncode == 3, r.stderr
    assert error_lines(r.stderr)[0].startswith("Error: load_and_run stalled: alive but using no CPU for 5 s"), r.stderr
    assert "stalled after: bad err=45 in Xbyak::Error" in r.stderr
    rec = _run_json(ctx.tmp / "out")
    assert rec["status"] == "stalled" and rec["seconds"] < 10, rec


# ----------------------------------------------------------------------------- outputs


def _some_file(c: Ctx) -> Path:
    (c.tmp / "somefile").write_text("keep me\n")
    return c.tmp / "somefile"


def _lar_copy(c: Ctx) -> Path:
    """A load_and_run of the user's (a copy of the stand-in binary in the scratch folder)."""
    dest = c.tmp / "my_lar.py"
    if not dest.exists():
        shutil.copy2(FAKE_LAR, dest)
    return dest


OUTPUTS = [
    Row("nvd-json-inside-out", lambda c: _nvd(c, "--json", c.tmp / "out" / "naive" / "run.json"), 2,
        lambda c: ["--json", "run.json"], ["inside the analysis folder"]),
    Row("nvd-html-inside-out", lambda c: _nvd(c, "--html", c.tmp / "out" / "default" / "dump" / "000001"), 2,
        lambda c: ["--html", "000001"], ["inside the analysis folder"]),
    Row("nvd-json-folder", lambda c: _nvd(c, "--json", c.tmp), 2, lambda c: [str(c.tmp)], ["folder", "expected"]),
    Row("nvd-json-under-file", lambda c: _nvd(c, "--json", _some_file(c) / "x.json"), 2, lambda c: ["somefile"],
        ["not a folder", "expected"]),
    Row("nvd-json-readonly", lambda c: _nvd(c, "--json", _readonly_mount(c) / "r.json"), 2, lambda c: ["r.json"],
        ["not writable", "read-only"]),
    Row("nvd-json-over-model", lambda c: _nvd(c, "--json", c.model), 2, lambda c: ["model.mge"], ["input", "expected"]),
    Row("nvd-html-over-input", lambda c: _nvd(c, "--html", c.data), 2, lambda c: ["data.npy"], ["input", "expected"]),
    Row("shake-json-over-model", lambda c: ["shake", c.model, *c.inputs(), "--out", c.tmp / "out", "-q", "--json",
                                            c.model], 2, lambda c: ["model.mge"], ["input", "expected"]),
    Row("shake-html-folder", lambda c: ["shake", c.model, *c.inputs(), "--out", c.tmp / "out", "-q", "--html",
                                        c.tmp], 2, lambda c: [str(c.tmp)], ["folder", "expected"]),
    Row("nvd-json-same-as-html", lambda c: _nvd(c, "--json", c.tmp / "r.x", "--html", c.tmp / "r.x"), 2,
        lambda c: ["r.x"], ["same file", "expected"]),
    Row("nvd-html-to-stdout", lambda c: _nvd(c, "--html", "-"), 2, lambda c: ["--html"], ["file path"]),
    Row("nvd-json-over-lar", lambda c: _nvd(c, "--lar", _lar_copy(c), "--json", _lar_copy(c)), 2,
        lambda c: ["my_lar.py"], ["input", "expected"]),
    Row("compare-json-over-dump-file", lambda c: ["compare", c.dump_a, c.dump_b, "--json",
                                                  first_dump_file(c.dump_a)], 2,
        lambda c: [first_dump_file(c.dump_a).name], ["input", "expected"]),
    Row("compare-json-into-dump-folder", lambda c: ["compare", c.dump_a, c.dump_b, "--json", c.dump_b / "r.json"], 2,
        lambda c: ["dump_b"], ["input", "expected"]),
    Row("compare-json-over-text-dump", lambda c: ["compare", c.dump_a, c.dump_b, "--text-dump", c.diff_txt,
                                                  "--json", c.diff_txt], 2, lambda c: ["diff.txt"],
        ["input", "expected"]),
    Row("tree-json-over-diff", lambda c: ["tree", c.diff_txt, "--json", c.diff_txt], 2, lambda c: ["diff.txt"],
        ["input", "expected"]),
]


@pytest.mark.megengine
@pytest.mark.parametrize("row", params(OUTPUTS))
def test_bad_outputs(row: Row, ctx: Ctx) -> None:
    """Refused before anything runs: no analysis folder is made."""
    check_row(row, ctx)
    assert not (ctx.tmp / "out").exists(), "an analysis ran before its output was checked"


# ----------------------------------------------------------------------------- signals


def _many_vars(c: Ctx) -> List[str]:
    """Two folders of 12,000 small vars: compare reads them for most of a second (idle
    2-core machine), long enough to be interrupted once it reads."""
    import numpy as np

    from compare_helpers import GraphDump

    x = np.linspace(-1, 1, 64, dtype=np.float32)
    ga = GraphDump(c.tmp / "many_a")
    for i in range(1, 12001):
        vid = 2 * i + 1
        ga.add(vid, x + i, inputs=[vid - 2] if i > 1 else [])
    shutil.copytree(c.tmp / "many_a", c.tmp / "many_b")
    return ["compare", c.tmp / "many_a", c.tmp / "many_b", "--json", c.tmp / "r.json"]


def _started_compare(c: Ctx, proc: subprocess.Popen) -> None:
    """Until compare holds a dump of many_a open (it reads them in under a second: a fixed
    sleep may come after the end)."""
    deadline = time.time() + 60
    while time.time() < deadline and proc.poll() is None:
        try:
            fds = os.listdir(f"/proc/{proc.pid}/fd")
            if any(os.readlink(f"/proc/{proc.pid}/fd/{fd}").startswith(str(c.tmp / "many_a")) for fd in fds):
                return
        except OSError:  # an fd closed while listed
            pass
        time.sleep(0.002)


def _started_run(c: Ctx, proc: subprocess.Popen) -> None:
    deadline = time.time() + 60
    while time.time() < deadline and not (c.tmp / "child.pid").exists():
        time.sleep(0.1)
    time.sleep(0.3)


@dataclass(frozen=True)
class SignalRow:
    id: str
    setup: Callable[[Ctx], List[str]]
    wait: Callable[[Ctx, subprocess.Popen], None]


SIGNALS = [
    SignalRow("compare", _many_vars, _started_compare),
    SignalRow("run", lambda c: _fake(c, "sleep"), _started_run),
    SignalRow("naive-vs-default", lambda c: ["naive-vs-default", *_fake(c, "sleep")[1:], "-q"], _started_run),
]


@pytest.mark.megengine
@pytest.mark.parametrize("row", [pytest.param(r, id=r.id) for r in SIGNALS])
def test_ctrl_c_exits_130(row: SignalRow, ctx: Ctx) -> None:
    """SIGINT to the whole process group, as a terminal's Ctrl-C: exit 130, one line, no
    traceback, nothing that existed before changed, no half report."""
    argv = row.setup(ctx)
    before = snapshot(ctx.tmp)
    env = {**os.environ, "PYTHONPATH": str(ROOT), **ctx.env}
    proc = subprocess.Popen([PY, "-m", "lar_prec", *map(str, argv)], cwd=ctx.tmp, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        row.wait(ctx, proc)
        assert proc.poll() is None, "finished before the signal: " + proc.stderr.read()
        os.killpg(proc.pid, signal.SIGINT)
        _, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    assert proc.returncode == 130, err
    assert "Traceback" not in err and "Aborted!" not in err, err
    assert len(error_lines(err)) == 1 and "interrupted" in error_lines(err)[0], err
    assert_intact(before, snapshot(ctx.tmp))
    assert not (ctx.tmp / "r.json").exists()


def _lar_making_folder(c: Ctx, where: Path) -> Path:
    """The bundled load_and_run behind a wrapper that first makes a folder at ``where`` (as a
    full disk would fail a write there at the end)."""
    wrapper = c.tmp / "lar.sh"
    # not on --helpfull: lar-prec asks for the flag list before it claims the analysis folder
    wrapper.write_text(f"#!/bin/sh\n[ \"$1\" = --helpfull ] || mkdir -p {where}\n"
                       f"PYTHONPATH={ROOT} exec {sys.executable} -m lar_prec.lar \"$@\"\n")
    wrapper.chmod(0o755)
    return wrapper


@pytest.mark.megengine
def test_mixed_prints_its_verdict_and_keep_list_before_a_late_write_fails(ctx: Ctx) -> None:
    """Issue 41 #4: `mixed MODEL --input ... --out OUT --lar lar.sh`, keep.json unwritable at the
    end: the verdict and the operators to keep on stdout, then one Error line naming keep.json,
    exit 2 (stdout was empty)."""
    out = ctx.tmp / "out"
    r = lar_prec(["mixed", ctx.model, *ctx.inputs(), "--out", out, "--lar", _lar_making_folder(ctx, out / "keep.json"),
                  "-q"], cwd=ctx.tmp, env=ctx.env)
    assert r.returncode == 2, r.stderr
    assert r.stdout.startswith("--enable-ioc16 alone") and f"keep-list: {out / 'keep.json'}" in r.stdout, r.stdout
    assert error_lines(r.stderr) == [r.stderr.strip()] and r.stderr.startswith("Error: cannot write the keep-list")
    assert "keep.json" in r.stderr


def test_the_verdict_is_printed_when_the_analysis_folder_cannot_take_the_report(ctx: Ctx) -> None:
    """Issue 21 §3: every run done, then report.json cannot be written (here a folder took its
    place while the runs ran, as a full disk would fail it): the verdict is shown, then the
    one-line error, exit 2."""
    out = ctx.tmp / "out"
    wrapper = ctx.tmp / "lar.sh"
    wrapper.write_text(f"#!/bin/sh\n[ \"$1\" = --helpfull ] || mkdir -p {out}/report.json\n"
                       f"PYTHONPATH={ROOT} exec {sys.executable} -m lar_prec.lar \"$@\"\n")
    wrapper.chmod(0o755)
    r = lar_prec(["naive-vs-default", ctx.model, *ctx.inputs(), "--out", out, "--lar", wrapper, "--no-local"],
                 cwd=ctx.tmp, env=ctx.env)
    assert r.returncode == 2, r.stderr
    assert "Verdict:" in r.stdout, r.stdout
    assert r.stderr.strip().splitlines()[-1].startswith("Error: ") and "report.json" in r.stderr
    assert len(list(out.rglob("run.json"))) == 2  # the runs are kept
