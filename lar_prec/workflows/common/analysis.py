"""What every workflow shares: preparing an analysis (checks first, then the folder and the
inputs), running a plan of configurations (Ctrl-C, failures, ``keep_going``), measuring local
error where the test run ran, the environment differences, and writing the reports.

Each workflow (:mod:`lar_prec.workflows.naive_vs_default`, :mod:`~lar_prec.workflows.shake`,
:mod:`~lar_prec.workflows.sweep`, :mod:`~lar_prec.workflows.devices`, ...) makes one analysis folder holding the prepared inputs, one
folder per run (dumps and ``run.json``), ``report.json`` and ``report.html``, and returns an
:class:`Analysis`. Nothing already on disk is overwritten, and a failing or interrupted run
leaves every folder consistent.
"""
from __future__ import annotations

import logging
from concurrent.futures import CancelledError, Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
import threading
from typing import TYPE_CHECKING, Callable, Dict, List, Optional, Sequence, Tuple, Union

from lar_prec._lazy import LazyModule
from lar_prec.errors import AnalysisInterrupted, LarPrecError
from lar_prec.run.config import LoadAndRun, check_timeout, resolve_load_and_run
from lar_prec.run.once import run_once
from lar_prec.run.inputs import PreparedInputs, plan_inputs, write_inputs
from lar_prec.run.record import RunResult
from lar_prec.run.argv import check_extra_flags
from lar_prec.run.probe import check_flags, check_input_dtypes, model_mode
from lar_prec.run.settings import Prepared, Settings
from lar_prec.inputspec import check_file
from lar_prec.run.proc import interrupt_active_runs, reset_interrupt
from lar_prec.run.dirs import new_analysis_dir
from lar_prec.run.env import environment_differences
from lar_prec.run.device import open_sessions

if TYPE_CHECKING:  # loaded while load_and_run runs (see prefetch_analysis_modules)
    from lar_prec.diagnosis import local_analysis
    from lar_prec.diagnosis.local_plan import EarlyBuild
    from lar_prec.report import html as report_html, model as report_model
    from lar_prec.run.device import RemoteSessions, RemoteSpec
    from lar_prec.report.model import Report
    from lar_prec.diagnosis.tree import VarTree

else:
    local_analysis = LazyModule("lar_prec.diagnosis.local_analysis")
    report_html, report_model = LazyModule("lar_prec.report.html"), LazyModule("lar_prec.report.model")

log = logging.getLogger(__name__)

from lar_prec.records import PathLike  # noqa: E402
#: ``progress(stage, done, total, running=(...), finished="...")``: stage is ``"runs"``,
#: ``"compare"`` or ``"local"``; ``running`` names the steps under way, ``finished`` the one
#: that just ended and how (clisupport.ProgressBars: bars on a terminal, lines in a log)
StageProgress = Callable[..., None]



#: numpy by name: lar_prec.compare and iodump import it only on first use
_ANALYSIS_MODULES = ("numpy", "lar_prec.compare.folders", "lar_prec.diagnosis.tree", "lar_prec.report.model",
                     "lar_prec.report.html", "lar_prec.diagnosis.local_analysis", "lar_prec.workflows.common.verdicts", "rich.console", "rich.table")


_prefetch_started = threading.Event()


def prefetch_analysis_modules() -> None:
    """Import the comparison and report modules in the background, once.

    The main process only waits while load_and_run runs, and these imports (numpy-heavy
    compare, networkx, rich) are most of the analysis' own time on small models. Started
    when the first run has started, so it does not delay that run.
    """
    if _prefetch_started.is_set():
        return
    _prefetch_started.set()

    def load() -> None:
        import importlib

        for name in _ANALYSIS_MODULES:
            try:
                importlib.import_module(name)
            except ImportError:  # rich is optional for the library; the main thread will say so
                pass

    threading.Thread(target=load, name="lar-prec-prefetch", daemon=True).start()


@dataclass(frozen=True)
class Analysis:
    """One finished analysis: its folder, its report, its tree and its runs."""

    command: str
    dir: Path
    report: Report
    tree: VarTree
    runs: Tuple[RunResult, ...]
    json_path: Path
    html_path: Optional[Path]

    @property
    def exit_code(self) -> int:
        """0 no divergence (no jitter), 1 divergence (jitter) found."""

        return report_model.exit_code(self.report)


@dataclass(frozen=True)
class Planned:
    config: str
    label: str
    text_dump: bool = False
    extra_flags: Tuple[str, ...] = ()
    #: inputs of this run only (e.g. shake's batch positions); None: the analysis' inputs
    inputs: Optional[PreparedInputs] = None
    #: a run that dumps the network outputs only (``--bin-out-dump``): shake's observer check
    outputs_only: bool = False



class Steps:
    """The steps of one stage told to a ``progress`` hook (:data:`StageProgress`) from any
    thread: which are under way (``start``/``stop``) and each one that ends well (``done``)."""

    def __init__(self, progress: Optional[StageProgress], stage: str, total: int) -> None:
        self.progress, self.stage, self.total = progress, stage, total
        self.count = 0
        self._running: Dict[str, None] = {}  # in the order they started
        self._lock = threading.Lock()
        self._tell()

    def start(self, name: str) -> None:
        with self._lock:
            self._running[name] = None
        self._tell()

    def stop(self, name: str) -> None:
        with self._lock:
            self._running.pop(name, None)

    def done(self, finished: str) -> None:
        with self._lock:
            self.count += 1
        self._tell(finished)

    def _tell(self, finished: Optional[str] = None) -> None:
        if self.progress is not None:
            with self._lock:
                running, count = tuple(self._running), self.count
            self.progress(self.stage, count, self.total, running=running, finished=finished)


def ran(rec: RunResult) -> str:
    """A finished run in a few words (a line of the progress in a log)."""
    return f"{rec.label} ({rec.config}) {rec.status} in {rec.seconds:.1f} s"


def run_plan(prep: Prepared, plan: Sequence[Planned], *, extra_flags: Sequence[str] = (),
             sessions: "Optional[RemoteSessions]" = None, jobs: Optional[int] = None,
             after: Optional[Callable[[RunResult], None]] = None) -> List[RunResult]:
    """Run every planned configuration of a prepared analysis, up to ``jobs`` (default: the
    settings') at once, each in a fresh process, with the settings' load_and_run, timeout,
    environment and ``keep_going``; ``extra_flags`` go before each planned run's own flags.

    ``after(result)`` is called in the worker thread as soon as a run ends well (shake hashes
    and prunes each dump there, so finished dumps do not pile up on disk).

    After the first failure no further run starts (runs already under way end, so every
    run.json is final) and the failure is raised; with ``keep_going`` every run is made and
    the first failure raised at the end. Ctrl-C kills every run under way and raises
    AnalysisInterrupted naming the folder. With ``sessions`` the runs go to that device.
    """
    s, adir = prep.settings, prep.dir
    keep_going = s.keep_going
    results: List[Optional[RunResult]] = [None] * len(plan)
    failed = threading.Event()
    steps = Steps(s.progress, "runs", len(plan))

    def one(i: int) -> Optional[RunResult]:
        # checked by the worker itself: a queued run must not slip in while the main thread
        # is still to learn of the failure
        if failed.is_set() and not keep_going:
            return None
        p = plan[i]
        steps.start(p.label)
        try:
            rec = run_once(prep.model, p.inputs if p.inputs is not None else prep.inputs, p.config, adir,
                           lar=prep.lar, text_dump=p.text_dump, timeout=s.timeout,
                           extra_flags=tuple(extra_flags) + p.extra_flags, label=p.label,
                           on_started=prefetch_analysis_modules, remote=sessions, extra_env=s.env,
                           outputs_only=p.outputs_only, model_mode=prep.mode)
            if after is not None:
                after(rec)
            return rec
        except LarPrecError:
            failed.set()
            raise
        finally:
            steps.stop(p.label)

    first_error: Optional[BaseException] = None
    # One path for any ``jobs``: runs go to worker threads so the main thread stays free to
    # take Ctrl-C and kill every run under way (their sessions do not get the terminal's SIGINT).
    pool = ThreadPoolExecutor(max_workers=max(1, s.jobs if jobs is None else jobs), thread_name_prefix="lar-prec-run")
    futures: Dict[Future, int] = {}
    try:
        futures = {pool.submit(one, i): i for i in range(len(plan))}
        for fut, i in futures.items():
            try:
                results[i] = fut.result()
            except CancelledError:
                continue
            except LarPrecError as exc:
                if first_error is None:
                    first_error = exc
                    if not keep_going:
                        for other in futures:  # queued runs are pointless now
                            other.cancel()
                continue
            rec = results[i]
            if rec is not None:  # None: skipped after a failure
                steps.done(ran(rec))
    except KeyboardInterrupt:
        for fut in futures:
            fut.cancel()
        interrupt_active_runs()
        if sessions is not None:
            sessions.interrupt()  # interrupt_active_runs does not know the device's runs
        pool.shutdown(wait=True)
        reset_interrupt()
        raise AnalysisInterrupted(
            f"interrupted; runs were stopped and every run folder is kept in {adir} (see each run.json)",
            analysis_dir=adir) from None
    pool.shutdown(wait=True)
    if first_error is not None:
        raise first_error
    return [r for r in results if r is not None]


def prepare(settings: Settings, command: str) -> Prepared:
    """Check everything the user gave, then claim the analysis folder and write the inputs:
    a usage error leaves no folder behind. The model is read here once (checked, its mode,
    its inputs' dtypes when random data needs them); the runs read :class:`Prepared`. No
    local load_and_run is chosen for a remote analysis."""
    s = settings
    model_path = check_file(s.model, "model file")
    check_timeout(s.timeout)
    check_extra_flags(s.extra_flags)
    lar_obj = resolve_load_and_run(s.lar) if s.remote is None else None
    if lar_obj is not None:
        check_flags(lar_obj, s.extra_flags, "extra load_and_run flag", s.timeout)
    planned = plan_inputs(s.inputs, model_path, seed=s.seed, lar=lar_obj)
    if lar_obj is None or not lar_obj.is_bundled:
        who = f"load_and_run {lar_obj.describe()}" if lar_obj is not None else "the device's load_and_run"
        check_input_dtypes([(p.name, p.dtype, p.source) for p in planned], who)
    adir = new_analysis_dir(s.out, command).resolve()
    prepared = write_inputs(planned, adir / "inputs")
    return Prepared(s, model_path, model_mode(model_path), adir, prepared, lar_obj)


def prepare_analysis(model: PathLike, inputs: Union[str, Sequence[str]], out: Optional[PathLike], command: str,
             seed: int, lar: Union[LoadAndRun, str, None], timeout: Optional[float] = None,
             extra_flags: Sequence[str] = (), remote: "Optional[RemoteSpec]" = None,
             ) -> Tuple[Path, Path, PreparedInputs, Optional[LoadAndRun]]:
    """:func:`prepare` for the workflows that still take keywords: (model, folder, inputs, load_and_run)."""
    p = prepare(Settings(model=model, inputs=inputs, out=out, seed=seed, lar=lar, timeout=timeout,
                         extra_flags=tuple(extra_flags), remote=remote), command)
    return p.model, p.dir, p.inputs, p.lar


def environment_extra(runs: Sequence[RunResult]) -> Tuple[Dict[str, object], List[str]]:
    """The report's ``environment_differences`` (and ``remote``) keys and a note for runs that
    did not run in the same environment (CPU features, binary, MGB_* variables)."""

    diffs = environment_differences([(r.label, r.environment) for r in runs])
    extra: Dict[str, object] = {"environment_differences": diffs}
    targets = sorted({str(r.remote.get("target")) for r in runs if r.remote})
    if targets:
        extra["remote"] = targets[0] if len(targets) == 1 else targets
    notes = []
    if diffs:
        notes.append("the runs differ in environment: " + ", ".join(d["field"] for d in diffs)
                     + " (see environment_differences); part of a difference may come from there")
    lite = sorted({str(r.model_path) for r in runs if getattr(r, "model_mode", None) == "lite"
                   and (getattr(r, "load_and_run", None) or {}).get("kind") != "bundled"})
    if lite:
        extra["model_mode"] = "lite"
        notes.append(lite_note(lite[0]))
    return extra, notes


def lite_note(model: str) -> str:
    """What a lite-packed model (no MegBrain graph's magic in its first 16 bytes) means for a run
    of MegEngine's load_and_run (``models/model.cpp``)."""
    return (f"{model} is a lite-packed model (its first 16 bytes carry no MegBrain graph's magic): MegEngine's "
            "load_and_run runs it in lite mode, where --reproducible has no effect and --bin-out-dump aborts")


def open_remote(remote: "Optional[RemoteSpec]", model: Path, prepared: PreparedInputs) -> "Optional[RemoteSessions]":

    return open_sessions(remote, model, prepared)


def write_reports(report: Report, adir: Path, html: bool) -> Tuple[Path, Optional[Path]]:
    """The analysis folder's report.json and report.html. A write that fails (a full disk at
    the end of every run) carries the report in the error, so the verdict is still shown."""
    json_path = adir / "report.json"
    try:
        report_model.write_json(report, json_path)
        html_path = report_html.write_html(report, adir / "report.html") if html else None
    except LarPrecError as exc:
        exc.report = report
        raise
    return json_path, html_path


def compare_progress(progress: Optional[StageProgress]) -> Optional[Callable[[int, int], None]]:
    if progress is None:
        return None
    return lambda done, total: progress("compare", done, total)


#: load_and_run flags that choose algorithms (profiling, or a cache of a profile's choices):
#: meaningless for the naive reference, and fatal there (MegDNN's check_attribute assertion)
_ALGO_CHOICE_FLAGS = {"fast_run": False, "full_run": False, "fast_run_algo_policy": True,
                      "fast_run_shared_batch_size": True}  # name -> takes a value


#: device flags that move a run off the CPU: the naive reference stays there (MGB_USE_MEGDNN_DBG
#: only changes CPU kernels), so with one of them naive against default compares two devices
_OFF_CPU_FLAGS = {"cuda"}


def reference_flags(flags: Sequence[str]) -> Tuple[Tuple[str, ...], Tuple[str, ...]]:
    """(flags for the naive reference run, the algorithm-choice and off-CPU device flags dropped
    from them)."""
    kept: List[str] = []
    dropped: List[str] = []
    it = iter(flags)
    for f in it:
        name, has_value = f.lstrip("-").replace("-", "_"), "=" in f
        name = name.split("=", 1)[0]
        if f.startswith("-") and name in _OFF_CPU_FLAGS and f.partition("=")[2].lower() not in _FALSE_WORDS:
            dropped.append(f)
            continue
        base = name[2:] if name.startswith("no") and name[2:] in _ALGO_CHOICE_FLAGS else name
        if not f.startswith("-") or base not in _ALGO_CHOICE_FLAGS:
            kept.append(f)
            continue
        dropped.append(f)
        if _ALGO_CHOICE_FLAGS[base] and not has_value and base == name:  # --flag VALUE: the value goes too
            value = next(it, None)
            if value is not None:
                dropped.append(value)
    return tuple(kept), tuple(dropped)


_FALSE_WORDS = ("false", "f", "no", "n", "0")


def cross_device(dropped: Sequence[str]) -> str:
    """The words for a comparison of two devices (the reference on CPU, the test run off it),
    "" when :func:`reference_flags` dropped no device flag."""
    devs = [f for f in dropped if f.lstrip("-").split("=", 1)[0].replace("-", "_") in _OFF_CPU_FLAGS]
    if not devs:
        return ""
    return (f"cross-device comparison: the naive reference on the CPU (its kernels run there only), "
            f"the test run on {' '.join(devs)}")


def dropped_note(dropped: Sequence[str], kept_by: str) -> str:
    """The report note for the flags :func:`reference_flags` took from the naive reference."""
    algo = [f for f in dropped if not cross_device([f])]
    notes = []
    if algo:
        notes.append(f"the naive reference ran without {' '.join(algo)}: its reference kernels need no algorithm "
                     f"choice (and MGB_USE_MEGDNN_DBG=2 refuses fast-run profiling); {kept_by} kept them")
    if cross_device(dropped):
        notes.append(f"{cross_device(dropped)}: a difference may be the device's arithmetic; {kept_by} kept the flag")
    return "; ".join(notes)


def measure_local(model: Path, ref_dump: Path, test_dump: Path, config: object, adir: Path, off: Optional[str], *,
           checks: bool = False, bitwise: bool = False, reference_config: object = "naive",
           timeout: Optional[float] = None, lar: Optional[LoadAndRun] = None,
           remote: "Optional[RemoteSpec]" = None, progress: Optional[StageProgress] = None,
           early: Optional[EarlyBuild] = None,
           on_started: Optional[Callable[[], None]] = None) -> Tuple[object, Optional[str]]:
    """Local errors into ``adir/local`` (None and why when off or when they could not be
    measured: the analysis by accumulated error stands either way). The layerwise runs go
    where the test run went: ``lar`` (its binary) or ``remote`` (its device). ``progress``
    is told the step (stage ``local``). ``early``: the layerwise model built while the runs
    ran (used when it fits the reference dump). ``on_started``: called when each layerwise run
    has started."""
    layerwise = early.take(ref_dump) if early is not None else None
    feeds = early.feeds if early is not None and layerwise is not None else None
    if off is not None:
        return None, off
    steps = Steps(progress, "local", 1)
    steps.start("layerwise model")
    try:
        la = local_analysis.run_local(model, ref_dump, test_dump, config, adir / "local", checks=checks,  # type: ignore[arg-type]
                       bitwise=bitwise, reference_config=reference_config, timeout=timeout,  # type: ignore[arg-type]
                       lar=lar, remote=remote, layerwise=layerwise, ref_feeds=feeds,
                       on_started=on_started)
        steps.stop("layerwise model")
        steps.done(f"layerwise model built and run: {len(la.verdict.roots)} local root(s)")
        return la, None
    except AnalysisInterrupted:
        raise
    except LarPrecError as exc:
        # e.g. a user's load_and_run that cannot run the layerwise model (an old binary, a
        # flag it lacks): a note, and the exit code of the analysis without local error
        where = (f" on {remote.target}" if remote is not None else
                 f" with {lar.describe()}" if lar is not None and not lar.is_bundled else "")
        log.warning("local error not measured: %s", exc)
        return None, f"local error could not be measured{where} ({type(exc).__name__}): {exc}"
    except KeyboardInterrupt:
        raise AnalysisInterrupted(f"interrupted while measuring local error; every run folder is kept in {adir}",
                                  analysis_dir=adir) from None


