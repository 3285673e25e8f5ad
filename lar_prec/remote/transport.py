"""Remote devices: where load_and_run runs when it is not this machine (``--remote``).

Two transports, both driving the system's own programs in fresh local processes:

* ``ssh:[user@]host[:port]`` -- OpenSSH's ``ssh`` (``BatchMode=yes``, a connect timeout,
  keep-alives). Files go up as ``cat > tmp && mv tmp file`` and folders come back as a ``tar``
  stream: the device needs only ``sh``, ``cat``, ``mv`` and ``tar`` (no sftp server, which
  many boards lack).
* ``adb[:serial]`` -- Android's ``adb``: ``adb [-s SERIAL] push LOCAL REMOTE``,
  ``adb [-s SERIAL] pull REMOTE LOCAL`` and ``adb [-s SERIAL] shell 'ONE STRING'``.

This module holds the low-level layer: target parsing, options, and a :class:`Transport`
with ``exec`` (one POSIX ``sh`` script on the device), ``push_file`` and ``pull_tree``.
:mod:`lar_prec.remote.session` builds on it (pushing once by hash, runs in fresh processes
killed remotely on timeout, pulls, device facts) and is re-exported here; the scripts it
runs on the device are in :mod:`lar_prec.remote.scripts`.

Every failure of the device or the connection is a :class:`RemoteError` (a ``RunError``,
exit 3) whose message carries what ssh, adb or the device's shell said.
"""
from __future__ import annotations

import contextlib
import os
import re
import shlex
import shutil
import signal
import subprocess
import tarfile
import tempfile
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Callable, ClassVar, List, Mapping, Optional, Sequence, Tuple

from lar_prec.errors import RunError, UsageError


#: environment variables read by :meth:`SshOptions.from_env` / :meth:`AdbOptions.from_env`
ENV_SSH = "LAR_PREC_SSH"  # the ssh program
ENV_SSH_IDENTITY = "LAR_PREC_SSH_IDENTITY"  # ssh -i
ENV_SSH_CONFIG = "LAR_PREC_SSH_CONFIG"  # ssh -F
ENV_SSH_KNOWN_HOSTS = "LAR_PREC_SSH_KNOWN_HOSTS"  # -o UserKnownHostsFile=
ENV_SSH_ARGS = "LAR_PREC_SSH_ARGS"  # more ssh options, split like a shell
ENV_ADB = "LAR_PREC_ADB"  # the adb program


class RemoteError(RunError):
    """The device or the connection to it failed (exit 3).

    ``device_message`` is what ssh, adb or the device's shell printed; ``kept`` lists the local
    files that were pulled before the failure (they are never deleted).
    """

    def __init__(self, message: str, *, target: str = "", device_message: str = "",
                 run_dir: Optional[Path] = None, argv: Sequence[str] = (), returncode: Optional[int] = None,
                 kept: Sequence[Path] = ()) -> None:
        self.target = target
        self.device_message = device_message
        self.kept = tuple(kept)
        super().__init__(message, run_dir=run_dir, returncode=returncode, argv=argv,
                         stderr_tail=device_message)


# --------------------------------------------------------------------------- targets


@dataclass(frozen=True)
class RemoteTarget:
    """A parsed ``--remote`` value: ``ssh:[user@]host[:port]`` or ``adb[:serial]``."""

    kind: str  # "ssh" | "adb"
    spec: str  # as the user wrote it
    host: Optional[str] = None
    user: Optional[str] = None
    port: Optional[int] = None
    serial: Optional[str] = None

    def __str__(self) -> str:
        return self.spec


_HOST = re.compile(r"[A-Za-z0-9_.%-]+")  # a name or IPv4 (IPv6 goes in brackets)
_USER = re.compile(r"[A-Za-z0-9_.][A-Za-z0-9_.-]*")


def parse_target(spec: str) -> RemoteTarget:
    """Parse ``ssh:[user@]host[:port]`` (IPv6 as ``[::1]``) or ``adb[:serial]``.

    An adb serial may contain ``:`` (``adb:192.168.1.5:5555`` for adb over TCP).
    Raises UsageError (exit 2) naming what was expected.
    """
    text = (spec or "").strip()
    expected = "expected ssh:[user@]host[:port] or adb[:serial]"
    if text == "adb":
        return RemoteTarget("adb", text)
    if text.startswith("adb:"):
        serial = text[4:]
        if not serial or any(c.isspace() for c in serial) or serial.startswith("-"):
            raise UsageError(f"--remote {spec!r}: the adb serial is empty or malformed; {expected}")
        return RemoteTarget("adb", text, serial=serial)
    if not text.startswith("ssh:"):
        raise UsageError(f"--remote {spec!r}: unknown transport; {expected}")
    rest = text[4:]
    user = None
    if "@" in rest:
        user, rest = rest.rsplit("@", 1)
        if not _USER.fullmatch(user):
            raise UsageError(f"--remote {spec!r}: bad user name {user!r}; {expected}")
    port_text = None
    if rest.startswith("["):
        end = rest.find("]")
        if end < 0:
            raise UsageError(f"--remote {spec!r}: unclosed '[' in the host; {expected}")
        host, tail = rest[1:end], rest[end + 1:]
        if tail:
            if not tail.startswith(":"):
                raise UsageError(f"--remote {spec!r}: unexpected {tail!r} after the host; {expected}")
            port_text = tail[1:]
        if not re.fullmatch(r"[0-9A-Fa-f:.%A-Za-z]+", host or "-"):
            raise UsageError(f"--remote {spec!r}: bad IPv6 address {host!r}; {expected}")
    else:
        host, _, port_text = rest.partition(":") if ":" in rest else (rest, "", None)
        if not host or host.startswith("-") or not _HOST.fullmatch(host):
            raise UsageError(f"--remote {spec!r}: missing or bad host name {host!r}; {expected}")
    port = None
    if port_text is not None:
        if not port_text.isdigit() or not 0 < int(port_text) < 65536:
            raise UsageError(f"--remote {spec!r}: port {port_text!r} is not a number in 1..65535; {expected}")
        port = int(port_text)
    return RemoteTarget("ssh", text, host=host, user=user, port=port)


# --------------------------------------------------------------------------- options


@dataclass(frozen=True)
class SshOptions:
    """How to call ssh. ``None`` means ssh's own default (its config files, ~/.ssh keys)."""

    program: str = "ssh"
    identity: Optional[str] = None  # -i KEY (with IdentitiesOnly=yes)
    config: Optional[str] = None  # -F FILE: ~/.ssh/config is then not read
    known_hosts: Optional[str] = None  # -o UserKnownHostsFile=FILE
    # accept-new: trust a host on first contact, refuse one whose key changed. BatchMode alone
    # would refuse every unknown host with a message users rarely understand.
    strict_host_key_checking: Optional[str] = "accept-new"
    connect_timeout: int = 10
    extra_args: Tuple[str, ...] = ()
    # One connection per session (ControlMaster), so each push, run and pull costs a channel,
    # not a key exchange: a run is ~5 commands, and a slow board takes ~1 s per handshake.
    multiplex: bool = True

    @classmethod
    def from_env(cls, environ: Optional[Mapping[str, str]] = None) -> "SshOptions":
        """Options from ``LAR_PREC_SSH``, ``LAR_PREC_SSH_IDENTITY``, ``LAR_PREC_SSH_CONFIG``,
        ``LAR_PREC_SSH_KNOWN_HOSTS`` and ``LAR_PREC_SSH_ARGS`` (split like a shell)."""
        env = os.environ if environ is None else environ
        try:
            extra = tuple(shlex.split(env.get(ENV_SSH_ARGS, "")))
        except ValueError as exc:
            raise UsageError(f"${ENV_SSH_ARGS}: cannot split {env.get(ENV_SSH_ARGS)!r}: {exc}") from None
        return cls(program=env.get(ENV_SSH) or "ssh", identity=env.get(ENV_SSH_IDENTITY) or None,
                   config=env.get(ENV_SSH_CONFIG) or None, known_hosts=env.get(ENV_SSH_KNOWN_HOSTS) or None,
                   extra_args=extra)


@dataclass(frozen=True)
class AdbOptions:
    """How to call adb (``LAR_PREC_ADB`` names another program; default ``adb`` on PATH)."""

    program: str = "adb"

    @classmethod
    def from_env(cls, environ: Optional[Mapping[str, str]] = None) -> "AdbOptions":
        """Options from ``LAR_PREC_ADB``."""
        env = os.environ if environ is None else environ
        return cls(program=env.get(ENV_ADB) or "adb")


# --------------------------------------------------------------------------- local processes


@dataclass(frozen=True)
class Completed:
    """One finished local ssh/adb process."""

    argv: Tuple[str, ...]
    returncode: Optional[int]  # None when killed at the timeout
    stdout: bytes
    stderr: bytes
    timed_out: bool = False

    def message(self) -> str:
        """The last meaningful line the process (or the device through it) printed."""
        return last_line(self.stderr) or last_line(self.stdout)


def last_line(data: "bytes | str", limit: int = 500) -> str:
    """Last non-empty line of some output, for one-line error messages."""
    text = data.decode("utf-8", "replace") if isinstance(data, bytes) else data
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    return lines[-1][:limit] if lines else ""


def kill_group(proc: "subprocess.Popen") -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGKILL)


def run_transport_command(argv: Sequence[str], *, timeout: Optional[float], stdin: "IO[bytes] | None" = None,
              target: str = "", on_start: "Optional[Callable[[subprocess.Popen], None]]" = None) -> Completed:
    """Run ssh/adb in its own process group; at the timeout the group is killed (returncode None).

    ``on_start`` gets the process once it runs (to interrupt it from another thread).
    Raises RemoteError when the program itself cannot be started (not installed).
    """
    try:
        proc = subprocess.Popen(list(argv), stdin=stdin if stdin is not None else subprocess.DEVNULL,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True)
    except OSError as exc:
        raise RemoteError(f"cannot start {argv[0]!r} for {target}: {exc.strerror}; is it installed?",
                          target=target, argv=argv) from None
    if on_start is not None:
        on_start(proc)
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        kill_group(proc)
        try:
            out, err = proc.communicate(timeout=1)
        except subprocess.TimeoutExpired:
            # a multiplexed ssh client hands its pipes to the master, which keeps them open as
            # long as the remote command lives: stop reading instead of waiting for it
            proc.wait()
            for pipe in (proc.stdout, proc.stderr):
                if pipe is not None:
                    pipe.close()
            out, err = b"", b""
        return Completed(tuple(argv), None, out, err, timed_out=True)
    except BaseException:
        kill_group(proc)
        proc.wait()
        raise
    return Completed(tuple(argv), proc.returncode, out, err)


def shell_quote(path: str) -> str:
    """``path`` quoted for the device's POSIX shell; a leading ``~/`` stays the home folder."""
    if path == "~":
        return '"$HOME"'
    if path.startswith("~/"):
        return '"$HOME"/' + shlex.quote(path[2:])
    return shlex.quote(path)


# --------------------------------------------------------------------------- transports


@dataclass(frozen=True)
class Transport:
    """Commands on one device. Subclasses build the local command lines; nothing here is
    specific to load_and_run."""

    target: RemoteTarget

    #: the device folder used when --remote-dir is not given (``~/`` is the device's $HOME)
    default_remote_dir: ClassVar[str] = ""

    def shell_argv(self, script: str) -> List[str]:  # pragma: no cover - abstract
        """The local argv that runs ``script`` with the device's POSIX shell."""
        raise NotImplementedError

    def exec(self, script: str, *, timeout: Optional[float] = 60, stdin: "IO[bytes] | None" = None) -> Completed:
        """Run ``script`` on the device; a connection failure raises RemoteError.

        Only the transport's own failures raise: the script's exit status is returned.
        """
        res = run_transport_command(self.shell_argv(script), timeout=timeout, stdin=stdin, target=self.target.spec)
        self.check_connection(res)
        return res

    def check_connection(self, res: Completed) -> None:  # pragma: no cover - abstract
        """Raise RemoteError when ``res`` failed because of the connection, not the script."""
        raise NotImplementedError

    def push_file(self, local: Path, remote: str, *, timeout: Optional[float] = None) -> None:
        """Copy a local file to ``remote`` (parents created) atomically: ``remote`` appears whole or not at all."""
        raise NotImplementedError  # pragma: no cover - abstract

    def pull_tree(self, remote_dir: str, local_dir: Path, *, timeout: Optional[float] = None) -> None:
        """Copy the files under ``remote_dir`` into ``local_dir`` (merged into what is there).

        Whatever arrived stays on a failure, which raises RemoteError.
        """
        raise NotImplementedError  # pragma: no cover - abstract

    def describe_failure(self, res: Completed) -> str:
        """What went wrong, in the words of the device or the program when it said something."""
        return "timed out" if res.timed_out else (res.message() or f"exit {res.returncode}, no message")

    def fail(self, what: str, res: Completed, **kw) -> RemoteError:
        """A RemoteError for ``what`` carrying the device's (or program's) own message."""
        msg = self.describe_failure(res)
        return RemoteError(f"{what} on {self.target.spec} failed: {msg}", target=self.target.spec,
                           device_message=msg, argv=res.argv, returncode=res.returncode, **kw)


@dataclass(frozen=True)
class SshTransport(Transport):
    """``ssh:[user@]host[:port]`` through OpenSSH's client."""

    options: SshOptions = SshOptions()
    #: a private folder for the ControlMaster socket (set by RemoteSession when multiplexing)
    control_dir: Optional[str] = None
    default_remote_dir: ClassVar[str] = "~/.cache/lar-prec"

    def base_argv(self) -> List[str]:
        """``ssh`` and its options, up to and including the host (the command comes after)."""
        o, t = self.options, self.target
        argv = [o.program, "-T", "-o", "BatchMode=yes", "-o", f"ConnectTimeout={o.connect_timeout}",
                # a dead link is noticed within a minute instead of hanging until the run's timeout
                "-o", "ServerAliveInterval=15", "-o", "ServerAliveCountMax=4", "-o", "LogLevel=ERROR"]
        if o.config:
            argv += ["-F", o.config]
        if o.identity:
            argv += ["-i", o.identity, "-o", "IdentitiesOnly=yes"]
        if o.known_hosts:
            argv += ["-o", f"UserKnownHostsFile={o.known_hosts}"]
        if self.control_dir:
            argv += ["-o", "ControlMaster=auto", "-o", f"ControlPath={self.control_dir}/%C",
                     "-o", "ControlPersist=60"]
        if o.strict_host_key_checking and not any("stricthostkeychecking" in a.lower() for a in o.extra_args):
            argv += ["-o", f"StrictHostKeyChecking={o.strict_host_key_checking}"]
        if t.port is not None:
            argv += ["-p", str(t.port)]
        if t.user:
            argv += ["-l", t.user]
        return argv + [*o.extra_args, "--", str(t.host)]

    def _stop_pull(self, proc: "subprocess.Popen") -> None:
        kill_group(proc)
        # the master holds the stream's pipe (see run_transport_command): closing it ends the stream
        self.stop_master()

    def stop_master(self) -> None:
        """End the ControlMaster connection, if there is one (``ssh -O exit``)."""
        if self.control_dir and os.path.isdir(self.control_dir) and os.listdir(self.control_dir):
            argv = self.base_argv()
            argv[-2:-2] = ["-O", "exit"]
            with contextlib.suppress(RemoteError):
                run_transport_command(argv, timeout=15, target=self.target.spec)

    def shell_argv(self, script: str) -> List[str]:
        # ssh hands its command to the login shell, which may not be POSIX (csh, fish): say sh
        return self.base_argv() + ["sh -c " + shlex.quote(script)]

    def describe_failure(self, res: Completed) -> str:
        if res.returncode == 255 and not res.message():
            # a multiplexed client's errors are logged by the master, whose stderr is gone
            return "the ssh connection was lost (ssh exit 255)"
        return super().describe_failure(res)

    def check_connection(self, res: Completed) -> None:
        # 255 is ssh's own failure (refused, unreachable, auth, lost); scripts here never exit 255
        if res.timed_out or res.returncode == 255:
            raise self.fail("ssh", res)

    def push_file(self, local: Path, remote: str, *, timeout: Optional[float] = None) -> None:
        parent = remote.rsplit("/", 1)[0] or "/"
        tmp = f"{remote}.part"
        script = (f"mkdir -p {shell_quote(parent)} && cat > {shell_quote(tmp)} && mv -f {shell_quote(tmp)} {shell_quote(remote)}"
                  f" || {{ rc=$?; rm -f {shell_quote(tmp)}; exit $rc; }}")
        with open(local, "rb") as fh:
            res = self.exec(script, timeout=timeout, stdin=fh)
        if res.returncode != 0:
            raise self.fail(f"pushing {local} to {remote}", res)

    def pull_tree(self, remote_dir: str, local_dir: Path, *, timeout: Optional[float] = None) -> None:
        """A ``tar`` stream from the device, unpacked file by file into ``local_dir``."""
        argv = self.shell_argv(f"cd {shell_quote(remote_dir)} && tar cf - .")
        local_dir.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryFile() as err:
            try:
                proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=err,
                                        start_new_session=True)
            except OSError as exc:
                raise RemoteError(f"cannot start {argv[0]!r}: {exc.strerror}", target=self.target.spec) from None
            timer = threading.Timer(timeout, self._stop_pull, (proc,)) if timeout else None
            if timer:
                timer.start()
            broken = ""
            try:
                broken = _untar(proc.stdout, local_dir)  # type: ignore[arg-type]  (stdout=PIPE)
            except BaseException:
                kill_group(proc)
                raise
            finally:
                if timer:
                    timer.cancel()
                if broken:
                    kill_group(proc)
                proc.wait()
            err.seek(0)
            res = Completed(tuple(argv), proc.returncode, b"", err.read())
        if res.returncode != 0 or broken:
            if res.returncode is not None and res.returncode < 0 and not broken:
                broken = "timed out" if timeout else f"killed by signal {-res.returncode}"
            device = res.message()
            msg = "; ".join(m for m in (device, broken) if m) or f"exit {res.returncode}"
            raise RemoteError(f"pulling {remote_dir} from {self.target.spec} failed: {msg}",
                              target=self.target.spec, device_message=device or broken, argv=argv,
                              returncode=res.returncode)


def _safe_member(name: str) -> Optional[str]:
    parts = [p for p in name.split("/") if p not in ("", ".")]
    if not parts or any(p == ".." for p in parts):
        return None
    return "/".join(parts)


def _untar(stream: IO[bytes], local_dir: Path) -> str:
    """Unpack regular files of a tar stream; returns "" or what broke. A file appears only
    once it is complete (written to ``.part`` first), so a broken stream leaves no half file."""
    try:
        with tarfile.open(fileobj=stream, mode="r|") as tf:
            for member in tf:
                rel = _safe_member(member.name)
                if rel is None:
                    continue
                dest = local_dir / rel
                if member.isdir():
                    dest.mkdir(parents=True, exist_ok=True)
                    continue
                if not member.isfile():
                    continue  # links and devices never belong to a dump
                dest.parent.mkdir(parents=True, exist_ok=True)
                src = tf.extractfile(member)
                if src is None:
                    continue
                part = dest.with_name(dest.name + ".part")
                with open(part, "wb") as out:
                    while True:
                        block = src.read(1 << 20)
                        if not block:
                            break
                        out.write(block)
                if part.stat().st_size != member.size:
                    part.unlink()
                    return f"the stream ended inside {rel}"
                os.replace(part, dest)
    except (tarfile.TarError, EOFError, OSError) as exc:
        for part in local_dir.rglob("*.part"):
            with contextlib.suppress(OSError):
                part.unlink()
        return f"the tar stream broke: {exc}"
    return ""


@dataclass(frozen=True)
class AdbTransport(Transport):
    """``adb[:serial]`` through the ``adb`` program (exactly its command-line syntax)."""

    options: AdbOptions = AdbOptions()
    default_remote_dir: ClassVar[str] = "/data/local/tmp/lar-prec"

    def adb_argv(self, *args: str) -> List[str]:
        """``adb [-s SERIAL] ARGS...``."""
        serial = ["-s", self.target.serial] if self.target.serial else []
        return [self.options.program, *serial, *args]

    def shell_argv(self, script: str) -> List[str]:
        # ONE argument: adb joins its arguments with spaces and hands the string to the device's
        # sh, so a script split over several arguments would lose its quoting
        return self.adb_argv("shell", script)

    def check_connection(self, res: Completed) -> None:
        # scripts here end with a marker line or exit 0; adb's own failures ("device not found",
        # "no devices/emulators found", "device offline") exit 1 with "adb: " / "error: " prefixes
        msg = res.message()
        if res.timed_out or (res.returncode not in (0, None) and re.match(r"(adb: )?error:|adb: ", msg)):
            raise self.fail("adb", res)

    def push_file(self, local: Path, remote: str, *, timeout: Optional[float] = None) -> None:
        tmp = f"{remote}.part"
        res = run_transport_command(self.adb_argv("push", str(local), tmp), timeout=timeout, target=self.target.spec)
        if res.returncode != 0:
            with contextlib.suppress(RemoteError):
                self.exec(f"rm -f {shell_quote(tmp)}", timeout=30)
            raise self.fail(f"adb push {local}", res)
        res = self.exec(f"mv -f {shell_quote(tmp)} {shell_quote(remote)}", timeout=60)
        if res.returncode != 0:
            raise self.fail(f"moving {tmp} into place", res)

    def pull_tree(self, remote_dir: str, local_dir: Path, *, timeout: Optional[float] = None) -> None:
        """``adb pull REMOTE STAGING`` (STAGING new: adb then copies the folder's content into it),
        then the files are moved into ``local_dir`` -- also after a failure."""
        local_dir.mkdir(parents=True, exist_ok=True)
        staging = Path(tempfile.mkdtemp(prefix=".pull-", dir=local_dir.parent)) / "tree"
        try:
            res = run_transport_command(self.adb_argv("pull", remote_dir, str(staging)), timeout=timeout,
                            target=self.target.spec)
            if staging.is_dir():
                for src in sorted(staging.rglob("*")):
                    if src.is_file():
                        dest = local_dir / src.relative_to(staging)
                        dest.parent.mkdir(parents=True, exist_ok=True)
                        os.replace(src, dest)
        finally:
            shutil.rmtree(staging.parent, ignore_errors=True)
        if res.returncode != 0 or res.timed_out:
            raise self.fail(f"adb pull {remote_dir}", res)


def make_transport(target: "RemoteTarget | str", *, ssh: Optional[SshOptions] = None,
                   adb: Optional[AdbOptions] = None) -> Transport:
    """The transport of a target; options default to the ``LAR_PREC_SSH*`` / ``LAR_PREC_ADB`` environment."""
    t = parse_target(target) if isinstance(target, str) else target
    if t.kind == "ssh":
        return SshTransport(t, ssh or SshOptions.from_env())
    return AdbTransport(t, adb or AdbOptions.from_env())


