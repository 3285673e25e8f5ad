"""What an analysis decides about local error before its runs: whether it is measured, the
fast-run algorithm cache the test run writes for the layerwise run, and the layerwise model
built beside the reference run (:class:`EarlyBuild`).

Light on purpose: a workflow imports this before its first run starts; the measuring itself
(:mod:`lar_prec.diagnosis.local_analysis`, numpy) loads while load_and_run runs.
"""
from __future__ import annotations

import threading
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import TYPE_CHECKING, Any, Optional, Sequence, Tuple

from lar_prec._lazy import LazyModule
from lar_prec.dumps.folder import DumpFolder
from lar_prec.errors import LarPrecError
from lar_prec.lar.flags import flag_names, is_fast_run
from lar_prec.run.proc import interrupt_active_runs, reset_interrupt

if TYPE_CHECKING:
    from lar_prec.diagnosis import local
    from lar_prec.diagnosis.local_records import LayerwiseModel
else:  # loaded on the build's thread, after the default run (numpy-heavy measuring)
    local = LazyModule("lar_prec.diagnosis.local")

ALGO_CACHE = "fast-run-algo-policy.cache"


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
    """The layerwise model built on a thread of its own while the reference runs (issue 34 #8).

    The default run ends long before the reference (naive kernels are slow), and two runs of
    one load dump the same vars: :meth:`start`, given the default run's dump, plans the build
    on it, so its child process runs beside the reference run; :meth:`take` uses it when the
    reference dump holds the same vars (:func:`~lar_prec.diagnosis.local.fitted`), else the
    model is built again on the reference dump. Planning on a dump, not on the graph, keeps
    what the load fused away (lite folds elemwise chains: mobilenetv3's hard sigmoids)."""

    def __init__(self, model: Path, out_dir: Path, timeout: Optional[float]) -> None:
        self._model, self._out, self._timeout = model, out_dir, timeout
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="lar-prec-layerwise")
        self._future: Optional[Future] = None
        self._plan: Optional[Path] = None
        self._closed = False  # taken or cancelled: nothing starts after that
        self._lock = threading.Lock()

    def start(self, plan_dump: Path) -> None:
        """Start the build planned on ``plan_dump`` (once; later calls do nothing)."""
        with self._lock:
            if self._future is None and not self._closed:
                self._plan = plan_dump
                self._future = self._pool.submit(self._build, plan_dump)

    def _build(self, plan_dump: Path) -> "LayerwiseModel":
        return local.build_layerwise(self._model, plan_dump, self._out, timeout=self._timeout or local.DEFAULT_TIMEOUT)

    def take(self, ref_dump: Path) -> Optional[LayerwiseModel]:
        """The model when it was built and fits ``ref_dump``; None otherwise."""
        with self._lock:
            future, plan, self._closed = self._future, self._plan, True
        try:
            if future is None or plan is None:
                return None
            lw = future.result()
            return local.fitted(lw, DumpFolder(plan), DumpFolder(ref_dump))
        except (LarPrecError, KeyboardInterrupt):  # a build on the dump says it again, or stops
            return None
        finally:
            self._pool.shutdown(wait=True)

    def cancel(self) -> None:
        """Stop the build (the runs failed or were interrupted) and wait for its thread."""
        with self._lock:
            future, self._closed = self._future, True
        if future is not None and not future.done():
            interrupt_active_runs()  # the runs are over: only the build's child is left
            try:
                future.result()
            except BaseException:  # noqa: BLE001 (killed on purpose)
                pass
            finally:
                reset_interrupt()
        self._pool.shutdown(wait=True)
