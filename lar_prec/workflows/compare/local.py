"""``lar-prec compare --model``: the local error of every operator of the model the B side ran,
measured against A's dump (one layerwise build and run), then the comparison of
:mod:`.compare` rooted by it.

Example::

    from lar_prec.workflows.compare.local import compare_with_model
    c = compare_with_model("vars_naive", "vars_default", "model.mge")
    print(c.report.verdict, c.exit_code)
"""
from __future__ import annotations

import logging
from pathlib import Path
from typing import Any, Optional, Tuple

from lar_prec.diagnosis.local_analysis import LocalAnalysis, run_local
from lar_prec.diagnosis.local_plan import off_reason
from lar_prec.errors import LarPrecError
from lar_prec.inputspec import check_file
from lar_prec.run.config import RunConfig, get_config, resolve_load_and_run
from lar_prec.run.dirs import new_analysis_dir
from lar_prec.workflows.compare.compare import DumpComparison, compare_dumps

log = logging.getLogger(__name__)


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
    adir = new_analysis_dir(out, "compare", needed=[dir_a, dir_b, model_path]).resolve()
    try:
        return run_local(model_path, Path(dir_a), Path(dir_b), cfg, adir / "local", checks=checks, lar=lar_obj), None
    except LarPrecError as exc:
        if exc.exit_code == 2:  # bad dump folder or model: the user's input
            raise
        log.warning("local error not measured: %s", exc)
        return None, f"local error could not be measured ({type(exc).__name__}): {exc}"


def compare_with_model(dir_a: str, dir_b: str, model: str, *, config: str = "default", out: Optional[str] = None,
                       local: bool = True, local_checks: bool = False, algo_policy: Optional[str] = None,
                       lar: Optional[str] = None, **compare_kw: Any) -> DumpComparison:
    """:func:`~lar_prec.workflows.compare.compare.compare_dumps` with the model B ran under ``config``
    (A is the reference): local error first (in ``out``), then the comparison rooted by it.
    ``algo_policy`` and ``lar`` say how B ran (its fast-run cache, its binary); ``compare_kw``
    go to ``compare_dumps`` (threshold, text_dump, jobs, pairing, paths).

    Raises:
        UsageError: bad folders, model, threshold or options (exit 2).
    """
    la, off = compare_local(model, dir_a, dir_b, config, out, local=local, checks=local_checks,
                            algo_policy=algo_policy, lar=lar)
    return compare_dumps(dir_a, dir_b, with_model=True, local=la, local_off=off, **compare_kw)
