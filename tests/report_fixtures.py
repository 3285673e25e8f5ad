"""Reports of a real comparison, shared by test_report.py and test_report_html.py: the attention
case run with naive and default kernels, one operator's output corrupted in a copy of the
default dump (a fault) and another given a NaN (a NaN origin), compared and rooted."""
from __future__ import annotations

import math
import shutil
from dataclasses import replace
from pathlib import Path
from typing import Optional, Tuple

import numpy as np
import pytest

from lar_prec.dumps.folder import DumpFolder
from lar_prec.report.model import Report, from_tree
from lar_prec.report.records import ReportRun
from lar_prec.diagnosis.tree import VarTree

THRESHOLD = 1e-5
FAULT_TYPE = "SoftmaxForward"  # corrupted by a relative 1e-3 error
NAN_NAME = "GELU"  # gets a NaN where the naive run has a finite value


# ============================================================================ building reports from real dumps


def _corrupt(folder: Path, var_id: int, fn) -> None:
    """Apply ``fn`` to the values of one dump file in place (float32 data)."""
    d = DumpFolder(folder)[var_id]
    mm = np.memmap(d.path, dtype=d.dtype.storage, mode="r+", offset=d.data_offset, shape=(d.size,))
    fn(mm)
    mm.flush()
    del mm


def _metrics(a: np.ndarray, b: np.ndarray) -> Tuple[str, float, Optional[float], Optional[float]]:
    """status (before the threshold), MegEngine max_err, max |a-b|, cosine; NaN in the same
    place in both is equal, a non-finite value on one side only is a NaN max_err."""
    a = a.astype(np.float64).ravel()
    b = b.astype(np.float64).ravel()
    if a.size == 0:
        return "ok", 0.0, 0.0, None
    fa, fb = np.isfinite(a), np.isfinite(b)
    same_nonfinite = (~fa & ~fb) & ((np.isnan(a) & np.isnan(b)) | (a == b))
    if np.any((fa != fb) | (~fa & ~fb & ~same_nonfinite)):
        return "nonfinite", math.nan, math.nan, math.nan
    m = fa & fb
    a, b = a[m], b[m]
    diff = np.abs(a - b)
    err = float(np.max(diff / np.maximum(np.maximum(np.abs(a), np.abs(b)), 1.0))) if a.size else 0.0
    na, nb = np.linalg.norm(a), np.linalg.norm(b)
    cos = float(a @ b / (na * nb)) if na > 0 and nb > 0 else None
    return "ok", err, float(diff.max()) if diff.size else 0.0, cos


def build_report(dir_a: Path, dir_b: Path, *, runs: Tuple[ReportRun, ...] = ()) -> Report:
    """The report of a real comparison of two dump folders, as the commands build it."""
    tree = VarTree.from_folders(dir_a, dir_b, threshold=THRESHOLD)
    return from_tree(tree, command="naive-vs-default", runs=runs, model="cases/build/attention/model.mge",
                     notes=("dumps compared from real runs",))


@pytest.fixture(scope="module")
def dumps_ab(lar_dump, tmp_path_factory) -> Tuple[Path, Path, Path, int, int]:
    """(naive dump, default dump, faulty copy of default, fault var id, NaN var id)."""
    naive = lar_dump("attention", "naive")
    default = lar_dump("attention", "default")
    faulty = tmp_path_factory.mktemp("report") / "default-faulty"
    shutil.copytree(default, faulty)
    folder = DumpFolder(faulty)
    fault = next(v for v in folder.ids if folder.var_info(v).opr_type == FAULT_TYPE)
    nan_var = next(v for v in folder.ids if folder.var_info(v).name == NAN_NAME)

    def skew(mm):
        mm[::7] *= np.float32(1.001)

    def poison(mm):
        mm[3] = np.float32("nan")

    _corrupt(faulty, fault, skew)
    _corrupt(faulty, nan_var, poison)
    return naive, default, faulty, fault, nan_var


@pytest.fixture(scope="module")
def runs(dumps_ab) -> Tuple[ReportRun, ...]:
    naive, default, _, _, _ = dumps_ab
    model = "cases/build/attention/model.mge"
    argv = ("python", "-m", "lar_prec.lar", model, "--input", "data:cases/build/attention/data.npy", "--iter", "1",
            "--warmup-iter", "0", "--bin-io-dump")
    return (ReportRun("naive", str(naive), argv + (str(naive),), 0, 1.25, env={"MGB_USE_MEGDNN_DBG": "2"}, config="naive"),
            ReportRun("default", str(default), argv + (str(default),), 0, 0.98, config="default"))


@pytest.fixture(scope="module")
def faulty_report(dumps_ab, runs) -> Report:
    naive, _, faulty, _, _ = dumps_ab
    return build_report(naive, faulty, runs=runs)


@pytest.fixture(scope="module")
def clean_report(dumps_ab, runs) -> Report:
    naive, default, _, _, _ = dumps_ab
    return build_report(naive, default, runs=runs)


@pytest.fixture(scope="module")
def shake_report(dumps_ab, lar_dump) -> Report:
    """A shake-shaped report from three real default runs, the third one faulty: every var's
    ``max_err`` is its largest difference from run 1, ``runs_differing`` how many runs differ."""
    _, default, faulty, _, _ = dumps_ab
    again = lar_dump("attention", "default", tag="again")
    trees = [VarTree.from_folders(default, other, threshold=THRESHOLD) for other in (again, faulty)]
    base = from_tree(trees[1], command="shake", cause="neither the algorithm choice nor --reproducible explains it",
                     model="cases/build/attention/model.mge")
    firsts = {d.id: d for d in trees[0].diffs}
    vars_ = []
    for v in base.vars:
        errs = [e for e in (firsts[v.id].max_err, v.max_err) if e is not None]
        vars_.append(replace(v, max_err=max(errs) if errs else None,
                             runs_differing=sum(1 for e in errs if e > 0) + (v.status == "nonfinite" and not v.max_err)))
    return replace(base, vars=tuple(vars_))
