"""``lar-prec compare``: two existing ``--bin-io-dump`` folders (made anywhere: a phone, a board,
another build), paired by var id or by name, compared and rooted; with ``--model`` (the model
the B side ran) also the local error of every operator, and roots by it.

Example::

    from lar_prec.workflows.compare import compare_dumps
    c = compare_dumps("vars_naive", "vars_default")
    print(c.report.verdict, c.exit_code)
"""
from __future__ import annotations

import logging
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Optional, Tuple, Union

from lar_prec.compare.threshold import Threshold, ThresholdSpec, parse_threshold_spec
from lar_prec.diagnosis.local_analysis import LocalAnalysis, off_reason, run_local
from lar_prec.diagnosis.tree import VarTree
from lar_prec.errors import LarPrecError, UsageError
from lar_prec.inputspec import check_file
from lar_prec.report.model import Report, exit_code, from_tree
from lar_prec.run.config import RunConfig, get_config, resolve_load_and_run
from lar_prec.run.dirs import new_analysis_dir

log = logging.getLogger(__name__)


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


def compare_local(model: str, dir_a: str, dir_b: str, config: str, out: Optional[str], *, local: bool = True,
                  checks: bool = False, algo_policy: Optional[str] = None, lar: Optional[str] = None,
                  ) -> Tuple[Optional[LocalAnalysis], Optional[str]]:
    """Local error of MODEL (the model B ran, under ``config``) against A's dump, in a new
    analysis folder. (None, why) when off or failed.

    ``algo_policy``: the ``--fast-run-algo-policy`` cache B's run wrote; the layerwise run
    replays its algorithm choices (without it a fast-run layerwise run profiles again and can
    pick other algorithms than B did). ``lar``: the load_and_run B ran (default: bundled),
    which runs the layerwise model.

    Raises:
        UsageError: the model, the cache or the binary is not there (before anything runs).
    """
    model_path = check_file(model, "model file")
    lar_obj = resolve_load_and_run(lar) if lar is not None else None
    cfg: "str | RunConfig" = config
    if algo_policy is not None:
        cache = check_file(algo_policy, "--fast-run-algo-policy cache")
        cfg = get_config(config).with_extra(["--fast-run-algo-policy", str(cache.resolve())])
    if not local:
        return None, off_reason(local=False)
    adir = new_analysis_dir(out, "compare").resolve()
    try:
        return run_local(model_path, Path(dir_a), Path(dir_b), cfg, adir / "local", checks=checks, lar=lar_obj), None
    except LarPrecError as exc:
        if exc.exit_code == 2:  # bad dump folder or model: the user's input
            raise
        log.warning("local error not measured: %s", exc)
        return None, f"local error could not be measured ({type(exc).__name__}): {exc}"


def compare_dumps(dir_a: str, dir_b: str, *, threshold: "Union[str, float, Threshold, ThresholdSpec, None]" = "auto",
                  text_dump: Optional[str] = None, jobs: Optional[int] = None, pairing: str = "auto",
                  model: Optional[str] = None, config: str = "default", out: Optional[str] = None,
                  local: bool = True, local_checks: bool = False, algo_policy: Optional[str] = None,
                  lar: Optional[str] = None, paths: bool = True) -> DumpComparison:
    """Compare two dump folders and root them (``lar-prec compare``).

    ``model`` (the model B ran under ``config``; A is the reference) adds local error (one
    layerwise build and run, in ``out``) and roots by it under ``threshold="auto"``;
    ``algo_policy`` and ``lar`` say how B ran (its fast-run cache, its binary). ``paths``:
    give the roots their path from a model input (the page shows them; each is one search).

    Raises:
        UsageError: bad folders, threshold, or options that need ``model`` without it (exit 2).
    """
    spec = parse_threshold_spec(threshold)
    if algo_policy is not None and not model:
        raise UsageError("--fast-run-algo-policy needs --model (it is replayed by the layerwise run of the model)")
    if lar is not None and not model:
        raise UsageError("--lar needs --model (compare runs nothing else: the binary runs the layerwise model)")
    la, off = compare_local(model, dir_a, dir_b, config, out, local=local, checks=local_checks,
                            algo_policy=algo_policy, lar=lar) if model else (None, None)
    tree = VarTree.from_folders(dir_a, dir_b, threshold=spec.for_comparison, text_dump=text_dump, jobs=jobs,
                                pairing=pairing)
    # lazy vars: each var's JSON is made from its VarDiff as it is written (20,000 vars, one
    # copy). Paths to the roots only for the page: VarTree.path keeps every ancestor's whole
    # path, quadratic in memory on a deep chain (400 MB at 10,000 vars deep).
    report = from_tree(tree, command="compare", lazy_vars=True, max_paths=50 if paths else 0,
                       local=la, roots_by=spec.roots_by(la is not None) if model else None, local_off=off)
    report = replace(report, extra={**report.extra, "exit_code": exit_code(report)})
    return DumpComparison(tree, report, la.dir.parent if la is not None else None)
