"""What an analysis decides about local error before its runs: whether it is measured, the
fast-run algorithm cache the test run writes for the layerwise run, and the layerwise model
built beside the reference run (:class:`EarlyBuild`).

Light on purpose: a workflow imports this before its first run starts; the measuring itself
(:mod:`lar_prec.diagnosis.local_analysis`, numpy) loads while load_and_run runs.
"""
from __future__ import annotations

import os
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
    from lar_prec.run.inputs import PreparedInputs
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
    """The layerwise model built beside the runs (issue 34 #8).

    Its child starts with the analysis and loads MegEngine and the model (most of a build's
    time: the plan and the build take a tenth of it) while the reference run runs;
    :meth:`start`, given the reference's dump, lets it plan on that dump, and the thread writes
    the model's feeds from it once built (``feeds_for``: the test run's flags, for their
    layout), all while the test run runs: the layerwise run starts as soon as the test run
    ends. Planning on the dump, not on the graph, keeps what the load fused away (lite folds
    elemwise chains: mobilenetv3's hard sigmoids)."""

    def __init__(self, model: Path, out_dir: Path, timeout: Optional[float]) -> None:
        self._model, self._out, self._timeout = model, out_dir, timeout
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="lar-prec-layerwise")
        self._plan: Optional[Path] = None
        self._feeds_for: Optional[Tuple[str, ...]] = None
        #: the reference feeds written beside the runs (:meth:`take` sets it when they fit)
        self.feeds: Optional[PreparedInputs] = None
        self._lock = threading.Lock()
        read_end, self._write_end = os.pipe()  # the dump's path goes to the child through it
        self._future: Future = self._pool.submit(self._build, read_end)

    def _build(self, read_end: int) -> "Tuple[LayerwiseModel, Optional[PreparedInputs]]":
        try:
            lw = local.build_layerwise(self._model, None, self._out, timeout=self._timeout or local.DEFAULT_TIMEOUT,
                                       dump_path_fd=read_end)
        finally:
            os.close(read_end)
        plan, flags = self._plan, self._feeds_for  # set before the child had the dump
        if plan is None or flags is None:
            return lw, None
        try:
            return lw, local.feed_inputs(lw, DumpFolder(plan), self._out.parent / "inputs-ref",
                                         fmt=local.layout_fmt(flags))
        except LarPrecError:  # written again after the runs, and failing there as it would
            return lw, None

    def _tell(self, plan_dump: Optional[Path], feeds_for: Optional[Sequence[str]] = None) -> None:
        """Send the child the dump to plan on (None: nothing, it ends); once."""
        with self._lock:
            if self._write_end is None:
                return
            try:
                if plan_dump is not None and "\n" not in str(plan_dump):
                    self._plan = plan_dump
                    self._feeds_for = tuple(feeds_for) if feeds_for is not None else None
                    os.write(self._write_end, f"{plan_dump}\n".encode())
            except OSError:  # the child is gone (it failed): take() finds no model
                self._plan = None
            finally:
                os.close(self._write_end)
                self._write_end = None

    def start(self, ref_dump: Path, *, feeds_for: Optional[Sequence[str]] = None) -> None:
        """Let the build plan on the reference's dump ``ref_dump`` (the first call only);
        ``feeds_for``: also write the feeds of a test run with these flags (their layout)."""
        self._tell(ref_dump, feeds_for)

    def take(self, ref_dump: Path) -> Optional[LayerwiseModel]:
        """The model when it was built on ``ref_dump``; None otherwise (it is built after the
        runs). :attr:`feeds`: its feeds, when they were written beside the runs."""
        self._tell(None)
        try:
            lw, feeds = self._future.result()
            if self._plan is None or Path(self._plan) != Path(ref_dump):
                return None
            self.feeds = feeds
            return lw
        except (LarPrecError, KeyboardInterrupt):  # a build on the dump says it again, or stops
            return None
        finally:
            self._pool.shutdown(wait=True)

    def cancel(self) -> None:
        """Stop the build (the runs failed or were interrupted) and wait for its thread."""
        self._tell(None)
        if not self._future.done():
            interrupt_active_runs()  # the runs are over: only the build's child is left
            try:
                self._future.result()
            except BaseException:  # noqa: BLE001 (killed on purpose)
                pass
            finally:
                reset_interrupt()
        self._pool.shutdown(wait=True)
