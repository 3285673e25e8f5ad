"""A run as a local process: preflight checks, then start, wait (or time out) and record the exit.

:func:`preflight` builds the command line and checks the model, inputs and dump folder before
anything starts; :func:`execute` runs load_and_run in its own session (process group) so a
timeout or Ctrl-C kills everything it started.
"""
from __future__ import annotations

import contextlib
import logging
import shlex
import subprocess
import time
from dataclasses import replace
from pathlib import Path
from typing import Callable, Optional, Sequence, Tuple

from lar_prec.dumps.binary import INCOMPLETE_MARKER
from lar_prec.errors import RunError, UsageError
from lar_prec.inputspec import check_file
from lar_prec.lar.graphopts import rewritten_models  # no megengine: parses the bundled runner's stderr line
from lar_prec.outputs import sha256_file
from lar_prec.records import PathLike
from lar_prec.run.argv import build_argv
from lar_prec.run.config import CONFIGS, LoadAndRun, RunConfig, load_and_run_version
from lar_prec.run.env import local_environment
from lar_prec.run.proc import child_env, interrupted, kill_group, register, signal_name, stall_after, tail, unregister, wait_watched
from lar_prec.run.record import RunResult, write_run_json
from lar_prec.run.steps import record_interrupt, refuse

log = logging.getLogger(__name__)


def preflight(rec: RunResult, lar: LoadAndRun, cfg: RunConfig, model: PathLike, input_arg: str,
               extra_flags: Sequence[str]) -> RunResult:
    """Step 2: command line, model and input checks, hashes, ``--version``, the dump folder;
    then run.json says ``running``. UsageError (recorded) when the run cannot start."""
    try:
        argv = build_argv(lar, rec.model_path, input_arg, cfg, dump_dir=rec.dump_dir, text_dump=rec.text_dump,
                          extra_flags=extra_flags, out_dump=rec.out_dump, timed=rec.timed)
        rec = replace(rec, argv=tuple(argv))
        stall_after()  # a bad LAR_PREC_STALL_AFTER is refused before anything starts
        check_file(model, "model file")
        for item in rec.inputs:
            check_file(item["path"], "input file")
        try:
            sha = sha256_file(rec.model_path)
        except OSError as exc:
            raise UsageError(f"cannot read model file {model}: {exc.strerror or exc}") from None
        version = load_and_run_version(lar, rec.timeout)
        base_vars = [k for k, _ in CONFIGS[cfg.name].env] if cfg.name in CONFIGS else []
        rec = replace(rec, model_sha256=sha, load_and_run={**rec.load_and_run, "version": version},
                      environment=local_environment(lar.describe(), version, cfg.env_dict(), base_vars))
        if rec.dump_dir is not None:
            try:
                rec.dump_dir.mkdir()  # the real binary needs it to exist
                # iodump.DumpFolder reads this marker; it goes only when the run ends well, so a
                # folder left by a killed lar-prec is never taken for a complete dump
                (rec.dump_dir / INCOMPLETE_MARKER).write_text("load_and_run has not finished\n")
            except OSError as exc:
                raise UsageError(f"cannot create the dump folder {rec.dump_dir}: {exc.strerror or exc}") from None
        if rec.out_dump is not None:
            try:
                rec.out_dump.mkdir()
            except OSError as exc:
                raise UsageError(f"cannot create the output dump folder {rec.out_dump}: {exc.strerror or exc}") from None
        rec = replace(rec, status="running")
        write_run_json(rec)
    except UsageError as exc:
        raise refuse(rec, exc) from None
    except KeyboardInterrupt:
        record_interrupt(rec, "interrupted before load_and_run started")
        raise
    return rec


def execute(rec: RunResult, lar: LoadAndRun, on_started: Optional[Callable[[], None]]) -> Tuple[RunResult, str]:
    """Step 3: start load_and_run in its own session and watch it until it ends.

    Returns the record with the exit status and how it ended: ``"exited"``, ``"timeout"``
    (killed after ``rec.timeout`` s) or ``"stalled"`` (killed after using no CPU for the
    grace period of :func:`lar_prec.run.proc.wait_watched` while alive and dead by the rule of
    :mod:`lar_prec.stall`: not slow, not waiting).
    Ctrl-C (or an interrupt from another thread) kills the process group, records
    ``interrupted`` and raises KeyboardInterrupt.
    """
    env = child_env(dict(rec.env_changes), bundled=lar.is_bundled)
    log.info("run %s: %s", rec.label, " ".join(shlex.quote(a) for a in rec.argv))
    stdout_path, stderr_path = rec.dir / "stdout.txt", rec.dir / "stderr.txt"
    ended = "exited"
    t0 = time.monotonic()
    try:
        out_fh, err_fh = open(stdout_path, "wb"), open(stderr_path, "wb")
    except OSError as exc:
        raise refuse(rec, UsageError(f"cannot create {stdout_path.name} in {rec.dir}: {exc.strerror or exc}")) from None
    with out_fh, err_fh:
        try:
            proc = subprocess.Popen(list(rec.argv), stdout=out_fh, stderr=err_fh, stdin=subprocess.DEVNULL, env=env,
                                    start_new_session=True)
        except OSError as exc:
            rec = replace(rec, seconds=round(time.monotonic() - t0, 3), status="failed",
                          error=f"cannot start load_and_run {rec.argv[0]}: {exc.strerror}")
            with contextlib.suppress(UsageError):
                write_run_json(rec)
            err = RunError(rec.error or "", run_dir=rec.dir, argv=rec.argv)
            err.result = rec
            raise err from None
        try:
            register(proc)
            if on_started is not None:
                on_started()
            ended = wait_watched(proc, rec.timeout, stderr_path=stderr_path)
            if ended != "exited":
                kill_group(proc)
        except BaseException:  # KeyboardInterrupt and friends: never leave the run running
            kill_group(proc)
            record_interrupt(_exited(rec, proc, t0, stderr_path), "interrupted; the process group was killed")
            raise
        finally:
            unregister(proc)
    rec = _exited(rec, proc, t0, stderr_path)
    if interrupted() and (ended != "exited" or proc.returncode != 0):
        # another thread got Ctrl-C and killed this run's group (interrupt_active_runs)
        record_interrupt(rec, "interrupted; the process group was killed")
        raise KeyboardInterrupt
    return rec, ended


def _exited(rec: RunResult, proc: "subprocess.Popen", t0: float, stderr_path: Path) -> RunResult:
    try:
        with open(stderr_path, "r", encoding="utf-8", errors="replace") as fh:
            # the line comes before the run, near the start of stderr
            rewritten = tuple(rewritten_models(fh.read(1 << 20)))
    except OSError:
        rewritten = ()
    return replace(rec, seconds=round(time.monotonic() - t0, 3), returncode=proc.returncode,
                   signal=signal_name(proc.returncode), stderr_tail=tail(stderr_path), rewritten_models=rewritten)
