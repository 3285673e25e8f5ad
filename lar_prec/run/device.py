"""Runs on a device (``--remote``): the runner's steps with a :class:`RemoteSession` in place
of a local process.

A :class:`RemoteSpec` says where (``ssh:[user@]host[:port]`` or ``adb[:serial]``), which
load_and_run on the device (``--lar``; default :data:`DEFAULT_REMOTE_LAR`, found on the
device's PATH) and its working folder. :class:`RemoteSessions` holds one session per worker
thread for one analysis (sessions are not thread-safe): the model and inputs are pushed once
(a file the device already has, by sha256, is skipped), each run is a fresh process on the
device with its configuration's environment, and its folder is pulled into the local run
folder. :func:`run_once_remote` is :func:`lar_prec.run.once.run_once` for a device: the same
run folder, the same run.json (plus ``remote``: transport, target, device facts, pushed
hashes) and the same errors; a transport failure is a RemoteError (exit 3) with the
device's own message, recorded in run.json, everything pulled so far kept.
"""
from __future__ import annotations

import contextlib
import logging
import re
import threading
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, List, Optional, Sequence

from lar_prec._lazy import LazyModule

from lar_prec.dumps.binary import INCOMPLETE_MARKER
from lar_prec.errors import UsageError
from lar_prec.inputspec import check_file
from lar_prec.outputs import sha256_file
from lar_prec.run.argv import build_argv
from lar_prec.run.config import CONFIGS, LoadAndRun
from lar_prec.run.env import remote_environment
from lar_prec.run.inputs import PreparedInputs
from lar_prec.run.proc import signal_name, tail
from lar_prec.run.record import write_run_json
from lar_prec.run.steps import conclude, record_interrupt, refuse

if TYPE_CHECKING:
    from lar_prec.remote import session as remote_session, transport
    from lar_prec.remote.transport import AdbOptions, SshOptions
else:  # ~10 ms of start-up that a local analysis never needs: loaded with the first RemoteSpec
    remote_session, transport = LazyModule("lar_prec.remote.session"), LazyModule("lar_prec.remote.transport")

log = logging.getLogger(__name__)

#: a --remote-dir lar-prec accepts: it goes into shell scripts on the device (quoted), and a
#: character a shell or a device's tools treat specially there is a typo more often than a folder
_REMOTE_DIR = re.compile(r"[A-Za-z0-9_./~+@%,:=][A-Za-z0-9_./~+@%,:=-]{0,1000}\Z")
#: the device's load_and_run when --lar is not given: the name on the device's PATH
DEFAULT_REMOTE_LAR = "load_and_run"


@dataclass(frozen=True)
class RemoteSpec:
    """Where remote runs go. ``ssh``/``adb`` None: from ``LAR_PREC_SSH*`` / ``LAR_PREC_ADB``."""

    target: str
    lar: str = DEFAULT_REMOTE_LAR
    remote_dir: Optional[str] = None
    keep_remote: bool = False
    ssh: Optional[SshOptions] = None
    adb: Optional[AdbOptions] = None
    transfer_timeout: float = 600

    def __post_init__(self) -> None:
        transport.parse_target(self.target)  # UsageError (exit 2) before anything runs
        if not self.lar or any(c in self.lar for c in "\n\0"):
            raise UsageError(f"--lar {self.lar!r}: expected the path of load_and_run on the device")
        if self.remote_dir is not None and not _REMOTE_DIR.match(self.remote_dir):
            raise UsageError(f"--remote-dir {self.remote_dir!r}: expected a folder path on the device of letters, "
                             "digits and / . _ - ~ + @ % , : = (not starting with '-'; no ';', quote, newline "
                             "or other control character)")

    def session(self) -> Any:
        """A new (unopened) RemoteSession."""
        return remote_session.RemoteSession(self.target, lar=self.lar, remote_dir=self.remote_dir, keep_remote=self.keep_remote,
                             ssh=self.ssh, adb=self.adb, transfer_timeout=self.transfer_timeout)


def remote_spec(target: Optional[str], lar: Optional[str] = None, remote_dir: Optional[str] = None,
                keep_remote: bool = False) -> Optional[RemoteSpec]:
    """The RemoteSpec of CLI options (None without ``--remote``)."""
    if not target:
        if remote_dir or keep_remote:
            raise UsageError("--remote-dir and --keep-remote need --remote ssh:[user@]host[:port] or adb[:serial]")
        return None
    return RemoteSpec(target, lar or DEFAULT_REMOTE_LAR, remote_dir, keep_remote)


class RemoteSessions:
    """The sessions of one analysis on one device: one per worker thread, opened on first use.

    The first use in a thread opens the session, reads the device's facts once and pushes
    the model and inputs (skipped when the device has them). :meth:`interrupt` stops every
    run under way (Ctrl-C); :meth:`close` ends them all.
    """

    def __init__(self, spec: RemoteSpec, files: Sequence[Path] = (), *, transient: bool = False) -> None:
        self.spec = spec
        self.files = [Path(f) for f in files]
        #: files made for this analysis only (a layerwise model, its feeds): :meth:`close`
        #: removes what was pushed from the device, unless keep_remote
        self.transient = transient
        self._local = threading.local()
        self._all: List[Any] = []
        self._lock = threading.Lock()
        self._push_lock = threading.Lock()
        self._interrupted = False

    def get(self) -> Any:
        """This thread's open session, the device described and the files pushed."""
        s = getattr(self._local, "session", None)
        if s is None:
            s = self.spec.session()
            with self._lock:
                if self._interrupted:
                    raise KeyboardInterrupt
                self._all.append(s)
            self._local.session = s
            s.open()
            info = s.device_info()
            if not info.lar_found:
                raise transport.RemoteError(f"load_and_run {self.spec.lar!r} was not found on {self.spec.target} "
                                  f"(give its path on the device with --lar PATH; the default is "
                                  f"{DEFAULT_REMOTE_LAR!r} on the device's PATH)",
                                  target=self.spec.target, device_message=f"{self.spec.lar}: not found")
            with self._push_lock:  # the first session pushes, the others find the files by hash
                s.push_all(self.files)
        return s

    def interrupt(self) -> None:
        """Stop every run under way on this device (from another thread)."""
        with self._lock:
            self._interrupted = True
            sessions = list(self._all)
        for s in sessions:
            with contextlib.suppress(Exception):
                s.interrupt()

    def close(self) -> None:
        """Close every session (runs folders tidied unless keep_remote, ssh masters ended;
        a transient set's pushed files removed unless keep_remote)."""
        with self._lock:
            sessions, self._all = list(self._all), []
        if self.transient and not self.spec.keep_remote:
            for s in sessions:
                with contextlib.suppress(Exception):  # the analysis stands; a leftover file does no harm
                    s.remove_pushed()
        for s in sessions:
            with contextlib.suppress(Exception):
                s.close()

    def __enter__(self) -> "RemoteSessions":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def remote_load_and_run(sessions: RemoteSessions) -> LoadAndRun:
    """The device's load_and_run as a run's record names it."""
    return LoadAndRun(sessions.spec.lar, (sessions.spec.lar,), "remote", "--lar")


def run_once_remote(rec: Any, model: Path, inputs: Any, cfg: Any, sessions: RemoteSessions, *,
                    text_dump: bool, extra_flags: Sequence[str], on_started: Optional[Callable[[], None]]) -> Any:
    """The run of ``rec`` (:func:`lar_prec.run.steps.new_record`, not started) on the device,
    into its folder (see the module doc); returns the RunResult of a good run, raises like
    :func:`lar_prec.runner.run_once` otherwise."""
    base_vars = [k for k, _ in CONFIGS[cfg.name].env] if cfg.name in CONFIGS else []
    run_dir, label, timeout, lar = rec.dir, rec.label, rec.timeout, remote_load_and_run(sessions)
    rec = replace(rec, remote={"transport": transport.parse_target(sessions.spec.target).kind, "target": sessions.spec.target})
    s = None
    try:
        check_file(model, "model file")
        s = sessions.get()
        items = [(i.name, i.path) for i in inputs.items] if isinstance(inputs, PreparedInputs) else []
        # files not among the session set's own (a layerwise run's feeds): pushed by hash now;
        # a no-op for files already pushed
        s.push_all([model, *(p for _, p in items)])
        plan = s.new_run(label, text_dump=text_dump)
        argv = build_argv(lar, s.remote_path(model), s.input_arg(items), cfg, dump_dir=plan.dump_dir,
                            text_dump=plan.text_dump, extra_flags=extra_flags)
        info = s.device_info()
        rec = replace(rec, argv=tuple(argv), model_sha256=sha256_file(rec.model_path),
                      load_and_run={**rec.load_and_run, "version": info.lar_version},
                      environment=remote_environment(info.to_json(), cfg.env_dict(), base_vars),
                      remote=s.record())
        if rec.dump_dir is not None:
            rec.dump_dir.mkdir()
            (rec.dump_dir / INCOMPLETE_MARKER).write_text("load_and_run has not finished on the device\n")
        rec = replace(rec, status="running")
        write_run_json(rec)
        if on_started is not None:
            on_started()
        res = s.run(plan, argv, cfg.env_dict(), run_dir, timeout=timeout)
    except UsageError as exc:
        raise refuse(rec, exc) from None
    except transport.RemoteError as exc:
        rec = replace(rec, status="failed", error=str(exc), stderr_tail=tail(run_dir / "stderr.txt"),
                      remote={**(s.record() if s is not None else rec.remote or {}), "error": str(exc),
                              "device_message": exc.device_message})
        with contextlib.suppress(UsageError):
            write_run_json(rec)
        exc.run_dir, exc.result = run_dir, rec
        raise
    except KeyboardInterrupt:
        record_interrupt(rec, "interrupted; the run on the device was killed")
        raise
    rec = replace(rec, seconds=res.seconds, returncode=res.returncode, signal=signal_name(res.returncode),
                  stderr_tail=tail(run_dir / "stderr.txt"), remote={**s.record(), **res.to_json()})
    return conclude(rec, "stalled" if res.stalled else "timeout" if res.timed_out else "exited")


def device_files(model: Path, inputs: Any) -> List[Path]:
    """What an analysis pushes: the model and the prepared input files."""
    items = getattr(inputs, "items", ()) or ()
    return [Path(model)] + [Path(i.path) for i in items]


def open_sessions(spec: Optional[RemoteSpec], model: Path, inputs: Any) -> Optional[RemoteSessions]:
    """The sessions of an analysis on ``spec`` (None for a local analysis)."""
    return None if spec is None else RemoteSessions(spec, device_files(model, inputs))


__all__ = ["DEFAULT_REMOTE_LAR", "RemoteSpec", "RemoteSessions", "remote_spec", "remote_load_and_run", "run_once_remote", "open_sessions",
           "device_files"]
