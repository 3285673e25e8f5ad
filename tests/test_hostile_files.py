"""Every file a command reads is data, read with limits (issue 54 items 4 to 6).

The hostile-file matrix: random bytes, UTF-16, a latin-1 line, JSON nested 100,000 deep, TOML
nested 50,000 deep, a FIFO, /dev/zero and a file over the size bound, each handed to every
command that reads a file (a baseline to ``check --baseline`` and ``baseline update``, a
report to ``list`` and ``node``, an analysis folder's report.json to ``check DIR``, ``store
add``, ``reduce`` and ``diff DIR_A DIR_B``, a manifest to ``zoo``): exit 2 with one ``Error:``
line naming the file, no traceback, no hang (each command under a subprocess timeout). The
valid files around them (the store, the other analysis folder) come from one real
naive-vs-default run of the mlp case with ``--store``.

Then the smaller items: a baseline line with ``output_err=nan``, manifest numbers past the
CLI's bounds and ``[[build]]`` paths (resolved from the manifest's folder, a build that is not
a program said so), bisect's ``--builds`` entries left out, a load_and_run that exits 0
without a dump (exit 3 in diff and bisect alike), and another program's Alembic database.
"""
from __future__ import annotations

import os
import random
import sqlite3
import subprocess
import sys
from pathlib import Path
from typing import Callable, Dict, List

import pytest

from conftest import ROOT
from lar_prec.errors import StoreError
from lar_prec.inputspec import READ_LIMIT
from lar_prec.store.db import open_store
from lar_prec.workflows.bisect.bisect import read_builds
from lar_prec.workflows.history.history import BASELINE_LIMIT
from lar_prec.zoo.manifest import MANIFEST_LIMIT, ManifestError, load_manifest

#: no command here may take longer (a FIFO opened for reading would block for ever)
TIMEOUT = 90


def cli(*args: object, cwd: Path = ROOT, timeout: float = TIMEOUT) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "LAR_PREC_STORE": ""}
    return subprocess.run([sys.executable, "-m", "lar_prec", *map(str, args)], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL)


def one_error_line(p: subprocess.CompletedProcess) -> str:
    assert "Traceback" not in p.stderr, p.stderr
    lines = [ln for ln in p.stderr.splitlines() if ln.startswith("Error:")]
    assert len(lines) == 1, p.stderr
    return lines[0]


@pytest.fixture(scope="module")
def analysis(manifest, tmp_path_factory) -> Dict[str, Path]:
    """A real naive-vs-default of mlp written into a new store: the valid files around the hostile one."""
    tmp = tmp_path_factory.mktemp("hostile")
    case = manifest["mlp"]
    p = cli("naive-vs-default", case.model, "--input", ";".join(case.input_specs()), "--out", tmp / "a",
            "--store", tmp / "r.db", "-q", timeout=600)
    assert p.returncode == 0, p.stderr
    return {"dir": tmp / "a", "db": tmp / "r.db", "tmp": tmp}


# ------------------------------------------------------------------------------ the hostile files


def _write(content: bytes) -> Callable[[Path, int], Path]:
    def make(path: Path, limit: int) -> Path:
        path.write_bytes(content)
        return path
    return make


def _fifo(path: Path, limit: int) -> Path:
    os.mkfifo(path)
    return path


def _dev_zero(path: Path, limit: int) -> Path:
    path.symlink_to("/dev/zero")
    return path


def _huge(path: Path, limit: int) -> Path:
    with open(path, "wb") as fh:  # sparse: one byte over the reader's bound costs no disk
        fh.truncate(limit + 1)
    return path


HOSTILE: Dict[str, Callable[[Path, int], Path]] = {
    "random-bytes": _write(random.Random(54).randbytes(4096)),
    "utf-16": _write("# lar-prec baseline\nm@1 | c | d | e | verdict=ok output_err=null roots=0\n".encode("utf-16")),
    "latin-1-line": _write("# lar-prec baseline\n# caf\u00e9 nightly\n".encode("latin-1")),
    "deep-json": _write(b"[" * 100_000 + b"]" * 100_000),
    "deep-toml": _write(b"a = " + b"[" * 50_000 + b"]" * 50_000 + b"\n"),
    "fifo": _fifo,
    "dev-zero": _dev_zero,
    "huge": _huge,
}


def _baseline_check(a: Dict[str, Path], f: Path) -> List[object]:
    return ["check", "--store", a["db"], "--baseline", f, a["dir"]]


def _baseline_update(a: Dict[str, Path], f: Path) -> List[object]:
    return ["baseline", "update", "--store", a["db"], "--baseline", f]


def _in_folder(f: Path) -> Path:
    """An analysis folder whose report.json is the hostile file (moved there: a FIFO stays one)."""
    folder = f.parent / "adir"
    folder.mkdir()
    f.rename(folder / "report.json")
    return folder


#: command -> (argv from the analysis and the hostile file, the reader's size bound, the file in the line)
READERS = {
    "check --baseline": (_baseline_check, BASELINE_LIMIT),
    "baseline update": (_baseline_update, BASELINE_LIMIT),
    "check DIR": (lambda a, f: ["check", "--store", a["db"], _in_folder(f)], READ_LIMIT),
    "store add DIR": (lambda a, f: ["store", "add", "--store", a["db"], _in_folder(f)], READ_LIMIT),
    "list REPORT": (lambda a, f: ["list", f], READ_LIMIT),
    "list DIR": (lambda a, f: ["list", _in_folder(f)], READ_LIMIT),
    "node REPORT": (lambda a, f: ["node", f, "data"], READ_LIMIT),
    "reduce DIR": (lambda a, f: ["reduce", _in_folder(f), "--out", f.parent / "r"], READ_LIMIT),
    "diff DIR_A DIR_B": (lambda a, f: ["diff", _in_folder(f), a["dir"], "--out", f.parent / "d"], READ_LIMIT),
    "zoo MANIFEST": (lambda a, f: ["zoo", f, "--store", a["tmp"] / "zoo.db", "--out", f.parent / "z"],
                     MANIFEST_LIMIT),
}


@pytest.mark.megengine
@pytest.mark.parametrize("kind", sorted(HOSTILE))
@pytest.mark.parametrize("reader", sorted(READERS))
def test_a_hostile_file_is_exit_2_in_one_line_and_never_hangs(reader, kind, analysis, tmp_path):
    argv_of, limit = READERS[reader]
    f = HOSTILE[kind](tmp_path / ("zoo.toml" if reader.startswith("zoo") else "file"), limit)
    argv = argv_of(analysis, f)
    where = str(f if f.exists() or f.is_symlink() else f.parent / "adir" / "report.json")
    p = cli(*argv)  # a hang fails here: subprocess.TimeoutExpired
    assert p.returncode == 2, (p.returncode, p.stderr[-2000:])
    line = one_error_line(p)
    assert where in line, line
    language = "toml" if reader.startswith("zoo") else "baseline" if "baseline" in reader else "json"
    said = {"random-bytes": "not UTF-8", "utf-16": "not UTF-8", "latin-1-line": "not UTF-8",
            "fifo": "(a FIFO)", "dev-zero": "(a device)", "huge": f"expected at most {limit}"}.get(kind)
    if said is None:  # a deep file: too deep for the reader of its own language, not of that language for another
        said = ("nested deeper" if kind == f"deep-{language}" else {
            "toml": "not a TOML file", "json": "not valid JSON", "baseline": "(a lar-prec baseline)"}[language])
    assert said in line, line
    if kind == "latin-1-line":
        assert f"{where} line 2" in line, line


def test_a_baseline_line_with_a_nan_error_is_refused_not_as_recorded(analysis, tmp_path):
    base = tmp_path / "baseline.txt"
    assert cli("baseline", "update", "--store", analysis["db"], "--baseline", base).returncode == 0
    good = cli("check", "--store", analysis["db"], "--baseline", base, analysis["dir"], "--json", "-")
    assert good.returncode == 0 and '"state": "same"' in good.stdout, good.stdout + good.stderr
    lines = base.read_text().splitlines()
    n = next(i for i, ln in enumerate(lines) if "output_err=" in ln and not ln.startswith("#"))
    for bad in ("nan", "inf", "-1e-3"):
        lines[n] = lines[n].split(" output_err=")[0] + f" output_err={bad} roots=0"
        base.write_text("\n".join(lines) + "\n")
        p = cli("check", "--store", analysis["db"], "--baseline", base, analysis["dir"])
        assert p.returncode == 2, p.stdout + p.stderr
        line = one_error_line(p)
        assert f"{base} line {n + 1}" in line and f"output_err={bad}" in line and "finite" in line


# ------------------------------------------------------------------------------ manifests


def _manifest(folder: Path, manifest, body: str) -> Path:
    case = manifest["mlp"]
    inputs = ", ".join(f'"{s}"' for s in case.input_specs())
    p = folder / "zoo.toml"
    p.write_text(f'[[model]]\nname = "mlp"\npath = "{case.model}"\ninputs = [{inputs}]\n'
                 f'[[run]]\ncommand = "naive-vs-default"\n{body}')
    return p


@pytest.mark.parametrize("body, key, span", [
    ("[zoo]\nretries = 99999999999999999999\n", "retries", "from 0 to 100"),
    ("[zoo]\nretries = -1\n", "retries", "from 0 to 100"),
    ("[zoo]\ntimeout = 1e300\n", "timeout", "over 0 and at most 604800"),
    ("[zoo]\nseed = 99999999999999999999\n", "seed", "from 0 to"),
    ("[zoo]\nmin_history = 0\n", "min_history", "from 1 to 10000"),
    ('[[run]]\ncommand = "shake"\nrepeat = 1000000000\n', "repeat", "from 2 to 1000"),
    ('[[run]]\ncommand = "shake"\nrepeat = 1\n', "repeat", "from 2 to 1000"),
    ('[[run]]\ncommand = "naive-vs-default"\ntimeout = 0\n', "timeout", "over 0 and at most 604800"),
    ('[[run]]\ncommand = "naive-vs-default"\nthreshold = inf\n', "threshold", "a finite number >= 0"),
])
def test_manifest_numbers_are_bounded_as_the_cli_bounds_them(manifest, tmp_path, body, key, span):
    m = _manifest(tmp_path, manifest, body)
    with pytest.raises(ManifestError) as err:
        load_manifest(m)
    msg = str(err.value)
    assert msg.startswith(f"{m}: ") and f"{key} = " in msg and span in msg, msg


def test_retries_past_the_bound_is_exit_2_on_the_command_line(manifest, tmp_path):
    """The issue's probe: Dask's OverflowError traceback and a hang before; now one line before anything runs."""
    m = _manifest(tmp_path, manifest, "[zoo]\nretries = 99999999999999999999\n")
    p = cli("zoo", m, "--store", tmp_path / "z.db", "--out", tmp_path / "z")
    assert p.returncode == 2, p.stderr
    line = one_error_line(p)
    assert str(m) in line and "[zoo]" in line and "retries" in line and "from 0 to 100" in line


def test_build_paths_are_the_manifest_folders_and_a_build_that_is_no_program_is_said_so(manifest, tmp_path):
    sub = tmp_path / "zoo"
    (sub / "bin").mkdir(parents=True)
    lar = sub / "bin" / "lar"
    lar.write_text("#!/bin/sh\nexit 0\n")
    lar.chmod(0o755)
    body = '[[build]]\nname = "mine"\npath = "bin/lar"\n'
    m = load_manifest(_manifest(sub, manifest, body))  # read from elsewhere: the path is the manifest's
    assert os.getcwd() != str(sub) and [b.path for b in m.builds] == [str(lar)]
    lar.chmod(0o644)
    (sub / "bin" / "dir").mkdir()
    (sub / "bin" / "loop").symlink_to("loop")
    for path, why in (("bin/lar", "is not executable"), ("bin/dir", "is a folder, not a program"),
                      ("bin/loop", "is a symlink loop"), ("bin/none", "does not exist")):
        p = _manifest(sub, manifest, f'[[build]]\nname = "bundled"\n[[build]]\nname = "mine"\npath = "{path}"\n')
        with pytest.raises(ManifestError) as err:
            load_manifest(p)
        assert str(err.value) == f"{p}: [[build]] #2: build 'mine': path {sub / path} {why}" + (
            " (chmod +x?)" if why == "is not executable" else "")
    # a build that runs on a device only is the device's to say about: not checked here
    remote = ('[[build]]\nname = "board"\npath = "bin/none"\ndevices = ["board"]\n'
              '[[device]]\nname = "board"\nremote = "ssh:me@board"\n')
    assert load_manifest(_manifest(sub, manifest, remote)).builds[0].path == str(sub / "bin" / "none")


# ------------------------------------------------------------------------------ builds


def test_bisect_lists_every_entry_of_builds_it_leaves_out(tmp_path):
    folder = tmp_path / "builds"
    folder.mkdir()
    for name in ("1-good", "3-bad", ".hidden"):
        (folder / name).write_text("#!/bin/sh\nexit 0\n")
        (folder / name).chmod(0o755)
    (folder / "2-lost-x").write_text("#!/bin/sh\nexit 0\n")
    (folder / "4-folder").mkdir()
    (folder / "5-loop").symlink_to("5-loop")
    builds, left_out = read_builds(str(folder))
    assert [b.name for b in builds] == ["1-good", "3-bad"]
    assert {Path(e["path"]).name: e["why"] for e in left_out} == {
        ".hidden": "a hidden file (its name starts with '.')", "2-lost-x": "is not executable (chmod +x?)",
        "4-folder": "is a folder, not a program", "5-loop": "is a symlink loop"}


@pytest.mark.megengine
def test_a_build_that_exits_0_without_a_dump_is_exit_3_in_diff_and_bisect(manifest, tmp_path):
    case = manifest["mlp"]
    nodump = tmp_path / "builds" / "2-nodump"
    nodump.parent.mkdir()
    nodump.write_text("#!/bin/sh\nexit 0\n")
    nodump.chmod(0o755)
    good = nodump.parent / "1-good"
    good.write_text(f"#!/bin/sh\nPYTHONPATH={ROOT} exec {sys.executable} -m lar_prec.lar \"$@\"\n")
    good.chmod(0o755)
    inputs = ";".join(case.input_specs())
    d = cli("diff", case.model, "--input", inputs, "--a-lar", "bundled", "--b-lar", nodump, "--repeat", "2",
            "--out", tmp_path / "d", "-q", timeout=600)
    b = cli("bisect", case.model, "--input", inputs, "--builds", nodump.parent, "--good", "1", "--bad", "2",
            "--out", tmp_path / "b", "-q", timeout=600)
    for p in (d, b):
        assert p.returncode == 3, p.stderr
        assert "no binary dump files" in one_error_line(p)


# ------------------------------------------------------------------------------ stores


def test_another_programs_alembic_database_is_not_a_lar_prec_store(tmp_path):
    db = tmp_path / "other.db"
    with sqlite3.connect(db) as conn:
        conn.execute("CREATE TABLE alembic_version (version_num VARCHAR(32) NOT NULL PRIMARY KEY)")
        conn.execute("INSERT INTO alembic_version VALUES ('ae1027a6acf')")
        conn.execute("CREATE TABLE users (id INTEGER PRIMARY KEY, name TEXT)")
    with pytest.raises(StoreError) as err:
        open_store(str(db))
    msg = str(err.value)
    assert "not a lar-prec store" in msg and "'ae1027a6acf'" in msg and "users" in msg and "newer" not in msg
