"""One analysis on one remote device: push once, run in fresh processes, pull, clean up.

Use (the runner builds ``argv`` with the device's paths, in the real binary's flag syntax)::

    with RemoteSession("ssh:me@board", lar="/opt/bin/load_and_run") as s:
        model = s.push(model_path)                      # skipped when the device has it (sha256)
        s.push_all(input_paths)
        plan = s.new_run("naive")                       # a fresh device folder for the run
        argv = [s.lar, model.remote, "--input", s.input_arg([("data", inp)]),
                "--bin-io-dump", plan.dump_dir, "--iter", "1", "--warmup-iter", "0", "--cpu"]
        res = s.run(plan, argv, {"MGB_USE_MEGDNN_DBG": "2"}, local_run_dir, timeout=600)
        res.returncode, res.dump_dir                    # dump pulled into local_run_dir/dump
        s.record()                                      # device facts + pushed hashes, for run.json

Device layout under ``remote_dir`` (default ``~/.cache/lar-prec`` over ssh,
``/data/local/tmp/lar-prec`` over adb)::

    files/<sha256[:16]>-<name>   (+ .sha256)   pushed model and inputs, kept for later analyses
    runs/<label>-<random>/                     one run: stdout.txt, stderr.txt, dump/, .pid

A run's device folder is removed once it is pulled completely, unless ``keep_remote``.
"""
from __future__ import annotations

import contextlib
import dataclasses
import os
import re
import secrets
import shutil
import subprocess
import tempfile
import threading
import time
import weakref
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Dict, Iterable, List, Mapping, Optional, Sequence, Tuple, Union

from lar_prec.errors import UsageError
from lar_prec.outputs import sha256_file as sha256_of
from lar_prec.stall import IdleClock, looks_dead
from lar_prec.remote.transport import (
    AdbOptions,
    Completed,
    RemoteError,
    RemoteTarget,
    SshOptions,
    SshTransport,
    Transport,
    kill_group,
    last_line,
    make_transport,
    shell_quote,
    run_transport_command,
)
from lar_prec.remote.scripts import (
    HASH_FN,
    KILL_GRACE_SECONDS,
    RC_MARKER,
    DeviceInfo,
    RemoteRunPlan,
    cpu_script,
    device_info_script,
    kill_script,
    manifest_script,
    parse_cpu,
    parse_device_info,
    run_script,
    stderr_script,
)

_UNREACHABLE = "could not reach the device to kill the run"
#: seconds between two looks at a remote run's CPU time (each one command over the connection)
REMOTE_WATCH_SECONDS = 2.0


def stall_grace() -> float:
    """The stall grace period (``LAR_PREC_STALL_AFTER``, as for local runs; 0 = no watch)."""
    raw = os.environ.get("LAR_PREC_STALL_AFTER", "").strip()
    try:
        value = float(raw) if raw else 5.0
    except ValueError:
        return 5.0  # refused with its message before any run starts (lar_prec.run.proc.stall_after)
    return value if value >= 0 and value != float("inf") else 5.0


class _StallWatch:
    """Polls a remote run's CPU time and threads from the device's ``/proc`` while the run goes
    on; when it stays the same for the grace period and the run looks dead by the rule of
    :mod:`lar_prec.stall` (as for local runs; its stderr read on the device then), kills the
    run on the device (then the client ends). A device without ``/proc`` (or a run that has not
    written its pid yet) is never judged."""

    def __init__(self, session: "RemoteSession", plan: RemoteRunPlan, grace: float, timed: bool) -> None:
        self.session, self.plan, self.grace, self.timed = session, plan, grace, timed
        self.stalled, self.kill_report = False, ""
        self._done = threading.Event()
        self._thread: Optional[threading.Thread] = None

    def start(self, proc: "subprocess.Popen") -> None:
        if self.grace > 0:
            self._thread = threading.Thread(target=self._watch, args=(proc,), daemon=True,
                                            name="lar-prec-remote-watch")
            self._thread.start()

    def stop(self) -> None:
        self._done.set()
        if self._thread is not None:
            self._thread.join()

    def _exec(self, script: str) -> Optional[str]:
        try:
            return self.session.transport.exec(script, timeout=30).stdout.decode("utf-8", "replace")
        except RemoteError:
            return None

    def _watch(self, proc: "subprocess.Popen") -> None:
        clock = IdleClock(time.monotonic())
        while not self._done.wait(REMOTE_WATCH_SECONDS):
            out = self._exec(cpu_script(self.plan.dir))
            if out is None:
                continue
            ticks, threads = parse_cpu(out)
            now = time.monotonic()
            if ticks is None:  # no pid yet, or ended: start again
                clock = IdleClock(now)
                continue
            if clock.idle_for(ticks, now) < self.grace or self._done.is_set():
                continue
            stderr = self._exec(stderr_script(self.plan.dir)) or ""
            if looks_dead(threads, stderr, ran=clock.ran, timed=self.timed) and not self._done.is_set():
                self.stalled = True
                self.kill_report = self.session._kill(self.plan)
                kill_group(proc)  # the client would wait for the device's pipes otherwise
                return


@dataclass(frozen=True)
class PushedFile:
    """A local file and its copy on the device."""

    local: Path
    remote: str
    sha256: str
    size: int
    skipped: bool  # the device already had it (same sha256)

    def to_json(self) -> Dict[str, Any]:
        """This file as recorded in run.json."""
        return {"local": str(self.local), "remote": self.remote, "sha256": self.sha256, "size": self.size,
                "skipped": self.skipped}


@dataclass(frozen=True)
class RemoteRunResult:
    """One finished run on the device, its folder pulled into ``local_dir``."""

    label: str
    remote_dir: str
    argv: Tuple[str, ...]
    returncode: Optional[int]  # load_and_run's exit status (negative: signal); None on a timeout
    timed_out: bool
    seconds: float
    local_dir: Path
    stdout: Path
    stderr: Path
    dump_dir: Optional[Path]
    text_dump: Optional[Path]
    remote_kept: bool
    kill_report: str = ""  # what the device said when a timed-out run was killed
    #: alive on the device but using no CPU for the stall grace period: ended there
    stalled: bool = False

    def to_json(self) -> Dict[str, Any]:
        """The remote part of this run for run.json."""
        return {"remote_dir": self.remote_dir, "remote_kept": self.remote_kept, "timed_out": self.timed_out,
                "stalled": self.stalled, "kill_report": self.kill_report}


def _safe(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.+-]", "_", name) or "file"


# ------------------------------------------------------------------ the session


_PUSH_LOCKS: Dict[Tuple[str, str], threading.Lock] = {}
_PUSH_LOCKS_GUARD = threading.Lock()


def _push_lock(target: str, folder: str) -> threading.Lock:
    """The lock of one device folder: two pushes of the same file at once would race on its
    ``.part`` copy (one ``mv`` finds it gone)."""
    with _PUSH_LOCKS_GUARD:
        return _PUSH_LOCKS.setdefault((target, folder), threading.Lock())


class RemoteSession:
    """Push, run and pull on one device for one analysis. Not thread-safe: use one per worker.

    Args:
        target: ``ssh:[user@]host[:port]``, ``adb[:serial]``, a RemoteTarget or a Transport.
        lar: the load_and_run program on the device (a path, or a name on the device's PATH).
        remote_dir: the device's working folder (default: the transport's, see the module doc).
        keep_remote: keep each run's device folder after it was pulled.
        transfer_timeout: seconds for one push, pull or small command.
    """

    def __init__(self, target: "str | RemoteTarget | Transport", *, lar: str = "load_and_run",
                 remote_dir: Optional[str] = None, keep_remote: bool = False,
                 ssh: Optional[SshOptions] = None, adb: Optional[AdbOptions] = None,
                 transfer_timeout: float = 600) -> None:
        self.transport = target if isinstance(target, Transport) else make_transport(target, ssh=ssh, adb=adb)
        if isinstance(self.transport, SshTransport) and self.transport.options.multiplex \
                and self.transport.control_dir is None \
                and not any("controlmaster" in a.lower() or "controlpath" in a.lower()
                            for a in self.transport.options.extra_args):  # the user's own multiplexing wins
            # a short private path: a unix socket path may not exceed ~104 bytes
            control = tempfile.mkdtemp(prefix="lpssh-", dir="/tmp" if os.path.isdir("/tmp") else None)
            self.transport = dataclasses.replace(self.transport, control_dir=control)
            # a session dropped without close(): end its master (else it lingers ControlPersist s)
            weakref.finalize(self, _end_ssh_master, self.transport)
        if not lar or any(c in lar for c in "\n\0"):
            raise UsageError(f"--lar {lar!r}: expected the path of load_and_run on the device")
        self.lar = lar
        self.keep_remote = keep_remote
        self.transfer_timeout = transfer_timeout
        self._requested_dir = remote_dir or self.transport.default_remote_dir
        self._dir: Optional[str] = None
        self._pushed: Dict[Path, PushedFile] = {}
        self._info: Optional[DeviceInfo] = None
        self._active: Optional[Tuple[subprocess.Popen, RemoteRunPlan]] = None
        self._interrupted = threading.Event()

    @property
    def target(self) -> RemoteTarget:
        """The device."""
        return self.transport.target

    def __enter__(self) -> "RemoteSession":
        self.open()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _fail(self, what: str, res: Completed, **kw: Any) -> RemoteError:
        return self.transport.fail(what, res, **kw)

    def open(self) -> str:
        """Create the device's working folder; returns its absolute path. Idempotent."""
        if self._dir is None:
            d = shell_quote(self._requested_dir)
            res = self.transport.exec(f"mkdir -p {d}/files {d}/runs && cd {d} && pwd -P",
                                      timeout=self.transfer_timeout)
            path = last_line(res.stdout)
            if res.returncode != 0 or not path.startswith("/"):
                raise self._fail(f"creating the working folder {self._requested_dir}", res)
            self._dir = path
        return self._dir

    @property
    def remote_dir(self) -> str:
        """The device's working folder (absolute)."""
        return self.open()

    def close(self) -> None:
        """Remove the device's (empty) runs folder unless keep_remote (pushed files stay cached),
        and end the ssh master connection."""
        if self._dir is not None and not self.keep_remote:
            try:
                self.transport.exec(f"rmdir {shell_quote(self._dir + '/runs')} 2>/dev/null; exit 0", timeout=30)
            except RemoteError:
                pass  # the connection is gone: nothing left to tidy that matters
        if isinstance(self.transport, SshTransport) and self.transport.control_dir:
            _end_ssh_master(self.transport)
            # still usable afterwards, one connection per command
            self.transport = dataclasses.replace(self.transport, control_dir=None)

    # -------------------------------------------------------------- pushing

    def push(self, path: Union[str, Path]) -> PushedFile:
        """Push one file (see :meth:`push_all`)."""
        return self.push_all([path])[0]

    def push_all(self, paths: Iterable[Union[str, Path]]) -> Tuple[PushedFile, ...]:
        """Push files into ``files/`` once: a file the device already has (same sha256, computed
        there with sha256sum or read from a ``.sha256`` sidecar) is skipped. Each copy is
        checked on the device after the push.

        Raises UsageError for a missing local file, RemoteError when the device refuses
        (full disk, read-only folder, lost connection) with its own message.
        """
        paths = list(paths)  # walked twice
        files = self.remote_dir + "/files"
        # sessions of one analysis push the same inputs from several threads (a sweep's
        # options in parallel): one push at a time per device folder, each sees what the other pushed
        with _push_lock(self.target.spec, files):
            todo: List[Tuple[Path, str, str, int]] = []
            for p in paths:
                local = Path(p).resolve()
                if local in self._pushed:
                    continue
                if not local.is_file():
                    raise UsageError(f"cannot push {p} to {self.target}: no such file")
                digest = sha256_of(local)
                todo.append((local, f"{digest[:16]}-{_safe(local.name)}", digest, local.stat().st_size))
            if todo:
                names = " ".join(shell_quote(name) for _, name, _, _ in todo)
                res = self.transport.exec(f"cd {shell_quote(files)} || exit 3\n{HASH_FN}\n"
                                          f"for f in {names}; do [ -f \"$f\" ] && echo \"$(h \"$f\") $f\"; done; exit 0",
                                          timeout=self.transfer_timeout)
                if res.returncode != 0:
                    raise self._fail(f"listing {files}", res)
                there = {ln.split(" ", 1)[1]: ln.split(" ", 1)[0] for ln in res.stdout.decode("utf-8", "replace")
                         .splitlines() if " " in ln}
                fresh = []
                for local, name, digest, size in todo:
                    skipped = there.get(name) == digest
                    if not skipped:
                        self.transport.push_file(local, f"{files}/{name}", timeout=self.transfer_timeout)
                        fresh.append((name, digest))
                    self._pushed[local] = PushedFile(local, f"{files}/{name}", digest, size, skipped)
                if fresh:
                    self._verify(files, fresh)
        return tuple(self._pushed[Path(p).resolve()] for p in paths)

    def _verify(self, files: str, fresh: Sequence[Tuple[str, str]]) -> None:
        """Check pushed copies on the device and write their sidecars; a bad copy is removed."""
        lines = [f"cd {shell_quote(files)} || exit 3",
                 'v() { if command -v sha256sum >/dev/null 2>&1; then set -- $(sha256sum "$1"); echo "$1"; '
                 'else echo -; fi; }']
        for name, digest in fresh:
            lines.append(f"g=$(v {shell_quote(name)}); if [ \"$g\" = {digest} ] || [ \"$g\" = - ]; then "
                         f"echo {digest} > {shell_quote(name + '.sha256')} || exit 4; else rm -f {shell_quote(name)}; "
                         f"echo \"bad {name} $g\"; fi")
        res = self.transport.exec("\n".join(lines), timeout=self.transfer_timeout)
        bad = [ln for ln in res.stdout.decode("utf-8", "replace").splitlines() if ln.startswith("bad ")]
        if res.returncode != 0 or bad:
            for local, pf in list(self._pushed.items()):
                if any(pf.remote.endswith("/" + name) for name, _ in fresh):
                    del self._pushed[local]
            detail = "; ".join(bad) or res.message()
            raise RemoteError(f"checking the files pushed to {self.target} failed: {detail}",
                              target=self.target.spec, device_message=detail, argv=res.argv)

    def remove_pushed(self) -> None:
        """Remove every file this session pushed (or found) from the device's ``files/``, with
        its sidecar (for files made for one analysis only). RemoteError when the device fails."""
        if not self._pushed:
            return
        names = " ".join(shell_quote(p.remote) + " " + shell_quote(p.remote + ".sha256") for p in self._pushed.values())
        res = self.transport.exec(f"rm -f {names}", timeout=self.transfer_timeout)
        if res.returncode != 0:
            raise self._fail("removing pushed files", res)
        self._pushed.clear()

    def remote_path(self, local: Union[str, Path]) -> str:
        """The device path of a pushed local file (UsageError if it was not pushed)."""
        pf = self._pushed.get(Path(local).resolve())
        if pf is None:
            raise UsageError(f"{local} was not pushed to {self.target}")
        return pf.remote

    def input_arg(self, items: Iterable[Tuple[str, Union[str, Path]]]) -> str:
        """load_and_run's ``--input`` value for (name, local path) pairs, with device paths."""
        return ";".join(f"{name}:{self.remote_path(path)}" for name, path in items)

    @property
    def pushed(self) -> Tuple[PushedFile, ...]:
        """Every file pushed (or found) in this session."""
        return tuple(self._pushed.values())

    # -------------------------------------------------------------- facts

    def device_info(self, *, refresh: bool = False) -> DeviceInfo:
        """uname, CPU model and features, Android model and ABI, load_and_run --version."""
        if self._info is None or refresh:
            probe = f"{self.remote_dir}/runs/probe-{secrets.token_hex(4)}"
            try:
                res = self.transport.exec(device_info_script(self.remote_dir, self.lar, probe), timeout=60)
            except KeyboardInterrupt:
                # the local ssh is gone, not the device's load_and_run --version: end it there
                with contextlib.suppress(RemoteError, OSError):
                    self.transport.exec(kill_script(probe) + f"\ncd / && rm -rf {shell_quote(probe)}",
                                        timeout=10 + KILL_GRACE_SECONDS)
                raise
            text = res.stdout.decode("utf-8", "replace")
            if "@@end" not in text:
                raise self._fail("reading the device's description", res)
            self._info = parse_device_info(text, transport=self.target.kind, target=self.target.spec,
                                           remote_dir=self.remote_dir, lar=self.lar)
        return self._info

    def record(self) -> Dict[str, Any]:
        """The ``remote`` object of run.json: transport, target, device facts, pushed hashes."""
        return {"transport": self.target.kind, "target": self.target.spec, "remote_dir": self._dir,
                "keep_remote": self.keep_remote, "device": self._info.to_json() if self._info else None,
                "pushed": [p.to_json() for p in self._pushed.values()]}

    # -------------------------------------------------------------- runs

    def new_run(self, label: str, *, text_dump: bool = False) -> RemoteRunPlan:
        """Fresh device folders for one run (created by :meth:`run`)."""
        d = f"{self.remote_dir}/runs/{_safe(label)}-{secrets.token_hex(4)}"
        return RemoteRunPlan(label, d, None if text_dump else d + "/dump", d + "/io_dump.txt" if text_dump else None)

    def run(self, plan: RemoteRunPlan, argv: Sequence[str], env: Optional[Mapping[str, Optional[str]]],
            local_dir: Union[str, Path], *, timeout: Optional[float] = None) -> RemoteRunResult:
        """Run ``argv`` on the device in a fresh process, pull its folder into ``local_dir``.

        ``env`` maps a variable to its value, or to None to unset it, on top of the device's
        login environment. ``local_dir`` receives stdout.txt, stderr.txt and dump/ (or
        io_dump.txt), merged with what is there. The result carries load_and_run's exit status
        whatever it is; at ``timeout`` seconds the local client is killed, then the device's
        process group (SIGTERM, then SIGKILL), and ``timed_out`` is set.

        Raises RemoteError (exit 3) with the device's message when the connection fails, the
        binary is missing on the device, or the folder does not pull completely; files pulled
        so far stay in ``local_dir`` and the device folder is kept.
        """
        if self._interrupted.is_set():  # queued behind a run that Ctrl-C stopped: do not start
            raise KeyboardInterrupt
        local = Path(local_dir)
        local.mkdir(parents=True, exist_ok=True)
        script = run_script(plan, argv, env or {})
        t0 = time.monotonic()
        watch = _StallWatch(self, plan, stall_grace(), timed=timeout is not None)
        try:
            res = run_transport_command(self.transport.shell_argv(script), timeout=timeout, target=self.target.spec,
                            on_start=lambda proc: (setattr(self, "_active", (proc, plan)), watch.start(proc)))
        except KeyboardInterrupt:
            self._kill(plan)
            raise
        finally:
            watch.stop()
            self._active = None
        if watch.stalled:  # the watch ended it on the device: as a timeout, but said apart
            res = dataclasses.replace(res, returncode=None, timed_out=True)
        seconds = round(time.monotonic() - t0, 3)
        if self._interrupted.is_set():
            self._kill(plan)  # interrupt() killed the client; make sure the device's run is gone too
            self._salvage(plan, local)
            raise KeyboardInterrupt
        kill_report = self._kill(plan) if res.timed_out and not watch.stalled else watch.kill_report
        rc = self._exit_status(res)
        if rc is None and not res.timed_out:
            try:
                self.transport.check_connection(res)
                why = "the device could not start it"  # e.g. its folder cannot be made: full disk
            except RemoteError:
                why = "the connection failed or was lost"
            # the run may still be going on the device
            kill_report = self._kill(plan)
            if not kill_report.startswith(_UNREACHABLE):  # the device answers again: fetch its files
                self._salvage(plan, local)
            msg = self.transport.describe_failure(res)
            raise RemoteError(f"the run {plan.label!r} on {self.target} ended without an exit status "
                              f"({why}): {msg}", target=self.target.spec, device_message=msg,
                              run_dir=local, argv=argv, returncode=res.returncode, kept=_files(local))
        self._pull(plan, local)
        if rc in (126, 127):
            said = last_line(_read(local / "stderr.txt")) or res.message()
            raise RemoteError(f"load_and_run {argv[0]!r} cannot be run on {self.target} (exit {rc}): {said}",
                              target=self.target.spec, device_message=said, run_dir=local, argv=argv,
                              returncode=rc, kept=_files(local))
        if not self.keep_remote:
            self._remove(plan)
        return RemoteRunResult(
            plan.label, plan.dir, tuple(argv), rc, res.timed_out, seconds, local, local / "stdout.txt",
            local / "stderr.txt", local / "dump" if plan.dump_dir else None,
            local / "io_dump.txt" if plan.text_dump else None, self.keep_remote, kill_report, watch.stalled)

    def interrupt(self) -> None:
        """Stop the run under way (from another thread, e.g. on Ctrl-C): its local client is
        killed, :meth:`run` then kills the device's process group and raises KeyboardInterrupt.
        Later runs of this session raise KeyboardInterrupt without starting."""
        self._interrupted.set()
        active = self._active
        if active is not None:
            kill_group(active[0])
            # over a multiplexed ssh the client's pipes stay open until the device's process
            # ends, so the run is killed on the device from here, not after the client returns
            self._kill(active[1])

    @staticmethod
    def _exit_status(res: Completed) -> Optional[int]:
        """load_and_run's status from the wrapper's marker; the shell reports a signal N as
        128+N, turned into -N like subprocess does (a real exit 129..159 is not told apart)."""
        for line in reversed(res.stdout.decode("utf-8", "replace").splitlines()):
            if line.startswith(RC_MARKER) and line[len(RC_MARKER):].strip().isdigit():
                rc = int(line[len(RC_MARKER):])
                return -(rc - 128) if 128 < rc < 160 else rc
        return None

    def _kill(self, plan: RemoteRunPlan) -> str:
        try:
            res = self.transport.exec(kill_script(plan.dir), timeout=30 + KILL_GRACE_SECONDS)
        except RemoteError as exc:
            return f"{_UNREACHABLE}: {exc.device_message or exc}"
        return last_line(res.stdout) or res.message()

    def _salvage(self, plan: RemoteRunPlan, local: Path) -> None:
        """Best effort after a failure: bring back whatever the device folder holds."""
        try:
            self._pull(plan, local, timeout=60)
        except RemoteError:
            pass

    def _pull(self, plan: RemoteRunPlan, local: Path, timeout: Optional[float] = None) -> None:
        """Pull the run folder and check every file arrived whole (sizes listed on the device first)."""
        t = timeout or self.transfer_timeout
        res = self.transport.exec(manifest_script(plan.dir), timeout=t)
        lines = res.stdout.decode("utf-8", "replace").splitlines()
        if res.returncode != 0 or "lar-prec-manifest-end" not in lines:
            raise self._fail(f"listing the run folder {plan.dir}", res, run_dir=local, kept=_files(local))
        expected: Dict[str, int] = {}
        for ln in lines:
            parts = ln.split(None, 1)
            if len(parts) == 2 and parts[0].isdigit() and parts[1].startswith("./"):
                expected[parts[1][2:]] = int(parts[0])
        try:
            self.transport.pull_tree(plan.dir, local, timeout=t)
        except RemoteError as exc:
            exc.run_dir = local
            exc.kept = _files(local)
            exc.args = (f"{exc}; {len(exc.kept)} files pulled so far are kept in {local}; "
                        f"the device folder {plan.dir} is kept",)
            raise
        bad = []
        for rel, size in sorted(expected.items()):
            p = local / rel
            got = p.stat().st_size if p.is_file() else None
            if got != size:
                bad.append(f"{rel}: {'missing' if got is None else f'{got} of {size} bytes'}")
        if bad:
            more = f" (+{len(bad) - 5} more)" if len(bad) > 5 else ""
            raise RemoteError(
                f"pulling {plan.dir} from {self.target} was incomplete: {len(bad)} of {len(expected)} files "
                f"missing or short ({', '.join(bad[:5])}{more}); what arrived is kept in {local}; "
                f"the device folder is kept", target=self.target.spec, device_message="; ".join(bad[:5]),
                run_dir=local, kept=_files(local))

    def _remove(self, plan: RemoteRunPlan) -> None:
        try:
            self.transport.exec(f"rm -rf {shell_quote(plan.dir)}", timeout=self.transfer_timeout)
        except RemoteError:
            pass  # the data is pulled; a folder left on the device is not worth failing the run


def _end_ssh_master(transport: SshTransport) -> None:
    transport.stop_master()
    if transport.control_dir:
        shutil.rmtree(transport.control_dir, ignore_errors=True)


def _files(local: Path) -> List[Path]:
    return sorted(p for p in local.rglob("*") if p.is_file()) if local.is_dir() else []


def _read(path: Path) -> str:
    try:
        return path.read_text(errors="replace")
    except OSError:
        return ""
