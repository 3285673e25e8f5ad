"""Fixtures and helpers of the remote tests: a real OpenSSH server on 127.0.0.1, the stand-in
adb (tests/fake_adb.py), wrappers that play the device's load_and_run. test_remote.py and
test_remote_workflows.py use them (both import them from test_remote, which re-exports them)."""
from __future__ import annotations

import filecmp
import json
import os
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from conftest import ROOT
from lar_prec.dumps.folder import DumpFolder
from lar_prec.remote.transport import RemoteError, SshOptions, make_transport
from lar_prec.remote.session import RemoteSession

SSHD = shutil.which("sshd") or ("/usr/sbin/sshd" if os.path.exists("/usr/sbin/sshd") else None)


# --------------------------------------------------------------------------- helpers


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def write_exe(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    path.chmod(0o755)
    return path


def lar_wrapper(path: Path) -> Path:
    """The device's load_and_run: the bundled one, run by this interpreter from this checkout."""
    return write_exe(path, f"#!/bin/sh\nPYTHONPATH={ROOT} exec {sys.executable} -m lar_prec.lar \"$@\"\n")


def slow_wrapper(path: Path, pidfile: Path) -> Path:
    """A load_and_run that hangs: it records its pid (kept by exec) and sleeps."""
    return write_exe(path, f"#!/bin/sh\necho $$ > {pidfile}\necho started >&2\nexec sleep 300\n")


def lar_argv(session: RemoteSession, case, plan) -> list:
    """A naive run's command line with the device's paths, as the runner builds it."""
    model = session.push(case.model)
    session.push_all([p for _, p in case.inputs])
    return [session.lar, model.remote, "--input", session.input_arg(case.inputs),
            "--iter", "1", "--warmup-iter", "0", "--bin-io-dump", plan.dump_dir]


def assert_same_dump(pulled: Path, local: Path) -> None:
    names = sorted(os.listdir(local))
    assert sorted(os.listdir(pulled)) == names
    match, mismatch, errors = filecmp.cmpfiles(pulled, local, names, shallow=False)
    assert mismatch == [] and errors == [], (mismatch, errors)
    a, b = DumpFolder(pulled), DumpFolder(local)
    assert a.ids == b.ids and len(a) > 3
    assert not a.incomplete


# --------------------------------------------------------------------------- sshd


@pytest.fixture(scope="session")
def sshd(tmp_path_factory):
    """A real OpenSSH server on 127.0.0.1:<free port>, keys made here, root by key only."""
    if SSHD is None:
        pytest.skip("sshd is not installed (make test runs scripts/ensure-sshd.sh: apt-get install openssh-server)")
    if os.geteuid() != 0:
        pytest.skip("the sshd fixture logs in as the current user and needs root to run sshd")
    d = tmp_path_factory.mktemp("sshd")
    for name in ("host", "client"):
        subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(d / name)], check=True, timeout=30)
    (d / "authorized_keys").write_text((d / "client.pub").read_text())
    port = free_port()
    (d / "sshd_config").write_text("\n".join([
        f"Port {port}", "ListenAddress 127.0.0.1", f"HostKey {d / 'host'}", f"PidFile {d / 'sshd.pid'}",
        f"AuthorizedKeysFile {d / 'authorized_keys'}", "PermitRootLogin prohibit-password",
        "PubkeyAuthentication yes", "PasswordAuthentication no", "KbdInteractiveAuthentication no",
        "UsePAM no", "StrictModes no", "LogLevel ERROR", "",
    ]))
    os.makedirs("/run/sshd", exist_ok=True)  # Debian's sshd refuses to start without it
    (d / "known_hosts").write_text(f"[127.0.0.1]:{port} {(d / 'host.pub').read_text()}")
    (d / "ssh_config").write_text("")  # -F: never read the user's ~/.ssh/config
    log = open(d / "sshd.log", "wb")
    proc = subprocess.Popen([SSHD, "-D", "-e", "-f", str(d / "sshd_config")], stdout=log, stderr=log,
                            stdin=subprocess.DEVNULL)
    opts = SshOptions(identity=str(d / "client"), config=str(d / "ssh_config"), known_hosts=str(d / "known_hosts"),
                      strict_host_key_checking="yes", connect_timeout=5)
    target = f"ssh:root@127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 20
        while True:
            if proc.poll() is not None:
                pytest.fail(f"sshd exited {proc.returncode}: {(d / 'sshd.log').read_text()[-2000:]}")
            try:
                if make_transport(target, ssh=opts).exec("echo up", timeout=10).stdout.strip() == b"up":
                    break
            except RemoteError:
                pass
            if time.monotonic() > deadline:
                pytest.fail(f"sshd did not accept a login: {(d / 'sshd.log').read_text()[-2000:]}")
            time.sleep(0.2)
        yield {"target": target, "options": opts, "port": port, "dir": d}
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        log.close()


@pytest.fixture
def ssh_session(sshd, tmp_path):
    """A session on the sshd 'device' whose working folder is a fresh tmp folder."""
    def make(lar: "Path | str", **kw) -> RemoteSession:
        return RemoteSession(sshd["target"], lar=str(lar), remote_dir=str(tmp_path / "device"), ssh=sshd["options"],
                             **kw)
    return make


# --------------------------------------------------------------------------- fake adb


@pytest.fixture
def fake_adb(tmp_path, monkeypatch):
    """``adb`` on PATH is tests/fake_adb.py; device SER1's root is tmp/dev1 (SER2: tmp/dev2)."""
    bindir = tmp_path / "bin"
    write_exe(bindir / "adb", f"#!/bin/sh\nexec {sys.executable} {ROOT / 'tests' / 'fake_adb.py'} \"$@\"\n")
    # the phone's property service, as the device's shell sees it
    write_exe(bindir / "getprop", '#!/bin/sh\ncase "$1" in ro.product.model) echo "Pixel 7";; '
                                  'ro.product.cpu.abi) echo arm64-v8a;; esac\n')
    roots = {"SER1": tmp_path / "dev1", "SER2": tmp_path / "dev2"}
    for r in roots.values():
        r.mkdir()
    log = tmp_path / "adb-calls.jsonl"
    monkeypatch.setenv("PATH", f"{bindir}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setenv("FAKE_ADB_DEVICES", ";".join(f"{s}={r}" for s, r in roots.items()))
    monkeypatch.setenv("FAKE_ADB_LOG", str(log))
    monkeypatch.delenv("ANDROID_SERIAL", raising=False)
    monkeypatch.delenv("LAR_PREC_ADB", raising=False)

    class Adb:
        root = roots["SER1"]
        remote_dir = str(roots["SER1"] / "data" / "local" / "tmp" / "lar-prec")

        @staticmethod
        def calls() -> list:
            return [json.loads(ln) for ln in log.read_text().splitlines()] if log.exists() else []

        @staticmethod
        def session(lar: "Path | str", serial: str = "SER1", **kw) -> RemoteSession:
            return RemoteSession(f"adb:{serial}", lar=str(lar), remote_dir=Adb.remote_dir, **kw)

    return Adb


def truncate_a_pull(fake_adb, dump: Path, monkeypatch) -> "tuple[Path, str]":
    """Make the fake adb cut one file (the middle one of ``dump``'s names) when it is pulled;
    returns the device-side load_and_run wrapper to run and the name of the file cut."""
    names = sorted(os.listdir(dump))
    victim = names[len(names) // 2]
    monkeypatch.setenv("FAKE_ADB_TRUNCATE_ON_PULL", victim)
    return lar_wrapper(fake_adb.root / "data" / "local" / "tmp" / "load_and_run"), victim
