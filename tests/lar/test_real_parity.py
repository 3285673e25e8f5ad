"""The bundled runner (``python -m lar_prec.lar``) side by side with MegEngine 1.13's own C++
load_and_run (`make real-lar`; issue 52 #5), on every flag lar-prec passes: both accept it, both
write the dump asked for, both name their MegBrain/MegDNN versions first on stderr, and their
outputs agree within float32 rounding. Where they differ on purpose, the difference is named.
"""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import List, Sequence, Tuple

import numpy as np
import pytest

from conftest import ROOT
from lar_prec.dumps.binary import read_binary_dump
from lar_prec.dumps.folder import DumpFolder
from lar_prec.dumps.textdump import read_text_dump
from lar_prec.run.probe import versions_from_stderr
from lar_prec.workflows.sweep.options import OPTIONS

pytestmark = [pytest.mark.real_lar, pytest.mark.megengine]

#: the flags of every configuration and of every sweep option this CPU runs, as lar-prec passes them
FLAG_SETS: List[Tuple[str, ...]] = [
    ("--cpu",), ("--cpu", "--reproducible"), ("--cpu", "--fast-run"), ("--cpu", "--multithread", "2"),
    ("--cpu", "--verbose"), ("--cpu", "--model-info"),
    *[("--cpu", *o.flags) for name, o in OPTIONS.items()
      if name not in ("io16xc32", "record-comp-seq", "record-comp-seq2", "chwn4", "nchw4", "nchw32", "nchw64")],
]
#: named differences: flags one of them takes and the other does not
ONLY_BUNDLED = {"--enable-io16xc32": "lar-prec's own graph rewrite (fp16 I/O, fp32 compute): not a load_and_run flag"}


def run(argv: Sequence[str], cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run(list(argv), cwd=cwd, capture_output=True, text=True, timeout=600,
                          env={**os.environ, "PYTHONPATH": str(ROOT)}, stdin=subprocess.DEVNULL)


def both(real_lar: Path, case, tmp: Path, flags: Sequence[str], dump: str = "bin") -> dict:
    out = {}
    for tag, prefix in (("bundled", [sys.executable, "-m", "lar_prec.lar"]), ("real", [str(real_lar)])):
        where = tmp / tag
        where.mkdir(parents=True)
        target = where / ("io.txt" if dump == "text" else "dump")
        if dump != "text":
            target.mkdir()
        dump_flag = {"bin": "--bin-io-dump", "text": "--io-dump", "out": "--bin-out-dump"}[dump]
        p = run([*prefix, str(case.model), "--input", ";".join(case.input_specs()), "--iter", "1",
                 "--warmup-iter", "0", dump_flag, str(target), *flags], where)
        out[tag] = (p, target)
    return out


def output_of(folder: Path) -> np.ndarray:
    """The model's output (the last var named Softmax) of a --bin-io-dump folder."""
    f = DumpFolder(folder)
    vid = [d.id for d in f if d.var.name == "Softmax"][-1]
    return np.asarray(f[vid].array(), dtype=np.float64)


@pytest.mark.slow
@pytest.mark.parametrize("flags", FLAG_SETS, ids=lambda f: " ".join(f))
def test_every_flag_lar_prec_passes_works_alike(real_lar, manifest, tmp_path, flags):
    case = manifest["cnn"]
    got = both(real_lar, case, tmp_path, flags)
    for tag, (p, folder) in got.items():
        assert p.returncode == 0, (tag, p.stderr[-3000:])
        v = versions_from_stderr(p.stderr)
        assert v is not None and (v.megbrain, v.megdnn) == ("1.13.0", "9.3.0"), (tag, p.stderr[:500])
    a, b = output_of(got["bundled"][1]), output_of(got["real"][1])
    assert a.shape == b.shape
    if "--enable-ioc16" not in flags:  # ioc16's pooling reads memory it did not write here (sweep says so):
        assert np.max(np.abs(a - b)) <= 1e-5, (flags, np.max(np.abs(a - b)))  # its outputs differ run to run
    if "--model-info" in flags:  # the same table of inputs and outputs
        for p, _ in got.values():
            assert "| data " in p.stderr.replace("|  data", "| data") or "data" in p.stderr
    if "--verbose" in flags:  # MegEngine's algorithm chooser names its choices in both
        assert all("algo=" in p.stderr for p, _ in got.values())


@pytest.mark.slow
def test_text_and_output_dumps_alike(real_lar, manifest, tmp_path):
    case = manifest["cnn"]
    got = both(real_lar, case, tmp_path / "text", ("--cpu",), dump="text")
    names = {}
    for tag, (p, path) in got.items():
        assert p.returncode == 0, p.stderr[-2000:]
        names[tag] = [v.name for v in read_text_dump(path).executions[-1]]
    # the same vars; in execution order of each mode (lite and MDL order constants differently)
    assert sorted(names["bundled"]) == sorted(names["real"]) and "Softmax" in names["real"]
    got = both(real_lar, case, tmp_path / "out", ("--cpu",), dump="out")
    files = {tag: sorted(x.name for x in folder.iterdir()) for tag, (p, folder) in got.items()}
    # named difference: the real tool names the file by the output's var id (MDL ids), the
    # bundled runner by its index (lite does not tell var ids); both titles name the var
    assert len(files["real"]) == len(files["bundled"]) == 1 and files["real"][0].startswith("run0-var")
    assert files["bundled"] == ["run0-out0"]
    for tag, (p, folder) in got.items():
        assert "name:Softmax" in read_binary_dump(folder / files[tag][0]).title


def test_record_mode_with_a_dump_is_the_one_behaviour_that_differs(real_lar, manifest, tmp_path):
    """Named difference: MegEngine's load_and_run aborts at exit when record mode dumps (the
    dumper writes when destroyed, after the graph); the bundled runner, on lite, dumps. Both
    dump the outputs alone (--bin-out-dump) in record mode."""
    case = manifest["cnn"]
    got = both(real_lar, case, tmp_path / "bin", ("--cpu", "--record-comp-seq"))
    assert got["bundled"][0].returncode == 0 and len(DumpFolder(got["bundled"][1])) > 0
    p = got["real"][0]
    assert p.returncode == -6 and "pure virtual method called" in p.stderr
    got = both(real_lar, case, tmp_path / "out", ("--cpu", "--record-comp-seq"), dump="out")
    assert all(p.returncode == 0 and any(folder.iterdir()) for p, folder in got.values())


def test_unknown_flags_version_and_flag_lists_alike(real_lar, manifest, tmp_path):
    case = manifest["cnn"]
    for flag in ("--enbale-jit", "--no-such-flag=3"):
        got = {tag: run([*prefix, str(case.model), flag], tmp_path) for tag, prefix in
               (("bundled", [sys.executable, "-m", "lar_prec.lar"]), ("real", [str(real_lar)]))}
        name = flag.lstrip("-").split("=")[0]
        for p in got.values():
            assert p.returncode == 1 and f"ERROR: unknown command line flag '{name}'" in p.stderr, p.stderr
    v = [run([*prefix, "--version"], tmp_path).stdout for prefix in ([sys.executable, "-m", "lar_prec.lar"],
                                                                   [str(real_lar)])]
    assert v[0] == v[1] == "load_and_run version 1.0\n"
    for flag, why in ONLY_BUNDLED.items():
        p = run([str(real_lar), str(case.model), flag], tmp_path)
        assert p.returncode == 1 and "unknown command line flag" in p.stderr, why
