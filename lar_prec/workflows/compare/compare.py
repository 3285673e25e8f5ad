"""``lar-prec compare``: two existing ``--bin-io-dump`` folders (made anywhere: a phone, a board,
another build), paired by var id or by name, compared and rooted. With ``--model`` (the model
the B side ran) :mod:`.local` adds the local error of every operator, and roots by it;
this module does not import the layerwise machinery, so a dump-only compare starts fast.

Example::

    from lar_prec.workflows.compare.compare import compare_dumps
    c = compare_dumps("vars_naive", "vars_default")
    print(c.report.verdict, c.exit_code)
"""
from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Optional, Union

from lar_prec.compare.folders import PASS_RATIO_NOTE
from lar_prec.compare.threshold import Threshold, ThresholdSpec, parse_threshold_spec
from lar_prec.diagnosis.tree import VarTree
from lar_prec.errors import UsageError
from lar_prec.report.model import Report, exit_code, from_tree

if TYPE_CHECKING:  # a type only: measuring local error lives in .local
    from lar_prec.diagnosis.local_analysis import LocalAnalysis


@dataclass(frozen=True)
class DumpComparison:
    """What ``lar-prec compare`` found: the tree, its report, and where local error went."""

    tree: VarTree
    report: Report
    #: the analysis folder of the local error (None without ``--model``)
    local_dir: Optional[Path] = None

    @property
    def exit_code(self) -> int:
        """0 no divergence, 1 divergence found."""
        return exit_code(self.report)


def check_model_options(model: Optional[str], *, algo_policy: Optional[str] = None, lar: Optional[str] = None) -> None:
    """Options that only mean something with ``--model``.

    Raises:
        UsageError: one of them is given without ``model`` (exit 2).
    """
    if algo_policy is not None and not model:
        raise UsageError("--fast-run-algo-policy needs --model (it is replayed by the layerwise run of the model)")
    if lar is not None and not model:
        raise UsageError("--lar needs --model (compare runs nothing else: the binary runs the layerwise model)")


def compare_dumps(dir_a: str, dir_b: str, *, threshold: "Union[str, float, Threshold, ThresholdSpec, None]" = "auto",
                  text_dump: Optional[str] = None, jobs: Optional[int] = None, pairing: str = "auto",
                  paths: bool = True, with_model: bool = False, local: "Optional[LocalAnalysis]" = None,
                  local_off: Optional[str] = None, pass_ratio: float = 1.0, stats: bool = False) -> DumpComparison:
    """Compare two dump folders and root them (``lar-prec compare``).

    ``pass_ratio``: a float var passes when at least that share of its elements is within its
    threshold (``--pass-ratio``; the verdict says how many pass only so); ``stats``: the
    quantiles of each float var's relative and absolute error too (``--stats``).

    ``paths``: give the roots their path from a model input (the page shows them; each is one
    search). ``with_model``: the analysis had the model, and ``local`` is its local error (None
    with ``local_off`` saying why it is missing): roots by it under ``threshold="auto"``.
    :func:`lar_prec.workflows.compare.local.compare_with_model` measures it and calls this.

    Raises:
        UsageError: bad folders or threshold (exit 2).
    """
    spec = parse_threshold_spec(threshold)
    tree = VarTree.from_folders(dir_a, dir_b, threshold=spec.for_comparison, text_dump=text_dump, jobs=jobs,
                                pairing=pairing, pass_ratio=pass_ratio, stats=stats)
    # lazy vars: each var's JSON is made from its VarDiff as it is written (20,000 vars, one
    # copy). Paths to the roots only for the page: they need the tree's adjacency and one search
    # of the whole graph (linear: 0.05 s at 20,000 vars, a sixteenth of such a compare).
    report = from_tree(tree, command="compare", lazy_vars=True, max_paths=50 if paths else 0,
                       local=local, roots_by=spec.roots_by(local is not None) if with_model else None,
                       local_off=local_off)
    # only a pass ratio below 1 passes a var so (no pass over 20,000 records otherwise)
    by_ratio = sum(1 for d in tree.diffs if d.status == "ok" and PASS_RATIO_NOTE in d.note) if pass_ratio < 1.0 else 0
    if by_ratio:  # said in the verdict: these vars pass only because of the ratio
        report = replace(report, verdict=f"{report.verdict}; {by_ratio} var(s) pass only by the pass ratio {pass_ratio:g} "
                                         f"(that share of their elements within their threshold)")
    report = replace(report, extra={**report.extra, "exit_code": exit_code(report)})
    return DumpComparison(tree, report, local.dir.parent if local is not None else None)
