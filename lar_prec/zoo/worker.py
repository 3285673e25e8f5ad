"""What runs on a Dask worker: one task = one analysis by the single-model workflows (the same
functions the commands call) in a fresh analysis folder on the worker's disk, then a small
:class:`TaskOutcome` back to the client: the summary the store writes (no dump byte), the
report JSON without dumps, the page's cells. Dumps of a clean task (exit 0) are removed there
unless ``keep_dumps``.

A failure that another try may cure (:func:`retried`: a device that dropped, a run that
crashed, stalled or timed out, a bug of lar-prec) raises :class:`TaskFailed` so Dask retries the
task (``retries`` of the manifest); one that cannot change (a missing file, a load_and_run that
refused with its own exit code) comes back as a failed outcome at once. :class:`ZooWorkerPlugin` tags the worker's children and, when a worker starts
again after a ``kill -9``, ends what its predecessor left running.
"""
from __future__ import annotations

import dataclasses
from dataclasses import replace
import os
import pickle
import shutil
import signal
import socket
import threading
import time
import traceback
from pathlib import Path
from typing import Any, Dict, Optional, Tuple

from distributed.diagnostics.plugin import WorkerPlugin

from lar_prec.errors import AnalysisInterrupted, LarPrecError, RunError, RunTimeout, UsageError
from lar_prec.outputs import atomic_write_text, json_text
from lar_prec.remote.transport import RemoteError
from lar_prec.run.device import RemoteSpec
from lar_prec.run.dirs import new_run_dir
from lar_prec.run.settings import Settings
from lar_prec.run.proc import interrupt_active_runs, reset_interrupt
from lar_prec.store.summary import Summary, summarize
from lar_prec.workflows.naive_vs_default import naive_vs_default
from lar_prec.workflows.precision import mixed, quant
from lar_prec.workflows.shake import shake
from lar_prec.workflows.sweep.options import OPTIONS
from lar_prec.workflows.sweep import sweep
from lar_prec.zoo.procs import WORKER_TAG, kill_tagged
from lar_prec.zoo.rerun import rerun_wrong
from lar_prec.zoo.tasks import Task
from lar_prec.zoo.timing import HostLock, stop_waiting, time_task, with_speed
from lar_prec.inputspec import read_json_file

#: shake's configurations, chosen by a configuration's flag (its runs then write their own caches)
_SHAKE_CONFIGS = {"--fast-run": "fast-run", "--reproducible": "reproducible"}
#: folders of an analysis that hold dumps (load_and_run's --bin-io-dump folders, local error's inputs)
_DUMP_DIRS = ("dump", "inputs-ref")


class TaskFailed(Exception):
    """A try of a task failed in a way another try may cure; ``args`` = (one line, details dict)
    so it pickles back to the client whole."""

    @property
    def why(self) -> str:
        return str(self.args[0])

    @property
    def details(self) -> Dict[str, Any]:
        return dict(self.args[1]) if len(self.args) > 1 else {}


@dataclasses.dataclass(frozen=True)
class TaskOutcome:
    """What travels back for one task (its size is measured: ``result_bytes``)."""

    task_id: str
    finished: bool  # the analysis ran to its verdict (exit 0 or 1)
    exit_code: int
    verdict: str
    summary: Optional[Summary]
    report: Optional[Dict[str, Any]]
    cells: Tuple[Dict[str, Any], ...]
    analysis_dir: Optional[str]
    host: str
    seconds: float  # in the workflow call
    run_seconds: float  # in load_and_run runs (every run.json of the folder)
    dumps_removed: bool = False
    why: Optional[str] = None
    result_bytes: int = 0
    #: its timing (zoo.timing.time_task: ``off`` when not timed)
    speed: Optional[Dict[str, Any]] = None


def _remote(task: Task) -> Optional[RemoteSpec]:
    if task.remote is None:
        return None
    kw = {"lar": task.lar} if task.lar else {}
    return RemoteSpec(task.remote, remote_dir=task.remote_dir, **kw)


def _call(task: Task, parent: Path) -> Tuple[Any, Any, int]:
    """Run the task's workflow; (its result, the report or JSON to summarize, its exit code)."""
    lar = None if task.remote is not None else (task.lar or "bundled")
    option_flags = tuple(f for o in task.options for f in OPTIONS[o].flags)
    settings = Settings(model=task.model_path, inputs=list(task.inputs), out=parent, lar=lar, timeout=task.timeout,
                        seed=task.seed)
    if task.command in ("mixed", "quant"):  # this machine only, local error always
        if task.command == "mixed":
            # no timed runs, as for sweep below: workers share the machine
            res = mixed.analyse(settings, option=task.param("option", "ioc16"), tolerance=task.param("tolerance", None),
                                speed_runs=0)
            data = res.to_json()
            return res, data, 1 if res.needs_float32 else 0
        res = quant.analyse(replace(settings, model=str(task.float_path)), task.model_path)
        data = res.to_json()
        return res, data, 1 if data["keep_in_float"] else 0
    flags = option_flags + task.flags
    settings = replace(settings, remote=_remote(task), local=task.local)
    if task.command == "naive-vs-default":
        a = naive_vs_default.analyse(replace(settings, threshold=task.param("threshold", "auto"), extra_flags=flags))
    elif task.command == "shake":
        config = next((_SHAKE_CONFIGS[f] for f in task.flags if f in _SHAKE_CONFIGS), "default")
        a = shake.analyse(replace(settings, threshold=task.param("threshold", 0.0),
                                  extra_flags=tuple(f for f in flags if f not in _SHAKE_CONFIGS)),
                          repeat=task.param("repeat", 3), config=config)
    else:
        # timed after the analysis by zoo.timing, under the machine's lock: other workers run beside it
        a = sweep.analyse(replace(settings, extra_flags=task.flags), options=list(task.options) or None, speed_runs=0)
    return a, a.report, a.exit_code


def _root_name(data: Dict[str, Any]) -> Optional[str]:
    """The first root of a report (a constant too: a weight a build reads wrong), the first
    operator ``mixed`` keeps in float32, or the first layer ``quant`` keeps in float."""
    if "keep_in_float" in data:
        names = list(data["keep_in_float"])
    else:
        names = [r.get("name") for r in data.get("roots") or data.get("kept") or ()]
    return names[0] if names else None


def cells_of(task: Task, data: Dict[str, Any], summary: Summary, code: int) -> Tuple[Dict[str, Any], ...]:
    """The page's cells of a finished task: one per option a sweep tried, else one."""
    if task.command == "sweep" and isinstance(data.get("options"), list):
        out = []
        for o in data["options"]:
            root = o.get("root") or {}
            out.append({"column": f"sweep {o.get('option')} \u00b7 {task.config}", "option": o.get("option"),
                        "verdict": o.get("verdict"),
                        "bad": o.get("verdict") != "ok", "output_err": o.get("output_err"), "root": root.get("name"),
                        "why": o.get("cause") or o.get("reason") or None})
        return tuple(out)
    return ({"column": task.column, "option": ",".join(task.options) or None, "verdict": summary.run.verdict,
             "bad": code != 0,
             "output_err": summary.run.output_err, "root": _root_name(data),
             "why": None},)


def _run_seconds(adir: Optional[Path]) -> float:
    total = 0.0
    if adir is None or not adir.is_dir():
        return total
    for p in adir.rglob("run.json"):
        try:
            total += float(read_json_file(p, "run record", strict=False).get("seconds") or 0.0)
        except (UsageError, ValueError, TypeError, AttributeError):
            continue
    return total


def remove_dumps(adir: Path) -> int:
    """Remove the dump folders of an analysis (run.json, reports and repro folders stay); bytes freed."""
    freed = 0
    for d in sorted(adir.rglob("*"), key=lambda p: -len(p.parts)):
        if d.is_dir() and not d.is_symlink() and d.name in _DUMP_DIRS:
            freed += sum(f.stat().st_size for f in d.rglob("*") if f.is_file() and not f.is_symlink())
            shutil.rmtree(d, ignore_errors=True)
    return freed


def _new_dirs(parent: Path, before: set) -> Optional[Path]:
    new = [p for p in parent.iterdir() if p.is_dir() and p.name not in before] if parent.is_dir() else []
    return max(new, key=lambda p: p.stat().st_mtime) if new else None


def run_task(task: Task, out_root: str, keep_dumps: bool = False, speed_runs: int = 0) -> TaskOutcome:
    """Run one task on this worker (see the module docstring), holding this machine's timing
    lock shared, then time it (``speed_runs`` rounds, :mod:`lar_prec.zoo.timing`)."""
    host = socket.gethostname()
    parent = Path(out_root) / "tasks" / f"{task.model}-{task.command}-{task.id[:12]}"
    started = time.monotonic()
    before: set = set()
    try:
        parent.mkdir(parents=True, exist_ok=True)
        # the task's folder is never empty, so each try gets a new numbered analysis folder inside
        # it (made empty here: an analysis' --out is one analysis, never nested in another)
        atomic_write_text(parent / "task.json", json_text({**task.to_json(), "identity": dict(task.identity)},
                                                           default=str), what="task record")
        before = {p.name for p in parent.iterdir()}
        with HostLock().held(exclusive=False):
            result, data, code = _call(task, new_run_dir(parent, task.command, what="task folder"))
    except Exception as exc:  # noqa: BLE001 (every way a try ends becomes an outcome or a retry)
        return _failed(task, exc, parent, before, host, time.monotonic() - started)
    seconds = time.monotonic() - started
    adir = Path(getattr(result, "dir", None) or getattr(result, "analysis_dir"))
    summary = summarize(data, exit_code=code)
    report = data.to_json() if hasattr(data, "to_json") else data
    run_seconds = _run_seconds(adir)
    removed = False
    if code == 0 and not keep_dumps:
        remove_dumps(adir)
        removed = True
    cells = cells_of(task, report, summary, code)
    try:
        if code == 1:  # a wrong result: run its failing side once more (before its dumps could go)
            with HostLock().held(exclusive=False):
                cells = rerun_wrong(task, result, report, cells)
        speed = time_task(task, parent, result, speed_runs)
    except AnalysisInterrupted as exc:
        return _failed(task, exc, parent, before, host, time.monotonic() - started)
    summary = with_speed(summary, speed)
    outcome = TaskOutcome(task.id, True, code, summary.run.verdict, summary, report,
                          cells, str(adir), host, seconds, run_seconds, removed, speed=speed)
    return dataclasses.replace(outcome, result_bytes=len(pickle.dumps(outcome, protocol=pickle.HIGHEST_PROTOCOL)))


def retried(exc: BaseException) -> bool:
    """Whether another try may cure it: a device that dropped, a run that crashed (a signal),
    stalled or timed out, a bug of lar-prec. Not: a load_and_run that refused with its own exit
    code (a flag the build lacks, a model it cannot load) or an input error: that is the answer."""
    if not isinstance(exc, LarPrecError):
        return True
    if isinstance(exc, (RemoteError, RunTimeout)):
        return True
    return isinstance(exc, RunError) and (exc.returncode is None or exc.returncode < 0)


def _failed(task: Task, exc: BaseException, parent: Path, before: set, host: str, seconds: float) -> TaskOutcome:
    adir = getattr(exc, "analysis_dir", None) or _new_dirs(parent, before)
    code = getattr(exc, "exit_code", 4) if isinstance(exc, LarPrecError) else 4
    why = " ".join(str(exc).split("\n")[0].split()) or type(exc).__name__
    if not isinstance(exc, LarPrecError):
        where = Path(adir) if adir else parent
        try:
            crash = where / "zoo-crash.txt"
            crash.write_text("".join(traceback.format_exception(type(exc), exc, exc.__traceback__)), encoding="utf-8")
            why = f"internal error of lar-prec: {type(exc).__name__}: {why}; traceback in {crash}"
        except OSError:
            why = f"internal error of lar-prec: {type(exc).__name__}: {why}"
    details = {"exit_code": code, "analysis_dir": str(adir) if adir else None, "host": host,
               "seconds": seconds, "run_seconds": _run_seconds(Path(adir) if adir else None)}
    if isinstance(exc, AnalysisInterrupted):
        reset_interrupt()  # the zoo is stopping this task: no retry, and the worker runs again
        details["exit_code"] = 130
    elif retried(exc):
        raise TaskFailed(why, details)
    return TaskOutcome(task.id, False, details["exit_code"], f"failed: {why}", None, None, (), details["analysis_dir"],
                       host, seconds, details["run_seconds"], why=why)


def stop_runs() -> int:
    """Kill the load_and_run runs under way in this worker (the client's Ctrl-C); how many."""
    n = interrupt_active_runs()
    stop_waiting()  # a task waiting for the machine's timing lock ends too
    time.sleep(0.2)  # the analysis sees its runs killed before new runs are allowed again
    reset_interrupt()
    return n


class ZooWorkerPlugin(WorkerPlugin):
    """Registered by the client on every worker (and on each worker a nanny starts again)."""

    name = "lar-prec-zoo"

    def __init__(self, embedded: bool = False) -> None:
        self.embedded = embedded

    def setup(self, worker: Any) -> None:
        tag = str(getattr(worker, "nanny", None) or worker.name)
        # what a predecessor under the same nanny left (it was killed: no teardown ran)
        kill_tagged(WORKER_TAG, tag, exclude=(os.getpid(),))
        os.environ[WORKER_TAG] = tag
        if self.embedded and threading.current_thread() is threading.main_thread():
            # the terminal's Ctrl-C reaches the embedded workers too: the client stops them
            signal.signal(signal.SIGINT, signal.SIG_IGN)

    def teardown(self, worker: Any) -> None:
        interrupt_active_runs()
        reset_interrupt()
