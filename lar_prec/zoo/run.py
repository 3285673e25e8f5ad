"""The client side of ``lar-prec zoo``: the manifest expanded into tasks, the tasks the store
already holds skipped (``zoo-<task id>-<sample>`` uids), the rest submitted to Dask (a device's
tasks ask for its resource; ``retries`` per task), each outcome written into the store as it
arrives (one transaction; a uid the store holds is never written again: 0 lost, 0 duplicated),
judged against the store's history, and the zoo's JSON (``lar-prec.zoo/1``) and page written.

Each finished task is timed (``speed_runs`` rounds, :mod:`lar_prec.zoo.timing`), its speed
stored beside its operators and judged against the store's history of the same machine
(:mod:`lar_prec.workflows.history.speed`) as its precision is.

Exit code: 3 when a task did not finish (its failure row says why), else 1 when a task found a
divergence or a regression (of precision or of speed), else 0; 130 on Ctrl-C (what finished is
in the store).
"""
from __future__ import annotations

import contextlib
import dataclasses
import os
import time
import uuid
from pathlib import Path
from typing import Any, Dict, Iterator, List, Mapping, Optional, Sequence

from distributed import CancelledError, KilledWorker, as_completed

from lar_prec import __version__
from lar_prec.errors import AnalysisInterrupted, StoreError
from lar_prec.outputs import atomic_write_text, json_text
from lar_prec.records import PathLike
from lar_prec.report.html import write_html
from lar_prec.run.config import resolve_load_and_run
from lar_prec.run.dirs import finish_analysis_dir, new_analysis_dir
from lar_prec.store.db import Store, open_store
from lar_prec.store.summary import Summary, now_iso, run_summary
from lar_prec.workflows.history.history import judge_stored
from lar_prec.workflows.history.speed import judge_speed
from lar_prec.workflows.sweep.speed import DEFAULT_SPEED_RUNS, check_speed_runs
from lar_prec.zoo.cluster import CONNECT_TIMEOUT, CtrlC, ZooCluster
from lar_prec.zoo.manifest import Manifest, load_manifest
from lar_prec.zoo.progress import ZooProgress
from lar_prec.zoo.tasks import Task, expand
from lar_prec.zoo.worker import TaskFailed, TaskOutcome, run_task

SCHEMA = "lar-prec.zoo/1"
_PAGES = ("report.html", "mixed.html", "quant.html")


def uid_prefix(task: Task) -> str:
    return f"zoo-{task.id}-"


def _finished(row: Dict[str, Any]) -> bool:
    return row["exit_code"] in (0, 1)


def _page(adir: Optional[str]) -> Optional[str]:
    """The analysis page, when this machine can reach it."""
    for name in _PAGES:
        if adir and os.path.isfile(os.path.join(adir, name)):
            return os.path.join(adir, name)
    return None


def _failure_summary(task: Task, why: str, code: int, details: Dict[str, Any]) -> Summary:
    """The row of a task that did not finish: what it was to run, and why it did not."""
    ident = dict(task.identity)
    run = run_summary(task.command, f"failed: {why}", code, runs=(), analysis_dir=details.get("analysis_dir"),
                      n_vars=0, n_not_ok=0, n_roots=0, output_err=None)
    run = dataclasses.replace(run, model_name=Path(task.model_path).name, model_sha256=ident["model"],
                              input_sha256=ident["input"], options=tuple(sorted(set(ident["option_flags"] + ident["flags"]))),
                              config="default", lar_path=task.lar, host=details.get("host"),
                              device=task.remote or f"{details.get('host') or 'local'}", device_kind=task.remote or "")
    return Summary(run, ())


class _Zoo:
    """One zoo run's state: the store, the entries of the page, the progress."""

    def __init__(self, manifest: Manifest, tasks: Sequence[Task], store: Store, progress: ZooProgress,
                 speed_runs: int = 0) -> None:
        self.m, self.tasks, self.store, self.progress = manifest, list(tasks), store, progress
        self.speed_runs = speed_runs
        self.dir = Path(".")  # the zoo's folder, claimed once the cluster runs
        self.entries: Dict[str, Dict[str, Any]] = {}
        self.samples: Dict[str, int] = {}
        #: where the client's own time went (seconds): the cluster's start, the store (writes and history)
        self.timing = {"cluster_start": 0.0, "store": 0.0}

    def entry(self, task: Task, state: str, row: Optional[Dict[str, Any]], **kw: Any) -> Dict[str, Any]:
        zoo = (row or {}).get("settings", {}).get("zoo", {}) if row else {}
        e = {**task.to_json(), "label": task.label, "state": state, "run": row["uid"] if row else None,
             "exit_code": row["exit_code"] if row else None, "verdict": row["verdict"] if row else None,
             "analysis_dir": row["analysis_dir"] if row else None, "host": row["host"] if row else None,
             "cells": zoo.get("cells") or [], "regressed": [], "history_runs": 0,
             "page": _page(row["analysis_dir"]) if row else None, **kw}
        if row is not None and _finished(row):
            jm = judge_stored(self.store, row, min_history=self.m.min_history)
            e["regressed"] = [v.name for v in jm.regressed()]
            e["history_runs"] = len(jm.past_runs)
            e["enough_history"] = jm.enough
            e["nondeterministic"] = [{"name": n["name"], "option": n["option"], "spread": n["spread"]}
                                     for n in jm.nondeterministic if n["source"]]
            sp = judge_speed(self.store, row, None, self.m.min_history)
            off = (kw.get("timing") or {}).get("off")
            e["speed"] = {"timed": bool(sp), "off": off if not sp else None, "parts": [v.to_json() for v in sp]}
            e["speed_regressed"] = [v.option or "default" for v in sp if v.verdict == "regressed"]
            e["cells"] = place(task, e["cells"], jm, sp)
        self.entries[task.id] = e
        return e

    def pending(self, again: bool) -> List[Task]:
        """The tasks to run; the others' entries come from the store."""
        todo = []
        for t in self.tasks:
            rows = self.store.runs(uid=uid_prefix(t))
            self.samples[t.id] = len(rows) + 1
            done = [r for r in rows if _finished(r)]
            if done and not again:
                self.entry(t, "stored", done[-1])
            else:
                todo.append(t)
        return todo

    def write(self, task: Task, summary: Summary, zoo: Dict[str, Any]) -> Dict[str, Any]:
        """Write one task's row (one transaction), unless the store holds its uid already."""
        uid = f"{uid_prefix(task)}{self.samples[task.id]}"
        settings = {**dict(summary.run.settings), "zoo": {"manifest": self.m.name, "task": task.id,
                                                          "sample": self.samples[task.id],
                                                          "identity": dict(task.identity), **zoo}}
        held = self.store.runs(uid=uid)
        if not held:
            try:
                self.store.write(Summary(dataclasses.replace(summary.run, uid=uid, settings=settings), summary.ops,
                                         summary.speeds))
            except StoreError:
                if not self.store.runs(uid=uid):  # another client wrote it meanwhile: fine; else the store failed
                    raise
            held = self.store.runs(uid=uid)
        return held[-1]

    @contextlib.contextmanager
    def store_time(self) -> Iterator[None]:
        """Count the time spent in the store (writes and the history check)."""
        t = time.monotonic()
        try:
            yield
        finally:
            self.timing["store"] += time.monotonic() - t

    def finished(self, task: Task, outcome: TaskOutcome) -> Dict[str, Any]:
        timing = outcome.speed or {}
        extra = {"seconds": outcome.seconds, "run_seconds": outcome.run_seconds, "result_bytes": outcome.result_bytes,
                 "dumps_removed": outcome.dumps_removed, "speed_seconds": timing.get("seconds") or 0.0,
                 "timing": {k: timing.get(k) for k in ("off", "rounds", "iter", "warmup_iter", "threads", "device", "dir",
                                                       "waited_seconds")}}
        if not outcome.finished or outcome.summary is None:
            return self.failed(task, outcome.why or outcome.verdict, outcome.exit_code,
                               {"analysis_dir": outcome.analysis_dir, "host": outcome.host, **extra})
        page = _page(outcome.analysis_dir)
        if page is None and outcome.report is not None:  # the worker's folder is out of reach: the page here
            page = str(write_html(outcome.report, self.dir / "pages" / f"{task.id}.html"))
        row = self.write(task, outcome.summary, {"cells": list(outcome.cells), "host": outcome.host})
        return self.entry(task, "done", row, page=page, **extra)

    def failed(self, task: Task, why: str, code: int, details: Dict[str, Any]) -> Dict[str, Any]:
        row = self.write(task, _failure_summary(task, why, code, details), {"host": details.get("host")})
        return self.entry(task, "failed", row, why=why, **{k: details.get(k) for k in ("seconds", "run_seconds")})

    def to_json(self, started: float, interrupted: bool, scheduler: Optional[str]) -> Dict[str, Any]:
        # pages relative to the zoo's folder: the folder can move with the analyses beside it
        done = [e for e in self.entries.values() if e["state"] != "stored"]
        timing = {**{k: round(v, 3) for k, v in self.timing.items()},
                  "tasks": round(sum(e.get("seconds") or 0.0 for e in done), 3),
                  "runs": round(sum(e.get("run_seconds") or 0.0 for e in done), 3),
                  "speed": round(sum(e.get("speed_seconds") or 0.0 for e in done), 3),
                  "peak_result_bytes": max((e.get("result_bytes") or 0 for e in done), default=0)}
        entries = [{**self.entries[t.id], "page": os.path.relpath(self.entries[t.id]["page"], self.dir)
                    if self.entries[t.id].get("page") else None} for t in self.tasks if t.id in self.entries]
        counts = {"tasks": len(self.tasks), "ran": sum(e["state"] != "stored" for e in entries),
                  "stored": sum(e["state"] == "stored" for e in entries),
                  "failed": sum(e["state"] == "failed" for e in entries),
                  "divergent": sum(any(c.get("bad") for c in e["cells"]) for e in entries),
                  "regressed": sum(bool(e["regressed"]) for e in entries),
                  "speed_regressed": sum(bool(e.get("speed_regressed")) for e in entries),
                  "nondeterministic": sum(bool(e.get("nondeterministic")) or any(
                      (c.get("run_to_run") or {}).get("nondeterministic") for c in e["cells"]) for e in entries),
                  "not_run": len(self.tasks) - len(entries)}
        code = 130 if interrupted else 3 if counts["failed"] else \
            1 if counts["divergent"] or counts["regressed"] or counts["speed_regressed"] else 0
        return {"schema": SCHEMA, "name": self.m.name, "manifest": str(self.m.path), "store": self.store.url,
                "scheduler": scheduler or "embedded", "out": str(self.dir), "lar_prec_version": __version__,
                "created": now_iso(), "seconds": round(time.monotonic() - started, 3), "timing": timing, "counts": counts,
                "exit_code": code, "models": [m.name for m in self.m.models], "builds": [b.name for b in self.m.builds],
                "devices": [d.name for d in self.m.devices], "tasks": entries}


def _cell_option(task: Task, cell: Mapping[str, Any]) -> Optional[str]:
    """The option a cell stands for (cells stored before they carried it: from the column)."""
    if "option" in cell:
        return cell["option"]
    col = str(cell.get("column") or "")
    if task.command == "sweep" and col.startswith("sweep "):
        return col[len("sweep "):].split(" \u00b7 ", 1)[0]
    return ",".join(task.options) or None


def place(task: Task, cells: Sequence[Mapping[str, Any]], jm: Any, speed: Sequence[Any] = ()) -> List[Dict[str, Any]]:
    """Each cell with the regressions and nondeterministic operators of its own option
    (``regressed``, ``nondeterministic``) and its option's speed (``speed``: the option's
    verdict, else the default run's; ``speed_regressed``): a sweep's cells one option each,
    another task's one cell all of them."""
    out = []
    single = len(cells) <= 1
    parts = {v.option: v for v in speed}
    for c in cells:
        opt = _cell_option(task, c)
        mine = (lambda o: True) if single else (lambda o: o == opt)  # noqa: E731
        sp = parts.get(opt) or (parts.get(None) if single else None)
        out.append({**c, "option": opt, "regressed": [v.name for v in jm.regressed() if mine(v.option)],
                    "nondeterministic": [n["name"] for n in jm.nondeterministic if n["source"] and mine(n["option"])],
                    "speed": None if sp is None else sp.to_json(),
                    "speed_regressed": [v.option or "default" for v in speed if v.verdict == "regressed"
                                        and (single or v.option == opt)]})
    return out


def _check_local_builds(tasks: Sequence[Task]) -> None:
    """An embedded cluster runs here: a local build's binary must exist here (exit 2 otherwise)."""
    for path in sorted({t.lar for t in tasks if t.remote is None and t.lar}):
        resolve_load_and_run(path)


def run_zoo(manifest_path: PathLike, *, store: str, scheduler: Optional[str] = None, out: Optional[PathLike] = None,
            keep_dumps: bool = False, again: bool = False, workers: Optional[int] = None,
            progress: Optional[ZooProgress] = None, connect_timeout: float = CONNECT_TIMEOUT,
            speed_runs: int = DEFAULT_SPEED_RUNS) -> Dict[str, Any]:
    """Run a zoo (see the module docstring); the ``lar-prec.zoo/1`` object, also written as
    ``zoo.json`` and ``zoo.html`` in the zoo's folder.

    Raises:
        ManifestError/UsageError/StoreError (exit 2) before anything runs: the manifest, a
            device no worker owns, a store that cannot be opened; ClusterError (exit 3): the
            scheduler cannot be reached; UsageError (2): ``speed_runs`` not 0 or 2..50;
            AnalysisInterrupted (130): Ctrl-C, after the cluster's
            runs were stopped (the zoo's JSON and page say what finished).
    """
    started = time.monotonic()
    speed_runs = check_speed_runs(speed_runs)
    m = load_manifest(manifest_path)
    tasks = expand(m)
    progress = progress or ZooProgress(enabled=False)
    with CtrlC() as ctrl_c:
        return _zoo(m, tasks, ctrl_c, started, store=store, scheduler=scheduler, out=out, keep_dumps=keep_dumps,
                    again=again, workers=workers, progress=progress, connect_timeout=connect_timeout,
                    speed_runs=speed_runs)


def _zoo(m: Manifest, tasks: Sequence[Task], ctrl_c: CtrlC, started: float, *, store: str, scheduler: Optional[str],
         out: Optional[PathLike], keep_dumps: bool, again: bool, workers: Optional[int], progress: ZooProgress,
         connect_timeout: float, speed_runs: int) -> Dict[str, Any]:
    with open_store(store) as db, contextlib.ExitStack() as stack:
        z = _Zoo(m, tasks, db, progress, speed_runs)
        todo = z.pending(again)
        cluster = None
        if todo:
            if scheduler is None:
                _check_local_builds(todo)
            used = {t.device for t in todo}
            devices = [d for d in m.devices if d.name in used]
            t = time.monotonic()
            cluster = stack.enter_context(ZooCluster(scheduler, devices, workers=workers, tag=uuid.uuid4().hex,
                                                     connect_timeout=connect_timeout, ctrl_c=ctrl_c))
            z.timing["cluster_start"] = time.monotonic() - t
            ctrl_c.check()  # a Ctrl-C Dask swallowed while the cluster started
            cluster.check_devices(devices)
        # the zoo's folder once the cluster is there: a refused start leaves no folder behind
        z.dir = new_analysis_dir(out, "zoo", replace=False).resolve()  # the store points into earlier ones
        interrupted = False
        if cluster is not None:
            link = cluster.dashboard
            if link:
                progress.note(f"Dask dashboard: {link}")
            interrupted = _run(z, cluster, todo, keep_dumps, ctrl_c)
        data = z.to_json(started, interrupted, scheduler)
    zoo_dir = z.dir
    atomic_write_text(zoo_dir / "zoo.json", json_text(data, default=str), what="zoo result")
    write_html(data, zoo_dir / "zoo.html", title=f"lar-prec zoo: {m.name}")
    interrupted = interrupted or ctrl_c.seen  # a Ctrl-C while the page was written, or one Dask swallowed
    finish_analysis_dir(zoo_dir)
    if interrupted:
        raise AnalysisInterrupted(f"interrupted; {data['counts']['ran']} task(s) finished are in the store, "
                                  f"{data['counts']['not_run']} not run; {zoo_dir / 'zoo.html'}", analysis_dir=zoo_dir)
    return data


def _run(z: _Zoo, cluster: ZooCluster, todo: Sequence[Task], keep_dumps: bool, ctrl_c: CtrlC) -> bool:
    """Submit, then record each outcome as it arrives; True when Ctrl-C stopped it."""
    client = cluster.client
    nonce = uuid.uuid4().hex[:8]
    futures: Dict[Any, Task] = {}
    seen = 0.0
    try:  # a Ctrl-C while submitting too: what went out is stopped
        for t in todo:
            key = f"zoo-{t.id}-{z.samples[t.id]}-{nonce}"
            futures[client.submit(run_task, t, str(z.dir), keep_dumps, z.speed_runs, key=key, pure=False, retries=z.m.retries,
                                  resources={t.resource: 1} if t.resource else None)] = t
        z.progress.start(len(todo))
        results = as_completed(list(futures), loop=client.loop)
        while not results.is_empty():
            ctrl_c.check()
            if results.has_ready():
                for fut in results.next_batch(block=False):
                    z.progress.finished(_record(z, futures[fut], fut))
            else:
                time.sleep(0.1)  # short naps: Ctrl-C is taken at once
            if time.monotonic() - seen > 1.0:  # the running count, from the scheduler once a second
                seen = time.monotonic()
                keys = {f.key for f in futures if not f.done()}
                threads = client.nthreads()  # a worker holds more tasks than it runs at once
                z.progress.running(sum(min(len(keys & set(ks)), threads.get(w, 1))
                                       for w, ks in client.processing().items()))
    except KeyboardInterrupt:
        z.progress.close()
        left = [f for f in futures if not f.done()]
        cluster.stop_runs([f.key for f in left])
        client.cancel(left, force=True)
        return True
    finally:
        z.progress.close()
    return False


def _record(z: _Zoo, task: Task, fut: Any) -> Dict[str, Any]:
    with z.store_time():
        try:
            return z.finished(task, fut.result())
        except TaskFailed as exc:
            d = exc.details
            return z.failed(task, f"{exc.why} (after {z.m.retries + 1} tries)", int(d.get("exit_code") or 3), d)
        except KilledWorker as exc:
            return z.failed(task, f"the worker running it died on every try (Dask's allowed-failures): {exc}", 3, {})
        except CancelledError:
            return z.failed(task, "cancelled by the cluster", 3, {})
