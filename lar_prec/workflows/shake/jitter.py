"""Jitter between repeated runs: several comparisons against run 1 folded into one tree, and
shake's verdict. Used by :func:`lar_prec.workflows.shake`; needs no MegEngine.
"""
from __future__ import annotations
from lar_prec.workflows.common.analysis import StageProgress

import os
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Dict, List, Optional, Sequence, Tuple
from lar_prec.compare.folders import compare_folders
from lar_prec.compare.records import AGREEING
from lar_prec.diagnosis.tree import VarTree
from lar_prec.compare.threshold import Threshold

if TYPE_CHECKING:
    from lar_prec.compare.records import Comparison, VarDiff
    from lar_prec.compare.threshold import Threshold
    from lar_prec.diagnosis.tree import VarTree



def _differs(d: VarDiff) -> bool:
    """True when the two runs differ at all in this var (whatever the threshold)."""
    return d.status != "ok" or bool(d.max_err) or bool(d.n_diff) or bool(d.n_nonfinite)


def _err_key(d: VarDiff) -> float:
    return -1.0 if d.max_err is None else float(d.max_err)


def merge_comparisons(comparisons: Sequence[Comparison]) -> Tuple[List[VarDiff], Dict[int, int]]:
    """Fold the comparisons of runs 2..N against run 1 into one diff per var.

    A var takes the comparison where it is worst (a non-ok status first, then the largest
    ``max_err``), so its ``max_err`` is its largest difference from run 1 over all runs.
    Also returns, per var, how many runs differ from run 1 at all.
    """
    order: List[int] = []
    seen = set()
    for c in comparisons:
        for d in c.diffs:
            if d.id not in seen:
                seen.add(d.id)
                order.append(d.id)
    merged: List[VarDiff] = []
    differing: Dict[int, int] = {}
    for index, vid in enumerate(order):
        cands = [c[vid] for c in comparisons if vid in c]
        worst = max(cands, key=lambda d: (d.status != "ok", _err_key(d)))
        merged.append(replace(worst, index=index))
        differing[vid] = sum(1 for d in cands if _differs(d))
    return merged, differing


def compare_runs(dumps: Sequence[Path], threshold: Optional[Threshold],
                 progress: Optional[StageProgress]) -> List["Comparison"]:
    """Each of ``dumps[1:]`` compared with ``dumps[0]``. With ``threshold`` None ("auto") the
    first pair decides it and every other pair is held to the same one."""
    comps = []
    for k, d in enumerate(dumps[1:], start=1):
        comps.append(compare_folders(dumps[0], d, threshold=threshold if threshold is not None else "auto",
                                     jobs=min(2, os.cpu_count() or 1)))
        threshold = comps[0].threshold
        if progress:
            progress("compare", k, len(dumps) - 1)
    return comps


def jitter(dumps: Sequence[Path], threshold: Optional[Threshold],
           progress: Optional[StageProgress]) -> Tuple[VarTree, Dict[int, int]]:
    """Compare runs 2..N with run 1 and build the merged tree."""
    comps = compare_runs(dumps, threshold, progress)
    merged, differing = merge_comparisons(comps)
    tree = VarTree(merged, threshold=comps[0].threshold if comps else threshold,
                   source=f"{len(dumps)} runs against {dumps[0]}")
    return tree, differing


def shake_verdict(tree: "VarTree", roots: Sequence[Tuple[str, str, int]], runs_differing: int, n_runs: int,
                  what: str, cause: Optional[str], *, bitwise: bool, observer: Optional[str] = None) -> str:
    """shake's one-line verdict: the jitter, where it starts and why, or that there is none.
    ``what`` names the runs (``3 default runs``, ``default runs under 1, 2, 4 threads``);
    ``observer`` (the dump perturbs the run) comes first when given."""
    head = f"{observer}; " if observer else ""
    if not tree.diverged:
        same = "bitwise identical" if bitwise else "in agreement"
        return head + f"no jitter: {what} are {same} in all {len(tree.diffs)} variables"
    n_bad = sum(1 for d in tree.diffs if d.status not in AGREEING)
    first = f"; first root: {roots[0][0]} ({roots[0][1]}, var {roots[0][2]})" if roots else ""
    verdict = (f"jitter: {n_bad} of {len(tree.diffs)} variables differ from run 1 in up to "
               f"{runs_differing} of {n_runs - 1} runs{first}")
    return head + verdict + (f"; cause: {cause}" if cause else "")
