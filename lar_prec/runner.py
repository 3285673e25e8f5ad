"""Build load_and_run command lines, run each configuration in a fresh process, keep run folders.

A *run* is one process: ``load_and_run MODEL --input ... --bin-io-dump DIR --iter 1
--warmup-iter 0`` plus a configuration's flags and environment. MGB_USE_MEGDNN_DBG is read once
per process (per comp node), so configurations are never mixed in one process.

Folder layout of an analysis (:func:`new_analysis_dir`)::

    <analysis>/inputs/<name>.npy, inputs.json     prepared once, shared by every run
    <analysis>/<label>/run.json                   one folder per run, never reused
    <analysis>/<label>/dump/                      --bin-io-dump folder
    <analysis>/<label>/io_dump.txt                --io-dump file (text-dump runs)
    <analysis>/<label>/stdout.txt, stderr.txt     the process's output

``run.json`` is written when the run starts (status ``running``) and rewritten when it ends,
so a folder always says what happened to it, even after a crash of lar-prec itself.

The runner's parts: this module (configurations, which load_and_run, one run in steps),
:mod:`lar_prec.runargv` (command lines), :mod:`lar_prec.runremote` (runs on a device, ``remote=``),
:mod:`lar_prec.runenv` (the environment recorded per run),
:mod:`lar_prec.runrecord` (the run record and run.json), :mod:`lar_prec.rundirs` (folders,
claimed atomically), :mod:`lar_prec.runinputs` (inputs, checked before any folder exists),
:mod:`lar_prec.runproc` (child processes, Ctrl-C). Their public names are re-exported here.
"""
from __future__ import annotations

import contextlib
import logging
import math
import os
import re
import shlex
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Callable, Dict, Iterable, List, Mapping, Optional, Sequence, Tuple, Union

from lar_prec.errors import AnalysisInterrupted, LoadAndRunNotFound, RunError, RunTimeout, UsageError
from lar_prec.inputspec import check_file, split_input_specs  # noqa: F401  (re-exported)
from lar_prec.runargv import (  # noqa: F401  (re-exported)
    build_argv,
    check_extra_flags,
    parse_env_assignments,
    split_lar_args,
)
from lar_prec.rundirs import CLAIM_NAME, new_analysis_dir, new_run_dir  # noqa: F401  (re-exported)
from lar_prec.runinputs import (  # noqa: F401  (re-exported)
    INPUTS_SCHEMA,
    PlannedInput,
    PreparedInput,
    PreparedInputs,
    plan_inputs,
    prepare_inputs,
    read_model_io,
    sha256_file,
    write_inputs,
)
from lar_prec.runproc import (  # noqa: F401  (re-exported)
    KILL_GRACE_SECONDS,
    STDERR_TAIL_LINES,
    child_env,
    failure_hint,
    interrupt_active_runs,
    interrupted,
    kill_group,
    last_meaningful_line,
    read_end,
    register,
    reset_interrupt,
    run_bounded,
    signal_name,
    tail,
    unregister,
)
from lar_prec.runrecord import RUN_SCHEMA, RunResult, now_iso, read_run_json, write_run_json  # noqa: F401

if TYPE_CHECKING:
    from lar_prec.runremote import RemoteSessions, RemoteSpec

log = logging.getLogger(__name__)

#: environment variable naming the load_and_run to use when --lar is not given
ENV_LOAD_AND_RUN = "LAR_PREC_LOAD_AND_RUN"
#: value of --lar / LAR_PREC_LOAD_AND_RUN that forces the bundled runner
BUNDLED = "bundled"
DEBUG_ENV = "MGB_USE_MEGDNN_DBG"
#: file in a dump folder that marks it incomplete (the name lar_prec.iodump looks for)
INCOMPLETE_MARKER = ".incomplete"
#: seconds ``load_and_run --version`` may take (less when the run's own timeout is shorter)
VERSION_TIMEOUT = 10.0

from lar_prec.records import PathLike  # noqa: E402


# --------------------------------------------------------------------------- configurations


@dataclass(frozen=True)
class RunConfig:
    """A named way to run load_and_run: extra flags and environment changes.

    ``env`` maps a variable to its value, or to None to remove it from the child's environment.
    """

    name: str
    flags: Tuple[str, ...] = ()
    env: Tuple[Tuple[str, Optional[str]], ...] = ()
    description: str = ""

    def env_dict(self) -> Dict[str, Optional[str]]:
        """The environment changes as a dict."""
        return dict(self.env)

    def with_extra(self, flags: Sequence[str] = (), env: Optional[Mapping[str, Optional[str]]] = None) -> "RunConfig":
        """This configuration plus user flags (appended: gflags lets the last one win) and env."""
        merged = {**self.env_dict(), **dict(env or {})}
        return replace(self, flags=self.flags + tuple(flags), env=tuple(merged.items()))


# Non-naive configurations remove MGB_USE_MEGDNN_DBG: a value inherited from the user's shell
# would silently turn "default" into naive and hide every difference.
CONFIGS: Dict[str, RunConfig] = {
    "naive": RunConfig(
        "naive", ("--cpu",), ((DEBUG_ENV, "2"),),
        "reference kernels: MGB_USE_MEGDNN_DBG=2, on CPU (the variable only affects CPU comp nodes)",
    ),
    "default": RunConfig("default", (), ((DEBUG_ENV, None),), "the default kernels and algorithm heuristic"),
    "reproducible": RunConfig(
        "reproducible", ("--reproducible",), ((DEBUG_ENV, None),), "algorithms restricted to reproducible ones"
    ),
    "fast-run": RunConfig(
        "fast-run", ("--fast-run",), ((DEBUG_ENV, None),), "algorithms picked by profiling (fast-run)"
    ),
}


def get_config(name: "str | RunConfig") -> RunConfig:
    """A configuration by name (``naive``, ``default``, ``reproducible``, ``fast-run``)."""
    if isinstance(name, RunConfig):
        return name
    key = name.replace("_", "-")
    if key not in CONFIGS:
        raise UsageError(f"unknown configuration {name!r}; choose one of {', '.join(CONFIGS)}")
    return CONFIGS[key]


# --------------------------------------------------------------------------- which load_and_run


@dataclass(frozen=True)
class LoadAndRun:
    """The load_and_run used for runs: an external binary or the bundled ``lar_prec.lar``."""

    path: Optional[str]
    argv_prefix: Tuple[str, ...]
    kind: str  # "bundled" | "external"
    source: str = ""  # where it was chosen from: --lar, $LAR_PREC_LOAD_AND_RUN, PATH, bundled

    @property
    def is_bundled(self) -> bool:
        """True for ``python -m lar_prec.lar``."""
        return self.kind == "bundled"

    def describe(self) -> str:
        """One line for logs and run.json."""
        return "bundled lar_prec.lar" if self.is_bundled else str(self.path)


def bundled_load_and_run() -> LoadAndRun:
    """The bundled runner, run by this Python interpreter."""
    return LoadAndRun(None, (sys.executable, "-m", "lar_prec.lar"), "bundled", "bundled")


def _external(value: str, source: str) -> LoadAndRun:
    candidate = os.path.expanduser(value)
    found = candidate if os.sep in candidate else shutil.which(candidate)
    if found is None or not os.path.exists(found):
        raise LoadAndRunNotFound(f"load_and_run {value!r} (from {source}) does not exist")
    if os.path.isdir(found):
        raise LoadAndRunNotFound(f"load_and_run {value!r} (from {source}) is a folder, not a program")
    if not os.access(found, os.X_OK):
        raise LoadAndRunNotFound(f"load_and_run {value!r} (from {source}) is not executable (chmod +x?)")
    path = os.path.abspath(found)
    return LoadAndRun(path, (path,), "external", source)


def resolve_load_and_run(lar: "str | LoadAndRun | None" = None) -> LoadAndRun:
    """Choose load_and_run: ``--lar PATH``, else ``$LAR_PREC_LOAD_AND_RUN``, else
    ``load_and_run`` on PATH, else the bundled one. ``bundled`` as a value forces the bundled one.

    Raises LoadAndRunNotFound when a given path is missing or not executable.
    """
    if isinstance(lar, LoadAndRun):
        return lar
    if lar:
        return bundled_load_and_run() if lar == BUNDLED else _external(lar, "--lar")
    env = os.environ.get(ENV_LOAD_AND_RUN, "")
    if env:
        return bundled_load_and_run() if env == BUNDLED else _external(env, "$" + ENV_LOAD_AND_RUN)
    on_path = shutil.which("load_and_run")
    if on_path:
        return _external(on_path, "PATH")
    return bundled_load_and_run()


_VERSION_CACHE: Dict[str, str] = {}


def megengine_version() -> Optional[str]:
    """The installed megengine wheel's version, without importing it (None when absent)."""
    try:
        from importlib.metadata import PackageNotFoundError, version
    except ImportError:  # pragma: no cover - Python < 3.8
        return None
    try:
        return version("megengine")
    except PackageNotFoundError:
        return None


def load_and_run_version(lar: LoadAndRun, timeout: Optional[float] = None) -> str:
    """What ``--version`` of an external binary prints (first line), or the bundled runner's name.

    The check runs in its own process group for at most ``timeout`` (and at most
    :data:`VERSION_TIMEOUT`) seconds; Ctrl-C kills it and raises KeyboardInterrupt.
    """
    from lar_prec import __version__

    if lar.is_bundled:
        return f"bundled lar_prec.lar {__version__} (megenginelite {megengine_version() or 'missing'})"
    if lar.path is None:
        return "unknown"
    if lar.path not in _VERSION_CACHE:
        limit = VERSION_TIMEOUT if timeout is None else min(VERSION_TIMEOUT, timeout)
        try:
            text = run_bounded([lar.path, "--version"], timeout=limit)
        except OSError as exc:
            text = f"unknown ({exc.strerror or exc.__class__.__name__})"
        if text is None:
            text = f"unknown (--version did not answer within {limit:g} s)"
        _VERSION_CACHE[lar.path] = text.splitlines()[0] if text else "unknown (--version printed nothing)"
    return _VERSION_CACHE[lar.path]


def check_timeout(timeout: object) -> Optional[float]:
    """A run's timeout in seconds: None (no timeout) or a finite number > 0; else UsageError."""
    if timeout is None:
        return None
    try:
        value = float(timeout)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        value = math.nan
    if isinstance(timeout, bool) or not (math.isfinite(value) and value > 0):
        raise UsageError(f"--timeout {timeout!r}: expected a finite number of seconds > 0 "
                         "(leave --timeout out for no timeout)")
    return value


# --------------------------------------------------------------------------- one run, in steps


def _resolve(path: PathLike) -> Path:
    """An absolute path, symlinks resolved where they can be (a loop stays as given)."""
    try:
        return Path(path).resolve()
    except (OSError, RuntimeError):  # RuntimeError: a symlink loop (Python < 3.13)
        return Path(os.path.abspath(path))


def _new_record(run_dir: Path, label: str, cfg: RunConfig, lar: LoadAndRun, model: PathLike,
                inputs: "PreparedInputs | str | None", text_dump: bool, timeout: Optional[float]) -> RunResult:
    """Step 1: the record of a run that has not started."""
    return RunResult(
        label=label, config=cfg.name, dir=run_dir,
        dump_dir=None if text_dump else run_dir / "dump",
        text_dump=run_dir / "io_dump.txt" if text_dump else None,
        argv=(), env_changes=cfg.env, returncode=None, signal=None, seconds=0.0, stderr_tail="",
        incomplete=True, status="not_started", config_flags=cfg.flags,
        load_and_run={"kind": lar.kind, "path": lar.path, "source": lar.source,
                      "argv_prefix": list(lar.argv_prefix), "version": None},
        megengine_version=megengine_version(), model_path=str(_resolve(model)),
        inputs=tuple(inputs.to_json()) if isinstance(inputs, PreparedInputs) else (),
        started=now_iso(), timeout=timeout,
    )


def _refuse(rec: RunResult, exc: UsageError) -> UsageError:
    """The run cannot start: record why (as far as the disk lets us) and return ``exc``."""
    rec = replace(rec, status="not_started", error=str(exc))
    with contextlib.suppress(UsageError):  # a full disk: the error itself says enough
        write_run_json(rec)
    exc.run_dir = rec.dir  # type: ignore[attr-defined]
    exc.result = rec  # type: ignore[attr-defined]
    return exc


def _record_interrupt(rec: RunResult, error: str) -> None:
    rec = replace(rec, status="interrupted", error=error)
    try:
        write_run_json(rec)
    except UsageError as exc:
        log.warning("%s", exc)


def _preflight(rec: RunResult, lar: LoadAndRun, cfg: RunConfig, model: PathLike, input_arg: str,
               extra_flags: Sequence[str]) -> RunResult:
    """Step 2: command line, model and input checks, hashes, ``--version``, the dump folder;
    then run.json says ``running``. UsageError (recorded) when the run cannot start."""
    try:
        argv = build_argv(lar, rec.model_path, input_arg, cfg, dump_dir=rec.dump_dir, text_dump=rec.text_dump,
                          extra_flags=extra_flags)
        rec = replace(rec, argv=tuple(argv))
        check_file(model, "model file")
        for item in rec.inputs:
            check_file(item["path"], "input file")
        try:
            sha = sha256_file(rec.model_path)
        except OSError as exc:
            raise UsageError(f"cannot read model file {model}: {exc.strerror or exc}") from None
        version = load_and_run_version(lar, rec.timeout)
        from lar_prec.runenv import local_environment

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
        rec = replace(rec, status="running")
        write_run_json(rec)
    except UsageError as exc:
        raise _refuse(rec, exc) from None
    except KeyboardInterrupt:
        _record_interrupt(rec, "interrupted before load_and_run started")
        raise
    return rec


def _execute(rec: RunResult, lar: LoadAndRun, on_started: Optional[Callable[[], None]]) -> Tuple[RunResult, bool]:
    """Step 3: start load_and_run in its own session and wait for it (or its timeout).

    Returns the record with the exit status and whether the timeout killed it. Ctrl-C (or an
    interrupt from another thread) kills the process group, records ``interrupted`` and
    raises KeyboardInterrupt.
    """
    env = child_env(dict(rec.env_changes), bundled=lar.is_bundled)
    log.info("run %s: %s", rec.label, " ".join(shlex.quote(a) for a in rec.argv))
    stdout_path, stderr_path = rec.dir / "stdout.txt", rec.dir / "stderr.txt"
    timed_out = False
    t0 = time.monotonic()
    try:
        out_fh, err_fh = open(stdout_path, "wb"), open(stderr_path, "wb")
    except OSError as exc:
        raise _refuse(rec, UsageError(f"cannot create {stdout_path.name} in {rec.dir}: {exc.strerror or exc}")) from None
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
            err.result = rec  # type: ignore[attr-defined]
            raise err from None
        try:
            register(proc)
            if on_started is not None:
                on_started()
            proc.wait(timeout=rec.timeout)
        except subprocess.TimeoutExpired:
            timed_out = True
            kill_group(proc)
        except BaseException:  # KeyboardInterrupt and friends: never leave the run running
            kill_group(proc)
            _record_interrupt(_exited(rec, proc, t0, stderr_path), "interrupted; the process group was killed")
            raise
        finally:
            unregister(proc)
    rec = _exited(rec, proc, t0, stderr_path)
    if interrupted() and (timed_out or proc.returncode != 0):
        # another thread got Ctrl-C and killed this run's group (interrupt_active_runs)
        _record_interrupt(rec, "interrupted; the process group was killed")
        raise KeyboardInterrupt
    return rec, timed_out


def _exited(rec: RunResult, proc: "subprocess.Popen", t0: float, stderr_path: Path) -> RunResult:
    from lar_prec.graphopts import rewritten_models  # no megengine: parses the bundled runner's line

    try:
        with open(stderr_path, "r", encoding="utf-8", errors="replace") as fh:
            # the line comes before the run, near the start of stderr
            rewritten = tuple(rewritten_models(fh.read(1 << 20)))
    except OSError:
        rewritten = ()
    return replace(rec, seconds=round(time.monotonic() - t0, 3), returncode=proc.returncode,
                   signal=signal_name(proc.returncode), stderr_tail=tail(stderr_path), rewritten_models=rewritten)


#: the bundled runner's message for an --input name the model lacks
_UNKNOWN_INPUT = re.compile(r"^the model has no input named ")


def _conclude(rec: RunResult, timed_out: bool) -> RunResult:
    """Step 4: the final run.json; the record of a good run, or RunError / RunTimeout."""
    if not timed_out and rec.returncode == 0:
        rec = replace(rec, status="ok", incomplete=False)
        if rec.dump_dir is not None:
            with contextlib.suppress(FileNotFoundError):
                (rec.dump_dir / INCOMPLETE_MARKER).unlink()
        try:
            write_run_json(rec)
        except UsageError as exc:  # the run is fine, its record is not on disk: an output error
            exc.run_dir, exc.result = rec.dir, rec  # type: ignore[attr-defined]
            raise
        return rec
    stderr = read_end(rec.dir / "stderr.txt")
    # the bundled runner prefixes its errors like a program does; the message already says who failed
    last = re.sub(r"^load_and_run: error: ", "", last_meaningful_line(stderr))
    hint = failure_hint(stderr)
    where = f"run {rec.label!r} ({rec.dir})"
    if timed_out:
        status = "timeout"
        msg = f"load_and_run did not finish within {rec.timeout:g} s and was killed with its process group; {where}"
    elif rec.returncode is not None and rec.returncode < 0:
        status = "crashed"
        msg = f"load_and_run was killed by {rec.signal} in {where}" + (f": {last}" if last else "")
    else:
        status = "failed"
        msg = f"load_and_run failed (exit {rec.returncode}) in {where}: {last or 'no message on stderr'}"
    if hint:
        msg += f" -- hint: {hint}"
    rec = replace(rec, status=status, error=msg, hint=hint)
    if rec.dump_dir is not None and rec.dump_dir.is_dir():
        with contextlib.suppress(OSError):
            (rec.dump_dir / INCOMPLETE_MARKER).write_text(msg + "\n")
    try:
        write_run_json(rec)
    except UsageError as exc:
        msg += f" (and {exc})"
    if rec.load_and_run.get("kind") == "bundled" and _UNKNOWN_INPUT.search(last):
        # an input the model lacks is the user's input error (exit 2), as for shape-only inputs
        usage = UsageError(f"{last} -- see {rec.json_path}")
        usage.run_dir, usage.result = rec.dir, rec  # type: ignore[attr-defined]
        raise usage
    cls = RunTimeout if timed_out else RunError
    err = cls(msg, run_dir=rec.dir, returncode=rec.returncode, argv=rec.argv, stderr_tail=rec.stderr_tail)
    err.result = rec  # type: ignore[attr-defined]
    raise err


def run_once(
    model: PathLike,
    inputs: "PreparedInputs | str | None",
    config: "RunConfig | str",
    out_dir: PathLike,
    *,
    lar: "LoadAndRun | str | None" = None,
    text_dump: bool = False,
    timeout: Optional[float] = None,
    extra_flags: Sequence[str] = (),
    extra_env: Optional[Mapping[str, Optional[str]]] = None,
    label: Optional[str] = None,
    on_started: Optional[Callable[[], None]] = None,
    remote: "RemoteSessions | None" = None,
) -> RunResult:
    """Run load_and_run once in a fresh process, in a new folder under ``out_dir``.

    With ``remote`` (:class:`lar_prec.runremote.RemoteSessions`) the process runs on that
    device (``lar`` is then ignored: the sessions name the device's load_and_run) and its
    folder is pulled into the run folder; transport failures raise RemoteError (exit 3).

    ``on_started`` is called once the process has started (workflows use the wait for
    background work).

    ``inputs`` is a PreparedInputs (or a ready ``--input`` string). The folder is
    ``out_dir/<label>`` (default: the configuration name, ``-text`` for text dumps), numbered
    when it exists. Returns the RunResult of a successful run. Otherwise, after writing
    run.json: UsageError (exit 2) when the model or an input file is missing, the timeout is
    not a finite positive number or the folder cannot be written, RunTimeout when ``timeout``
    seconds pass (the whole process group is killed), RunError (exit 3) for a non-zero exit or
    a signal. The exception's ``result`` attribute holds the RunResult. KeyboardInterrupt
    kills the process group, marks run.json ``interrupted`` and propagates.
    """
    if interrupted():  # queued behind runs that Ctrl-C killed: do not start
        raise KeyboardInterrupt
    timeout = check_timeout(timeout)
    cfg = get_config(config).with_extra(env=extra_env)
    label = label or (cfg.name + ("-text" if text_dump else ""))
    if remote is not None:
        from lar_prec.runremote import run_once_remote

        check_extra_flags(extra_flags)
        run_dir = new_run_dir(_resolve(out_dir), label, what="analysis folder")
        rec = run_once_remote(Path(model), inputs, cfg, run_dir, label, remote, text_dump=text_dump,
                              timeout=timeout, extra_flags=extra_flags, on_started=on_started)
        if interrupted():
            raise KeyboardInterrupt
        return rec
    lar_obj = resolve_load_and_run(lar)
    run_dir = new_run_dir(_resolve(out_dir), label, what="analysis folder")
    rec = _new_record(run_dir, label, cfg, lar_obj, model, inputs, text_dump, timeout)
    input_arg = inputs.input_arg if isinstance(inputs, PreparedInputs) else (inputs or "")
    rec = _preflight(rec, lar_obj, cfg, model, input_arg, extra_flags)
    rec, timed_out = _execute(rec, lar_obj, on_started)
    rec = _conclude(rec, timed_out)
    if interrupted():  # it ended well just as Ctrl-C came: its record says ok, the analysis stops
        raise KeyboardInterrupt
    return rec


# --------------------------------------------------------------------------- one command

def run_single(
    model: PathLike,
    input_specs: "str | Iterable[str]",
    config: "RunConfig | str",
    out: "PathLike | None" = None,
    *,
    lar: "LoadAndRun | str | None" = None,
    text_dump: bool = False,
    timeout: Optional[float] = None,
    extra_flags: Sequence[str] = (),
    extra_env: Optional[Mapping[str, Optional[str]]] = None,
    seed: int = 0,
    remote: "RemoteSpec | None" = None,
) -> RunResult:
    """``lar-prec run``: a new analysis folder with its inputs and one run
    (on the device of ``remote``, a :class:`lar_prec.runremote.RemoteSpec`, when given).

    The model, the inputs, the timeout and the flags are checked before the folder is
    claimed, so a usage error (exit 2) leaves nothing behind. Ctrl-C raises
    AnalysisInterrupted (exit 130) naming the folder.
    """
    analysis: Optional[Path] = None
    try:
        cfg = get_config(config)
        timeout = check_timeout(timeout)
        lar_obj = resolve_load_and_run(lar) if remote is None else None
        check_file(model, "model file")
        check_extra_flags(extra_flags)
        planned = plan_inputs(input_specs, model, seed=seed)
        analysis = new_analysis_dir(out, "run")
        prepared = write_inputs(planned, analysis / "inputs")
        if remote is not None:
            from lar_prec.runremote import open_sessions

            with open_sessions(remote, Path(model), prepared) as sessions:  # type: ignore[union-attr]
                return run_once(model, prepared, cfg, analysis, text_dump=text_dump, timeout=timeout,
                                extra_flags=extra_flags, extra_env=extra_env, remote=sessions)
        return run_once(model, prepared, cfg, analysis, lar=lar_obj, text_dump=text_dump, timeout=timeout,
                        extra_flags=extra_flags, extra_env=extra_env)
    except KeyboardInterrupt:
        where = f"; the run folder is kept in {analysis} (see its run.json)" if analysis else " before the run started"
        raise AnalysisInterrupted(f"interrupted{where}", analysis_dir=analysis) from None
