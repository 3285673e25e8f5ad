"""Local error of one analysis: measured, labelled, with a repro folder per root.

After a workflow's runs, :func:`run_local` measures the local ("single") error of every
operator of the model the test side ran (:func:`lar_prec.diagnosis.local.local_errors`: one
build of the layerwise model and one run of it under the test configuration, fed with the
reference run's values), labels every var (:func:`lar_prec.diagnosis.floors.local_roots`) and
writes a repro folder per root (:func:`lar_prec.diagnosis.replay.make_repros`). The report
shows it through :mod:`lar_prec.report.local`.

Nothing here imports megengine: the build and the runs are child processes.
"""
from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Collection, List, Optional, Tuple

from lar_prec.diagnosis.local import DEFAULT_TIMEOUT, local_errors
from lar_prec.diagnosis.local_bounds import compute_dtype
from lar_prec.diagnosis.local_records import LocalResult
from lar_prec.diagnosis.floors import LocalVerdict, local_json, local_roots, noise_floors
from lar_prec.outputs import atomic_write_text, json_text
from lar_prec.run.config import RunConfig, get_config
from lar_prec.diagnosis.replay import make_repros

log = logging.getLogger(__name__)

@dataclass(frozen=True)
class LocalAnalysis:
    """The local errors of one analysis, their verdict and the repro folders written."""

    result: LocalResult
    verdict: LocalVerdict
    repros: Tuple[Path, ...]
    dir: Path
    seconds: float
    repro_errors: Tuple[str, ...] = ()


def run_local(model: Path, ref_dump: Path, test_dump: Optional[Path], test_config: "str | RunConfig",
              out_dir: Path, *, reference_config: "str | RunConfig" = "naive", checks: bool = False,
              repros: bool = True, bitwise: bool = False, timeout: Optional[float] = None,
              lar: Any = None, remote: Any = None, layerwise: Any = None,
              repro_only: Optional[Collection[int]] = None, ref_feeds: Any = None,
              on_started: Optional[Callable[[], None]] = None) -> LocalAnalysis:
    """Local error of ``model`` under ``test_config`` against ``ref_dump``, into ``out_dir``.

    Costs one build of the layerwise model and one run of it (``checks`` adds the reference
    self-check and test-fed runs; each repro a one-operator build). ``bitwise``: every local
    difference is a root (floors 0), for jitter where the reference is the same configuration.
    ``lar`` (the test run's LoadAndRun) and ``remote`` (its RemoteSpec): where the layerwise
    runs go (:func:`lar_prec.local.run_layerwise`); the build and the repros stay local.
    ``layerwise``: a layerwise model already built for ``model`` (no second build);
    ``ref_feeds``: its feeds, already written from ``ref_dump``.
    ``repro_only`` (report ids): write repros for these roots only (:func:`make_repros`).
    ``on_started``: called when each layerwise run has started.

    Raises:
        LarPrecError: the build or the run failed (callers turn it into a report note).
    """
    t0 = time.monotonic()
    tmo = timeout or DEFAULT_TIMEOUT
    result = local_errors(model, ref_dump, test_config, out_dir=out_dir, test_dump=test_dump,
                          reference_config=reference_config, checks=checks, timeout=tmo, lar=lar, remote=remote,
                          layerwise=layerwise, ref_feeds=ref_feeds, on_started=on_started, record=False)
    floors = {v.id: 0.0 for v in result.vars} if bitwise else noise_floors(result, compute_dtype(get_config(test_config).flags))
    verdict = local_roots(result, floors)
    # local.json says what the report says: these floors (bitwise, the run's compute dtype)
    atomic_write_text(out_dir / "local.json", json_text(local_json(result, verdict)), what="local error record")
    errors: List[str] = []
    written: List[Path] = []
    if repros and verdict.roots:

        written = [r.dir for r in make_repros(result, out_dir.parent, verdict, reference_config=reference_config,
                                              timeout=tmo, errors=errors, only=repro_only)]
    return LocalAnalysis(result, verdict, tuple(written), out_dir, time.monotonic() - t0, tuple(errors))
