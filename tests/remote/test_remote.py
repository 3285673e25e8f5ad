"""Remote runs for real: an OpenSSH server started here on 127.0.0.1, and a stand-in adb.

The "device" runs the bundled load_and_run through a small wrapper script (the way a board
runs its own binary); dumps pulled back must equal a local run's dump byte for byte (naive
kernels are deterministic). sshd comes from Debian's openssh-server (``make test`` installs it
with scripts/ensure-sshd.sh); the ssh tests skip, saying why, only when it is missing.
"""
from __future__ import annotations

import json
import os
import re
import subprocess
import threading
import time
from pathlib import Path

import pytest

from lar_prec.errors import LarPrecError, RunError, UsageError
from lar_prec.remote.transport import AdbOptions, AdbTransport, RemoteError, SshOptions, SshTransport, parse_target
from lar_prec.remote.session import RemoteSession
from lar_prec.remote.transport import shell_quote
from lar_prec.remote.scripts import RemoteRunPlan, kill_script, parse_device_info, run_script

CASE = "cnn"
NAIVE_ENV = {"MGB_USE_MEGDNN_DBG": "2"}


from proc_helpers import alive, wait_gone  # noqa: F401
from remote_fixtures import (  # noqa: F401  (fixtures, and helpers test_remote_workflows imports from here)
    assert_same_dump,
    fake_adb,
    free_port,
    lar_argv,
    lar_wrapper,
    slow_wrapper,
    ssh_session,
    sshd,
    truncate_a_pull,
    write_exe,
)


# --------------------------------------------------------------------------- targets and command lines


@pytest.mark.parametrize("spec, kind, user, host, port, serial", [
    ("ssh:board", "ssh", None, "board", None, None),
    ("ssh:me@10.0.0.7:2222", "ssh", "me", "10.0.0.7", 2222, None),
    ("ssh:root@[::1]:22", "ssh", "root", "::1", 22, None),
    ("adb", "adb", None, None, None, None),
    ("adb:emulator-5554", "adb", None, None, None, "emulator-5554"),
    ("adb:192.168.1.5:5555", "adb", None, None, None, "192.168.1.5:5555"),
])
def test_parse_target(spec, kind, user, host, port, serial):
    t = parse_target(spec)
    assert (t.kind, t.user, t.host, t.port, t.serial, str(t)) == (kind, user, host, port, serial, spec)


@pytest.mark.parametrize("spec, says", [
    ("ssh:", "host"), ("ssh:h:0", "port"), ("ssh:h:22x", "port"), ("ssh:-oProxyCommand=x", "host"),
    ("ssh:[::1", "'['"), ("adb:", "serial"), ("adb:-s", "serial"), ("telnet:h", "unknown transport"),
])
def test_parse_target_refuses_with_exit_2(spec, says):
    with pytest.raises(UsageError, match=r"--remote .*" + says.replace("[", r"\[")) as e:
        parse_target(spec)
    assert e.value.exit_code == 2 and "expected ssh:[user@]host[:port] or adb[:serial]" in str(e.value)


def test_ssh_command_line_passes_keys_config_and_known_hosts():
    opts = SshOptions(identity="/k/id", config="/k/cfg", known_hosts="/k/kh", connect_timeout=7)
    argv = SshTransport(parse_target("ssh:me@h:2200"), opts).shell_argv("echo 'a b'")
    assert argv[0] == "ssh" and argv[-3:] == ["--", "h", "sh -c 'echo '\"'\"'a b'\"'\"''"]
    joined = " ".join(argv)
    for part in ("-o BatchMode=yes", "-o ConnectTimeout=7", "-F /k/cfg", "-i /k/id -o IdentitiesOnly=yes",
                 "-o UserKnownHostsFile=/k/kh", "-o StrictHostKeyChecking=accept-new", "-p 2200", "-l me"):
        assert part in joined
    # a user's own StrictHostKeyChecking wins over the default
    mine = SshOptions(extra_args=("-o", "StrictHostKeyChecking=no"))
    assert "StrictHostKeyChecking=accept-new" not in SshTransport(parse_target("ssh:h"), mine).base_argv()


def test_ssh_options_from_env():
    o = SshOptions.from_env({"LAR_PREC_SSH_IDENTITY": "/k", "LAR_PREC_SSH_CONFIG": "/c",
                             "LAR_PREC_SSH_KNOWN_HOSTS": "/kh", "LAR_PREC_SSH_ARGS": "-o 'ProxyJump=a b'"})
    assert (o.identity, o.config, o.known_hosts, o.extra_args) == ("/k", "/c", "/kh", ("-o", "ProxyJump=a b"))
    with pytest.raises(UsageError, match="LAR_PREC_SSH_ARGS"):
        SshOptions.from_env({"LAR_PREC_SSH_ARGS": "-o 'unclosed"})


def test_adb_command_lines_are_what_real_adb_expects():
    t = AdbTransport(parse_target("adb:R58M123"), AdbOptions("adb"))
    assert t.adb_argv("push", "/l/m.mge", "/data/local/tmp/m.mge") == \
        ["adb", "-s", "R58M123", "push", "/l/m.mge", "/data/local/tmp/m.mge"]
    assert t.adb_argv("pull", "/data/local/tmp/d", "/l/d") == ["adb", "-s", "R58M123", "pull", "/data/local/tmp/d", "/l/d"]
    # the whole script is ONE argument after `shell` (adb joins arguments with spaces)
    script = "cd '/data/local/tmp/a b' && echo \"$HOME\""
    assert t.shell_argv(script) == ["adb", "-s", "R58M123", "shell", script]
    assert AdbTransport(parse_target("adb")).shell_argv("id") == ["adb", "shell", "id"]


def test_run_script_quotes_argv_and_env_for_sh(tmp_path):
    """The wrapper, run by a local sh, passes every argument through unchanged."""
    plan = RemoteRunPlan("q", str(tmp_path / "run dir"), None, None)
    args = ["a b", "it's", "$HOME", "*", "", "semi;colon", "new\nline"]
    script = run_script(plan, ["sh", "-c", 'printf "%s|" "$@"; printf "%s|%s" "$V" "${GONE-unset}"', "x", *args],
                        {"V": "v w'x", "GONE": None})
    env = {**os.environ, "GONE": "was set"}
    out = subprocess.run(["sh", "-c", script], capture_output=True, text=True, timeout=30, env=env)
    assert out.stdout.strip().endswith("lar-prec-rc=0")
    assert (tmp_path / "run dir" / "stdout.txt").read_text() == "|".join(args) + "|v w'x|unset"
    with pytest.raises(UsageError):
        run_script(plan, ["x"], {"A-B": "1"})


def test_home_relative_remote_dir_is_expanded_by_the_device_shell(tmp_path):
    script = f"mkdir -p {shell_quote('~/a b/c')} && cd {shell_quote('~/a b/c')} && pwd -P"
    out = subprocess.run(["sh", "-c", script], capture_output=True, text=True, timeout=30,
                         env={**os.environ, "HOME": str(tmp_path)})
    assert out.stdout.strip() == str((tmp_path / "a b" / "c").resolve())


ARM_INFO = """@@uname
Linux rk3588 5.10.110 #1 SMP aarch64 GNU/Linux
@@cpu
CPU architecture: 8
CPU implementer	: 0x41
CPU part	: 0xd05
Features	: fp asimd evtstrm aes pmull sha1 sha2 crc32 atomics fphp asimdhp cpuid asimdrdm lrcpc dcpop asimddp
Features	: fp asimd evtstrm aes pmull sha1 sha2 crc32 atomics fphp asimdhp cpuid asimdrdm lrcpc dcpop asimddp
@@getprop
@@lar
found
load_and_run version 1.13.0
@@end
"""


def test_device_info_of_an_arm_board():
    info = parse_device_info(ARM_INFO, transport="ssh", target="ssh:board", remote_dir="/r", lar="/opt/lar")
    assert info.uname.startswith("Linux rk3588") and info.cpu_model == "CPU implementer 0x41 part 0xd05"
    assert "asimddp" in info.cpu_features and "fphp" in info.cpu_features
    assert len(info.cpu_features) == len(set(info.cpu_features))
    assert info.android_model is None and info.lar_version == "load_and_run version 1.13.0"
    missing = parse_device_info(ARM_INFO.replace("found\nload_and_run version 1.13.0", "missing"),
                                transport="ssh", target="ssh:board", remote_dir="/r", lar="/opt/lar")
    assert not missing.lar_found and missing.lar_version is None


def test_a_broken_tar_stream_keeps_whole_files_only(tmp_path):
    """What the ssh pull does with a stream cut mid-file: complete files stay, no half file."""
    import io
    import tarfile

    from lar_prec.remote.transport import _untar

    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tf:
        for name, size in (("./dump/1", 3000), ("./dump/2", 50000), ("./stderr.txt", 10)):
            info = tarfile.TarInfo(name)
            info.size = size
            tf.addfile(info, io.BytesIO(os.urandom(size)))
    data = buf.getvalue()
    assert _untar(io.BytesIO(data), tmp_path / "whole") == ""
    assert sorted(str(p.relative_to(tmp_path / "whole")) for p in (tmp_path / "whole").rglob("*") if p.is_file()) \
        == ["dump/1", "dump/2", "stderr.txt"]
    broken = _untar(io.BytesIO(data[:512 * 3 + 3000 + 20000]), tmp_path / "cut")
    assert broken
    files = sorted(str(p.relative_to(tmp_path / "cut")) for p in (tmp_path / "cut").rglob("*") if p.is_file())
    assert files == ["dump/1"] and (tmp_path / "cut" / "dump" / "1").stat().st_size == 3000


def test_kill_script_without_a_run_is_harmless(tmp_path):
    out = subprocess.run(["sh", "-c", kill_script(str(tmp_path / "none"))], capture_output=True, text=True, timeout=30)
    assert out.returncode == 0 and "no run folder" in out.stdout


# --------------------------------------------------------------------------- ssh, for real


def test_ssh_run_pulls_a_dump_equal_to_a_local_run(ssh_session, manifest, lar_dump, tmp_path):
    case = manifest[CASE]
    lar = lar_wrapper(tmp_path / "device-bin" / "load_and_run")
    with ssh_session(lar) as s:
        plan = s.new_run("naive")
        argv = lar_argv(s, case, plan)
        assert all(not p.skipped for p in s.pushed)
        res = s.run(plan, argv, NAIVE_ENV, tmp_path / "local-run", timeout=300)
        info = s.device_info()
        record = s.record()
    assert res.returncode == 0 and not res.timed_out and res.seconds > 0
    assert_same_dump(res.dump_dir, lar_dump(CASE, "naive"))
    assert res.stderr.is_file() and res.stdout.is_file()
    assert not Path(plan.dir).exists(), "the device's run folder is cleaned up"
    # the device describes itself, and the record is what run.json gets
    assert "Linux" in info.uname and info.cpu_model and info.cpu_features
    assert info.lar_found and info.lar_version == "load_and_run version 1.0"  # as MegEngine's tool answers
    assert info.android_model is None
    rec = json.loads(json.dumps(record))
    assert rec["transport"] == "ssh" and rec["target"].startswith("ssh:root@127.0.0.1:")
    assert {p["sha256"] for p in rec["pushed"]} >= {__import__("hashlib").sha256(case.model.read_bytes()).hexdigest()}


def test_ssh_second_analysis_skips_files_the_device_has(ssh_session, manifest, tmp_path):
    case = manifest[CASE]
    with ssh_session("true") as s:
        first = s.push(case.model)
        assert s.push_all(p for p in [case.model]) == (first,)  # a generator, already pushed
    with ssh_session("true") as s:
        again = s.push(case.model)
    assert not first.skipped and again.skipped and again.remote == first.remote
    assert Path(first.remote).read_bytes() == case.model.read_bytes()
    # a copy changed on the device is pushed again, not trusted
    Path(first.remote).write_bytes(b"corrupt")
    with ssh_session("true") as s:
        fixed = s.push(case.model)
    assert not fixed.skipped and Path(first.remote).read_bytes() == case.model.read_bytes()


def test_ssh_keep_remote_keeps_the_device_folder(ssh_session, tmp_path):
    with ssh_session("sh", keep_remote=True) as s:
        plan = s.new_run("keep")
        res = s.run(plan, ["sh", "-c", "echo out; echo err >&2; exit 3"], {}, tmp_path / "r", timeout=60)
    assert res.returncode == 3 and res.remote_kept
    assert (tmp_path / "r" / "stdout.txt").read_text() == "out\n"
    assert (tmp_path / "r" / "stderr.txt").read_text() == "err\n"
    assert Path(plan.dir, "stdout.txt").is_file()


def test_ssh_connection_refused_is_exit_3_with_ssh_message(sshd, tmp_path):
    s = RemoteSession(f"ssh:root@127.0.0.1:{free_port()}", lar="x", ssh=sshd["options"])
    with pytest.raises(RemoteError, match="Connection refused") as e:
        s.open()
    assert isinstance(e.value, RunError) and isinstance(e.value, LarPrecError) and e.value.exit_code == 3


def test_ssh_missing_binary_is_exit_3_with_the_device_message(ssh_session, tmp_path):
    missing = tmp_path / "no" / "load_and_run"
    with ssh_session(missing) as s:
        assert s.device_info().lar_found is False
        plan = s.new_run("default")
        with pytest.raises(RemoteError) as e:
            s.run(plan, [str(missing), "model.mge"], {}, tmp_path / "r", timeout=60)
    assert e.value.exit_code == 3 and "cannot be run" in str(e.value)
    assert "No such file" in e.value.device_message or "not found" in e.value.device_message
    assert (tmp_path / "r" / "stderr.txt").is_file()  # what the device said is kept


def test_ssh_timeout_kills_the_remote_process(ssh_session, tmp_path):
    pidfile = tmp_path / "device.pid"
    lar = slow_wrapper(tmp_path / "device-bin" / "slow", pidfile)
    with ssh_session(lar) as s:
        plan = s.new_run("slow")
        t0 = time.monotonic()
        res = s.run(plan, [str(lar), "model.mge"], {}, tmp_path / "r", timeout=5)
    assert res.timed_out and res.returncode is None and time.monotonic() - t0 < 30
    pid = int(pidfile.read_text())
    assert wait_gone(pid), f"the device's process {pid} survived the timeout"
    assert "killed" in res.kill_report
    assert (tmp_path / "r" / "stderr.txt").read_text() == "started\n"


def _ancestor(pid: int, comm: str) -> int:
    while pid > 1:
        stat = Path(f"/proc/{pid}/stat").read_text()
        name, rest = stat.split("(", 1)[1].rsplit(")", 1)
        if name == comm:
            return pid
        pid = int(rest.split()[1])
    raise AssertionError(f"no {comm} among the ancestors")


def _start_until_pid(run, pidfile: Path) -> threading.Thread:
    """``run`` started in a thread, returned once the device's run wrote its pid to ``pidfile``."""
    worker = threading.Thread(target=run)
    worker.start()
    deadline = time.monotonic() + 30
    while not (pidfile.exists() and pidfile.read_text().strip()) and time.monotonic() < deadline:
        time.sleep(0.1)
    return worker


def test_ssh_lost_connection_is_exit_3_and_the_remote_run_is_killed(ssh_session, tmp_path):
    """The device's sshd session process dies mid-run, as when a board's network drops."""
    pidfile = tmp_path / "device.pid"
    lar = slow_wrapper(tmp_path / "device-bin" / "slow", pidfile)
    box = {}

    def run():
        with ssh_session(lar) as s:
            try:
                s.run(s.new_run("slow"), [str(lar)], {}, tmp_path / "r", timeout=120)
            except RemoteError as exc:
                box["error"] = exc

    worker = _start_until_pid(run, pidfile)
    pid = int(pidfile.read_text())
    os.kill(_ancestor(pid, "sshd"), 9)  # the session's own sshd process, not the listening server
    worker.join(60)
    assert not worker.is_alive()
    err = box["error"]
    assert err.exit_code == 3 and "connection failed or was lost" in str(err)
    assert re.search("closed|reset|lost", err.device_message), err.device_message
    assert wait_gone(pid), "the run left on the device was killed once the device answered again"
    assert (tmp_path / "r" / "stderr.txt").read_text() == "started\n"  # pulled after reconnecting


def test_ssh_interrupt_kills_the_remote_run(ssh_session, tmp_path):
    pidfile = tmp_path / "device.pid"
    lar = slow_wrapper(tmp_path / "device-bin" / "slow", pidfile)
    s = ssh_session(lar).__enter__()
    box = {}

    def run():
        try:
            s.run(s.new_run("slow"), [str(lar)], {}, tmp_path / "r", timeout=120)
        except KeyboardInterrupt:
            box["interrupted"] = True

    worker = _start_until_pid(run, pidfile)
    s.interrupt()
    worker.join(60)
    try:
        assert box.get("interrupted") and wait_gone(int(pidfile.read_text()))
        with pytest.raises(KeyboardInterrupt):  # nothing new starts after Ctrl-C
            s.run(s.new_run("next"), ["true"], {}, tmp_path / "r2", timeout=10)
    finally:
        s.close()


def test_ssh_session_close_ends_its_master_connection(ssh_session, tmp_path):
    s = ssh_session("true")
    s.open()
    control = Path(s.transport.control_dir)
    assert any(control.iterdir()), "commands share one ControlMaster connection"
    masters = [p for p in Path("/proc").iterdir() if p.name.isdigit() and str(control).encode()
               in _cmdline(p)]
    assert masters
    s.close()
    assert not control.exists()
    assert all(wait_gone(int(p.name), 10) for p in masters)
    res = s.transport.exec("echo again", timeout=30)  # used after close: works, unshared
    assert res.stdout == b"again\n", res


def _cmdline(proc: Path) -> bytes:
    try:
        return (proc / "cmdline").read_bytes()
    except OSError:
        return b""


def test_ssh_run_folder_that_cannot_be_made_is_exit_3_with_the_device_message(ssh_session, tmp_path):
    with ssh_session("true") as s:
        plan = s.new_run("x")
        Path(plan.dir).parent.mkdir(parents=True, exist_ok=True)
        Path(plan.dir).write_text("a file where the run folder goes")
        with pytest.raises(RemoteError, match="could not start it") as e:
            s.run(plan, ["true"], {}, tmp_path / "r", timeout=60)
    assert "File exists" in e.value.device_message or "Not a directory" in e.value.device_message


def test_ssh_full_device_disk_is_exit_3_with_the_device_message(ssh_session, manifest, tmp_path):
    """The push's temporary file is a link to /dev/full: the device's write fails with ENOSPC."""
    from lar_prec.outputs import sha256_file as sha256_of

    case = manifest[CASE]
    files = tmp_path / "device" / "files"
    files.mkdir(parents=True)
    (files / f"{sha256_of(case.model)[:16]}-{case.model.name}.part").symlink_to("/dev/full")
    with ssh_session("true") as s:
        with pytest.raises(RemoteError, match="No space left on device") as e:
            s.push(case.model)
    assert e.value.exit_code == 3
    assert not (files / f"{sha256_of(case.model)[:16]}-{case.model.name}").exists()


def test_two_sessions_pushing_the_same_inputs_at_once_both_succeed(ssh_session, monkeypatch, tmp_path):
    """A sweep's options run in parallel, each pushing the same reference inputs to the device.
    The push writes ``NAME.part`` and then moves it into place; over a slow link (stretched here:
    the half-written copy stays 0.3 s) a second push of the same file rewrote the same ``.part``
    and its ``mv`` found it gone, so that option's local error was lost. Pushes of one device
    folder now take turns, and the second finds the file there."""
    def slow_push(self, local, remote, *, timeout=None):
        part = shell_quote(remote + ".part")
        with open(local, "rb") as fh:
            res = self.exec(f"mkdir -p {shell_quote(remote.rsplit('/', 1)[0])} && cat > {part}", timeout=timeout,
                            stdin=fh)
        time.sleep(0.3)
        res = self.exec(f"mv -f {part} {shell_quote(remote)}", timeout=timeout) if res.returncode == 0 else res
        if res.returncode != 0:
            raise self.fail(f"pushing {local} to {remote}", res)

    monkeypatch.setattr(SshTransport, "push_file", slow_push)
    files = []
    for k in range(3):  # several files, as the layerwise model's feeds
        f = tmp_path / f"feed{k}.npy"
        f.write_bytes(os.urandom(100_000))
        files.append(f)
    errors, got = [], []
    n = 3
    ready = threading.Barrier(n)

    def push() -> None:
        with ssh_session("true") as s:
            s.remote_dir  # noqa: B018 - the folder is set up before the pushes start
            ready.wait(60)
            try:
                got.append(s.push_all(files))
            except LarPrecError as exc:
                errors.append(exc)

    threads = [threading.Thread(target=push) for _ in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert errors == [] and len(got) == n
    for pushed in got:
        assert [Path(p.remote).read_bytes() for p in pushed] == [f.read_bytes() for f in files]
    assert sum(not p.skipped for pushed in got for p in pushed) == len(files)  # each pushed once


# --------------------------------------------------------------------------- adb, through the stand-in


def test_adb_run_pulls_a_dump_equal_to_a_local_run(fake_adb, manifest, lar_dump, tmp_path):
    case = manifest[CASE]
    lar = lar_wrapper(fake_adb.root / "data" / "local" / "tmp" / "load_and_run")
    with fake_adb.session(lar) as s:
        plan = s.new_run("naive")
        argv = lar_argv(s, case, plan)
        res = s.run(plan, argv, NAIVE_ENV, tmp_path / "local-run", timeout=300)
        info = s.device_info()
    assert res.returncode == 0
    assert_same_dump(res.dump_dir, lar_dump(CASE, "naive"))
    assert not Path(plan.dir).exists()
    assert info.transport == "adb" and info.lar_found
    assert (info.android_model, info.android_abi) == ("Pixel 7", "arm64-v8a")
    calls = fake_adb.calls()
    assert calls and all(c[:3] == ["adb", "-s", "SER1"] for c in calls)
    for c in calls:
        assert c[3] in ("push", "pull", "shell")
        assert len(c) == (6 if c[3] in ("push", "pull") else 5), c  # shell: one string
    pushes = [c for c in calls if c[3] == "push"]
    assert [Path(c[4]) for c in pushes] == [case.model.resolve(), *(p.resolve() for _, p in case.inputs)]


def test_adb_text_dump_run(fake_adb, manifest, lar_dump, tmp_path):
    case = manifest[CASE]
    lar = lar_wrapper(fake_adb.root / "data" / "local" / "tmp" / "load_and_run")
    with fake_adb.session(lar) as s:
        plan = s.new_run("naive-text", text_dump=True)
        model = s.push(case.model)
        s.push_all([p for _, p in case.inputs])
        argv = [s.lar, model.remote, "--input", s.input_arg(case.inputs), "--iter", "1", "--warmup-iter", "0",
                "--io-dump", plan.text_dump]
        res = s.run(plan, argv, NAIVE_ENV, tmp_path / "r", timeout=300)
    assert res.returncode == 0 and res.dump_dir is None and not (tmp_path / "r" / "dump").exists()
    assert res.text_dump.read_text() == lar_dump(CASE, "naive", text=True).read_text()


def test_adb_without_serial_and_unknown_serial(fake_adb, monkeypatch):
    monkeypatch.setenv("FAKE_ADB_DEVICES", f"ONLY={fake_adb.root}")
    s = RemoteSession("adb", lar="x", remote_dir=fake_adb.remote_dir)
    assert s.open() == fake_adb.remote_dir
    assert fake_adb.calls()[-1][:2] == ["adb", "shell"]
    with pytest.raises(RemoteError, match="device 'NOPE' not found") as e:
        fake_adb.session("x", serial="NOPE").open()
    assert e.value.exit_code == 3


def test_adb_truncated_pull_is_exit_3_and_keeps_what_arrived(fake_adb, manifest, lar_dump, tmp_path, monkeypatch):
    case = manifest[CASE]
    lar, victim = truncate_a_pull(fake_adb, lar_dump(CASE, "naive"), monkeypatch)
    with fake_adb.session(lar) as s:
        plan = s.new_run("naive")
        with pytest.raises(RemoteError, match="incomplete") as e:
            s.run(plan, lar_argv(s, case, plan), NAIVE_ENV, tmp_path / "r", timeout=300)
    assert e.value.exit_code == 3 and f"dump/{victim}" in str(e.value)
    kept = sorted(os.listdir(tmp_path / "r" / "dump"))
    assert kept == sorted(os.listdir(lar_dump(CASE, "naive"))), "every file that arrived is kept, the short one too"
    assert Path(plan.dir, "dump").is_dir(), "the device folder is kept for another try"


def test_adb_pull_that_breaks_midway_keeps_the_files_pulled(fake_adb, tmp_path, monkeypatch):
    monkeypatch.setenv("FAKE_ADB_FAIL_PULL_AFTER", "2")
    with fake_adb.session("sh") as s:
        plan = s.new_run("x")
        script = f"for i in 1 2 3 4; do echo $i > {plan.dump_dir}/$i; done"
        with pytest.raises(RemoteError, match="connection reset by peer") as e:
            s.run(plan, ["sh", "-c", script], {}, tmp_path / "r", timeout=60)
    assert len(e.value.kept) == 2 and all(p.is_file() for p in e.value.kept)
    assert "kept" in str(e.value)


def test_adb_timeout_kills_the_remote_process(fake_adb, tmp_path):
    pidfile = tmp_path / "device.pid"
    lar = slow_wrapper(fake_adb.root / "bin" / "slow", pidfile)
    with fake_adb.session(lar) as s:
        res = s.run(s.new_run("slow"), [str(lar)], {}, tmp_path / "r", timeout=5)
    assert res.timed_out
    assert wait_gone(int(pidfile.read_text()))


def test_adb_push_outside_the_device_is_exit_3(fake_adb, tmp_path):
    # the fake device's shell may create the folder; adb push outside the device root may not
    s = RemoteSession("adb:SER1", lar="x", remote_dir=str(tmp_path / "elsewhere"))
    s.open()
    f = tmp_path / "m.mge"
    f.write_bytes(b"x")
    with pytest.raises(RemoteError, match="Permission denied"):
        s.push(f)
