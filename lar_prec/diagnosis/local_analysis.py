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
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Collection, List, Optional, Sequence, Tuple

from lar_prec.diagnosis.local import (
    DEFAULT_TIMEOUT,
    build_layerwise,
    compute_dtype,
    fitted,
    flag_names,
    is_fast_run,
    local_errors,
)
from lar_prec.diagnosis.local_records import LayerwiseModel
from lar_prec.dumps.folder import DumpFolder
from lar_prec.errors import LarPrecError
from lar_prec.run.proc import interrupt_active_runs, reset_interrupt
from lar_prec.diagnosis.local_records import LocalResult
from lar_prec.diagnosis.floors import LocalVerdict, local_roots, noise_floors
from lar_prec.run.config import RunConfig, get_config
from lar_prec.diagnosis.replay import make_repros

log = logging.getLogger(__name__)

ALGO_CACHE = "fast-run-algo-policy.cache"


@dataclass(frozen=True)
class LocalAnalysis:
    """The local errors of one analysis, their verdict and the repro folders written."""

    result: LocalResult
    verdict: LocalVerdict
    repros: Tuple[Path, ...]
    dir: Path
    seconds: float
    repro_errors: Tuple[str, ...] = ()


def off_reason(*, local: bool) -> Optional[str]:
    """Why local error is not measured in this analysis (None: it is). The layerwise model runs
    where the test run ran (its ``--lar`` binary, its ``--remote`` device:
    :func:`lar_prec.local.run_layerwise`), so only ``--no-local`` turns it off."""
    return None if local else "local error not measured (--no-local)"


def pin_flags(flags: Sequence[str], adir: Path, sessions: Any = None) -> Tuple[str, ...]:
    """Extra flags for the *test* run so its fast-run algorithm choices can be replayed by the
    layerwise run: a ``--fast-run-algo-policy`` cache in the analysis folder, or on the device
    for a remote analysis (``sessions``: its RemoteSessions), where both runs read it (none
    when the run is not fast-run or the user gave a cache already)."""
    if not is_fast_run(flags) or "fast_run_algo_policy" in flag_names(flags):
        return ()
    if sessions is not None:  # the cache lives where load_and_run runs
        return ("--fast-run-algo-policy", f"{sessions.get().remote_dir}/{adir.name}-{ALGO_CACHE}")
    return ("--fast-run-algo-policy", str(adir / ALGO_CACHE))


class EarlyBuild:
    """The layerwise model built on a thread of its own while the runs run (issue 34 #8): it
    is planned from the model alone (:func:`~lar_prec.diagnosis.local.build_layerwise` with
    ``assume_dumped``), so its child process can start before the reference has run; it is
    used when it fits the reference dump (:func:`~lar_prec.diagnosis.local.fitted`: the bundled
    load_and_run dumps every computed var under its graph id), else built again on the dump."""

    def __init__(self, model: Path, out_dir: Path, timeout: Optional[float]) -> None:
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="lar-prec-layerwise")
        self._future = self._pool.submit(build_layerwise, model, None, out_dir,
                                         timeout=timeout or DEFAULT_TIMEOUT, assume_dumped=True)

    def take(self, ref_dump: Path) -> Optional[LayerwiseModel]:
        """The model when it was built and fits ``ref_dump``; None otherwise."""
        try:
            lw = self._future.result()
        except (LarPrecError, KeyboardInterrupt):  # a build on the dump says it again, or stops
            return None
        finally:
            self._pool.shutdown(wait=True)
        return fitted(lw, DumpFolder(ref_dump))

    def cancel(self) -> None:
        """Stop the build (the runs failed or were interrupted) and wait for its thread."""
        if not self._future.done():
            interrupt_active_runs()  # the runs are over: only the build's child is left
            try:
                self._future.result()
            except BaseException:  # noqa: BLE001 (killed on purpose)
                pass
            finally:
                reset_interrupt()
        self._pool.shutdown(wait=True)


def run_local(model: Path, ref_dump: Path, test_dump: Optional[Path], test_config: "str | RunConfig",
              out_dir: Path, *, reference_config: "str | RunConfig" = "naive", checks: bool = False,
              repros: bool = True, bitwise: bool = False, timeout: Optional[float] = None,
              lar: Any = None, remote: Any = None, layerwise: Any = None,
              repro_only: Optional[Collection[int]] = None) -> LocalAnalysis:
    """Local error of ``model`` under ``test_config`` against ``ref_dump``, into ``out_dir``.

    Costs one build of the layerwise model and one run of it (``checks`` adds the reference
    self-check and test-fed runs; each repro a one-operator build). ``bitwise``: every local
    difference is a root (floors 0), for jitter where the reference is the same configuration.
    ``lar`` (the test run's LoadAndRun) and ``remote`` (its RemoteSpec): where the layerwise
    runs go (:func:`lar_prec.local.run_layerwise`); the build and the repros stay local.
    ``layerwise``: a layerwise model already built for ``model`` (no second build).
    ``repro_only`` (report ids): write repros for these roots only (:func:`make_repros`).

    Raises:
        LarPrecError: the build or the run failed (callers turn it into a report note).
    """
    t0 = time.monotonic()
    tmo = timeout or DEFAULT_TIMEOUT
    result = local_errors(model, ref_dump, test_config, out_dir=out_dir, test_dump=test_dump,
                          reference_config=reference_config, checks=checks, timeout=tmo, lar=lar, remote=remote,
                          layerwise=layerwise)
    floors = {v.id: 0.0 for v in result.vars} if bitwise else noise_floors(result, compute_dtype(get_config(test_config).flags))
    verdict = local_roots(result, floors)
    errors: List[str] = []
    written: List[Path] = []
    if repros and verdict.roots:

        written = [r.dir for r in make_repros(result, out_dir.parent, verdict, reference_config=reference_config,
                                              timeout=tmo, errors=errors, only=repro_only)]
    return LocalAnalysis(result, verdict, tuple(written), out_dir, time.monotonic() - t0, tuple(errors))
