"""A repro folder is data, never code (issue 21 §1): a real repro folder from a real faulty
run, then each attack of the issue on a copy of it. Every hostile folder is refused with exit 2
naming the file and the key, nothing runs, nothing outside is written, and the untouched folder
still replays."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Callable

import pytest

from conftest import ROOT, run_lar
from lar_prec.diagnosis.local import local_errors, scale_constant
from lar_prec.diagnosis.replay import make_repros

pytestmark = pytest.mark.megengine


@pytest.fixture(scope="module")
def repro(manifest, lar_dump, tmp_path_factory) -> Path:
    """A repro folder written by lar-prec for a real fault (cnn's c2.weight x 1.001)."""
    case = manifest["cnn"]
    base = tmp_path_factory.mktemp("trust")
    model = scale_constant(case.model, "c2.weight", 1 + 1e-3, base / "faulty.mge")
    run_lar(model, case.input_specs(), base / "test-dump")
    result = local_errors(model, lar_dump("cnn", "naive"), "default", out_dir=base / "local",
                          test_dump=base / "test-dump")
    repros = make_repros(result, base / "repros")
    assert repros
    return repros[0].dir


def replay(folder: Path, *extra: str, env=None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "lar_prec", "replay", str(folder), *extra], capture_output=True,
                          text=True, timeout=300, cwd=folder.parent,
                          env={**os.environ, "PYTHONPATH": str(ROOT), **(env or {})})


def hostile_copy(repro: Path, tmp_path: Path) -> Path:
    d = tmp_path / "hostile"
    shutil.copytree(repro, d)
    return d


def edit(d: Path, change) -> None:
    rec = json.loads((d / "repro.json").read_text())
    change(rec)
    (d / "repro.json").write_text(json.dumps(rec))


def refused(proc: subprocess.CompletedProcess, *words: str) -> None:
    assert proc.returncode == 2, (proc.returncode, proc.stdout, proc.stderr)
    line = proc.stderr.strip().splitlines()[-1]
    assert line.startswith("Error: ") and "Traceback" not in proc.stderr, proc.stderr
    for w in words:
        assert w in line, (w, line)
    assert "nothing was run" in line, line


def test_the_untouched_repro_replays_and_writes_nothing_into_its_folder(repro, tmp_path):
    d = hostile_copy(repro, tmp_path)
    before = sorted(p.relative_to(d) for p in d.rglob("*"))
    os.chmod(d, 0o555)  # a read-only folder (a downloaded archive, a shared mount) replays too
    try:
        proc = replay(d)
    finally:
        os.chmod(d, 0o755)
    assert proc.returncode == 1, proc.stderr  # the fault is reproduced
    assert proc.stdout.startswith("reproduced")
    assert sorted(p.relative_to(d) for p in d.rglob("*")) == before


def test_code_placed_in_the_folder_never_runs(repro, tmp_path):
    """The issue's attack: PYTHONPATH to a sitecustomize.py of the folder, via test.env."""
    d = hostile_copy(repro, tmp_path)
    victim = tmp_path / "victim.txt"
    (d / "x").mkdir()
    (d / "x" / "sitecustomize.py").write_text(f"open({str(victim)!r}, 'w').write('pwned')\n")
    for var, value in (("PYTHONPATH", str(d / "x")), ("LD_PRELOAD", str(d / "x" / "evil.so")),
                       ("PYTHONSTARTUP", str(d / "x" / "sitecustomize.py")), ("MGB_USE_MEGDNN_DBG", "0")):
        edit(d, lambda r: r["test"]["env"].append([var, value]))
        refused(replay(d), "repro.json", "test.env")
        assert not victim.exists()
        shutil.copy(repro / "repro.json", d / "repro.json")


@pytest.mark.parametrize("flags", [
    ["--rewritten-model", "VICTIM"], ["--bin-io-dump", "DIR"], ["--io-dump=VICTIM"], ["--input", "data:/etc/passwd"],
    ["--fast-run-algo-policy", "VICTIM"], ["--layout-transform-dump", "VICTIM"], ["--iter", "100000"],
    ["--unknown-flag"], ["-x"], ["--multithread", "4; rm -rf /"], ["--enable-nchw44=maybe"], ["--layout-transform"],
])
def test_flags_that_write_read_files_or_are_unknown_are_refused(repro, tmp_path, flags):
    d = hostile_copy(repro, tmp_path)
    victim = tmp_path / "VICTIM"
    flags = [f.replace("VICTIM", str(victim)).replace("DIR", str(tmp_path / "dir")) for f in flags]
    edit(d, lambda r: r["test"].__setitem__("flags", r["test"]["flags"] + flags))
    refused(replay(d), "repro.json", "test.flags")
    assert not victim.exists() and not (tmp_path / "dir").exists()


def test_allowed_flags_still_replay(repro, tmp_path):
    """What sweep writes (an option's flags with values) passes the check."""
    d = hostile_copy(repro, tmp_path)
    edit(d, lambda r: r["test"].__setitem__("flags", r["test"]["flags"] + ["--multithread", "1", "--weight-preprocess"]))
    proc = replay(d)
    assert proc.returncode in (0, 1), proc.stderr


@pytest.mark.parametrize("inputs", ["data:../x.npy", "data:/tmp/x.npy", "data:inputs/../../x.npy", "data:x.npy",
                                    "data", "data:inputs/.hidden.npy", 42])
def test_inputs_outside_the_folder_are_refused(repro, tmp_path, inputs):
    d = hostile_copy(repro, tmp_path)
    edit(d, lambda r: r.__setitem__("inputs", inputs))
    refused(replay(d), "repro.json", "inputs")


@pytest.mark.parametrize("name", ["log-test", "dump-test", "model.mge", "reference.npy", "inputs"])
def test_symlinks_in_the_folder_are_refused_and_their_targets_untouched(repro, tmp_path, name):
    d = hostile_copy(repro, tmp_path)
    victim = tmp_path / "victim"
    victim.write_text("keep me")
    target = d / name
    if target.is_dir():
        shutil.rmtree(target)
    elif target.exists():
        target.unlink()
    if name == "inputs":
        real = tmp_path / "elsewhere"
        shutil.copytree(repro / "inputs", real)
        target.symlink_to(real, target_is_directory=True)
    else:
        target.symlink_to(victim)
    proc = replay(d)
    if name in ("log-test", "dump-test"):
        # never read nor written by replay (it works in a private copy): the run goes on
        assert proc.returncode in (0, 1), proc.stderr
    else:
        refused(proc, name if name != "inputs" else "inputs")
    assert victim.read_text() == "keep me"


def test_a_fifo_as_reference_is_refused_without_hanging(repro, tmp_path):
    d = hostile_copy(repro, tmp_path)
    (d / "reference.npy").unlink()
    os.mkfifo(d / "reference.npy")
    refused(replay(d), "reference.npy", "regular file")


def test_a_pickled_npy_is_refused(repro, tmp_path):
    import numpy as np

    d = hostile_copy(repro, tmp_path)
    np.save(d / "observed.npy", np.array([{"a": 1}], dtype=object), allow_pickle=True)
    refused(replay(d), "observed.npy")


@pytest.mark.parametrize("text,key", [
    ("", "strict JSON"), ("[1, 2]", "JSON object"), ("{", "strict JSON"), ('{"schema": "x"}', "schema"),
    ('{"schema": "lar-prec.repro/1"}', "var"), ("NaN", "strict JSON"),
    ('{"schema": "lar-prec.repro/1", "var": {"id": "7", "output": "x"}}', "var.id"),
    ('{"schema": "lar-prec.repro/1", "var": {"id": 7, "output": "x"}, "local_err": Infinity}', "strict JSON"),
    ('{"schema": "lar-prec.repro/1", "var": {"id": 7, "output": "x"}, "local_err": "big"}', "local_err"),
    ('{"schema": "lar-prec.repro/1", "var": {"id": 7, "output": "x"}, "local_err": 0.1, "inputs": "d:inputs/d.npy",'
     ' "test": {"name": "evil", "flags": [], "env": []}}', "test.name"),
    ('{"schema": "lar-prec.repro/1", "var": {"id": 7, "output": "x"}, "local_err": 0.1, "inputs": "d:inputs/d.npy",'
     ' "test": {"name": "default", "flags": "--cpu", "env": []}}', "test.flags"),
    ('{"schema": "lar-prec.repro/1", "var": {"id": 7, "output": "x"}, "local_err": 0.1, "inputs": "d:inputs/d.npy",'
     ' "test": {"name": "default", "flags": [], "env": {"A": "b"}}}', "test.env"),
])
def test_malformed_records_are_exit_2_naming_the_key(repro, tmp_path, text, key):
    d = hostile_copy(repro, tmp_path)
    (d / "repro.json").write_text(text)
    refused(replay(d), "repro.json", key)


def _npy_header(path: Path, shape: tuple) -> None:
    """A float32 .npy header claiming ``shape``, followed by 64 bytes."""
    from numpy.lib import format as npy_format

    with open(path, "wb") as fh:
        npy_format.write_array_header_1_0(fh, {"descr": "<f4", "fortran_order": False, "shape": shape})
        fh.write(bytes(64))


def _sparse_model(d: Path) -> None:
    """A 6 GB model.mge of zeros that takes no room on disk."""
    with open(d / "model.mge", "wb") as fh:
        fh.truncate(6 << 30)


def _input_twice(d: Path) -> None:
    edit(d, lambda r: r.__setitem__("inputs", r["inputs"] + ";again:" + r["inputs"].split(";")[0].split(":", 1)[1]))


def _save(name: str, make) -> "Callable[[Path], None]":
    def setup(d: Path) -> None:
        import numpy as np

        np.save(d / name, make(np))
    return setup


@pytest.mark.parametrize("setup,words", [
    (lambda d: (d / "repro.json").write_text("[" * 50_000 + "]" * 50_000), ["repro.json", "nested deeper"]),
    (_input_twice, ["repro.json", "'inputs' must be each input name and file once"]),
    (_save("reference.npy", lambda np: np.zeros((3, 3), np.float32)), ["reference.npy", "expected the output's shape"]),
    (_save("reference.npy", lambda np: np.array(["abc"] * 8)), ["reference.npy", "found dtype <U3"]),
    (lambda d: _npy_header(d / "observed.npy", (1 << 40,)), ["observed.npy", "4398046511104 bytes of data"]),
    (_sparse_model, ["model.mge", "expected a MegEngine model"]),
], ids=["json-nested-50000", "input-file-twice", "reference-other-shape", "reference-strings", "npy-claims-4-tb",
        "sparse-6-gb-model"])
def test_data_a_folder_can_hold_is_exit_2_in_bounded_memory(repro, tmp_path, setup, words):
    """Issue 41 #3: each of these ended `lar-prec replay DIR` with exit 4 (RecursionError,
    FileExistsError, ValueError, MemoryError). Now exit 2 naming the file, "nothing was run",
    under a 3 GB address-space limit (sizes are checked before anything is read)."""
    import resource

    d = hostile_copy(repro, tmp_path)
    setup(d)
    limit = 3 << 30
    proc = subprocess.run([sys.executable, "-m", "lar_prec", "replay", str(d)], capture_output=True, text=True,
                          timeout=300, cwd=d.parent, env={**os.environ, "PYTHONPATH": str(ROOT),
                                                          "OPENBLAS_NUM_THREADS": "1"},
                          preexec_fn=lambda: resource.setrlimit(resource.RLIMIT_AS, (limit, limit)))
    refused(proc, *words)


def test_a_folder_that_is_not_a_directory_is_exit_2(tmp_path):
    f = tmp_path / "f"
    f.write_text("x")
    refused(replay(f), str(f))


def test_a_fast_run_repro_carries_its_algorithm_cache_and_replays(repro, tmp_path):
    """A fast-run repro pins its algorithms with a cache: it travels in the folder under one
    fixed name, the only path replay accepts for --fast-run-algo-policy."""
    d = hostile_copy(repro, tmp_path)
    inputs = json.loads((d / "repro.json").read_text())["inputs"]
    items = ";".join(f"{n}:{d / f}" for n, f in (i.split(":", 1) for i in inputs.split(";")))
    made = subprocess.run([sys.executable, "-m", "lar_prec.lar", str(d / "model.mge"), "--input", items, "--iter", "1",
                           "--fast-run", "--fast-run-algo-policy", str(d / "algo-policy.cache")],
                          capture_output=True, text=True, timeout=300, env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert made.returncode == 0 and (d / "algo-policy.cache").is_file(), made.stderr[-2000:]
    edit(d, lambda r: r["test"].__setitem__("flags", ["--fast-run", "--fast-run-algo-policy", "algo-policy.cache"]))
    proc = replay(d)
    assert proc.returncode in (0, 1), proc.stderr
    edit(d, lambda r: r["test"].__setitem__("flags", ["--fast-run", "--fast-run-algo-policy", str(d / "algo-policy.cache")]))
    refused(replay(d), "test.flags", "algo-policy.cache")
