"""Remote runs through the CLI, for real: the sshd of tests/remote/test_remote.py on 127.0.0.1 is the
"device", running the bundled load_and_run through a wrapper script (a board's own binary);
the stand-in adb of tests/fake_adb.py is a phone. Every result is checked against a local
run of the same real case.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from conftest import ROOT
from lar_prec.dumps.folder import DumpFolder
from proc_helpers import wait_gone
from remote_fixtures import fake_adb, free_port, lar_wrapper, slow_wrapper, sshd, truncate_a_pull, write_exe  # noqa: F401  (fixtures)

CASE = "cnn"


def ssh_env(sshd) -> dict:
    """The environment a user sets for their board: key, config and known_hosts of the test server."""
    o = sshd["options"]
    return {**os.environ, "PYTHONPATH": str(ROOT), "LAR_PREC_SSH_IDENTITY": o.identity,
            "LAR_PREC_SSH_CONFIG": o.config, "LAR_PREC_SSH_KNOWN_HOSTS": o.known_hosts,
            "LAR_PREC_LOAD_AND_RUN": "bundled"}


def cli(args, env, timeout=400) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "lar_prec", *map(str, args)], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=timeout)


def input_args(case) -> list:
    return [a for name, path in case.inputs for a in ("--input", f"{name}:{path}")]


def error_lines(stderr: str) -> list:
    return [ln for ln in stderr.splitlines() if ln.startswith("Error:")]


def test_naive_vs_default_over_ssh_equals_a_local_run(sshd, manifest, tmp_path):
    case = manifest[CASE]
    env = ssh_env(sshd)
    lar = lar_wrapper(tmp_path / "device-bin" / "load_and_run")
    device = tmp_path / "device"
    local = cli(["naive-vs-default", case.model, *input_args(case), "--out", tmp_path / "local", "-q",
                 "--json", tmp_path / "local.json"], env)
    remote = cli(["naive-vs-default", case.model, *input_args(case), "--out", tmp_path / "remote", "-q",
                  "--remote", sshd["target"], "--lar", lar, "--remote-dir", device, "--jobs", "2",
                  "--json", tmp_path / "remote.json"], env)
    assert local.returncode in (0, 1), local.stderr
    assert remote.returncode == local.returncode, remote.stderr
    a, b = json.loads((tmp_path / "local.json").read_text()), json.loads((tmp_path / "remote.json").read_text())
    assert [r["id"] for r in b["roots"]] == [r["id"] for r in a["roots"]]
    assert [(v["id"], v["status"]) for v in b["vars"]] == [(v["id"], v["status"]) for v in a["vars"]]
    assert b["remote"] == sshd["target"]
    assert sshd["target"] in remote.stdout.split("\nRuns", 1)[1], "the terminal says where each run ran"
    # both runs on the same device: no environment difference besides the naive switch
    assert b["environment_differences"] == []
    naive_run = next(r for r in b["runs"] if r["label"] == "naive")
    assert naive_run["environment"]["host"] == sshd["target"]
    assert naive_run["argv"][0] == str(lar) and "--bin-io-dump" in naive_run["argv"]
    # run.json records the device, and the dump came back
    rec = json.loads(Path(naive_run["dir"], "run.json").read_text())
    assert rec["status"] == "ok" and rec["env_changes"] == {"MGB_USE_MEGDNN_DBG": "2"}
    r = rec["remote"]
    assert r["transport"] == "ssh" and r["target"] == sshd["target"]
    assert "Linux" in r["device"]["uname"] and r["device"]["cpu_features"]
    assert r["device"]["load_and_run"]["version"] == "load_and_run version 1.0"  # as MegEngine's tool answers
    assert rec["megengine_version"] == "1.13.0" and rec["versions_from"] == "stderr"  # what the device's run said
    assert rec["load_and_run"]["version"] == r["device"]["load_and_run"]["version"]
    import hashlib
    assert {p["sha256"] for p in r["pushed"]} >= {hashlib.sha256(case.model.read_bytes()).hexdigest()}
    assert rec["model"]["sha256"] == hashlib.sha256(case.model.read_bytes()).hexdigest()
    assert any(Path(naive_run["dir"], "dump").iterdir()) and not Path(naive_run["dir"], "dump", ".incomplete").exists()
    # the device's run folders are cleaned up; the pushed files stay cached for the next analysis
    assert not (device / "runs").exists() or not any((device / "runs").iterdir())
    assert any((device / "files").iterdir())
    # pushed once per analysis: the second worker's session found the files by hash
    records = [json.loads(Path(r["dir"], "run.json").read_text())["remote"]["pushed"] for r in b["runs"]]
    fresh = [p["local"] for pushed in records for p in pushed if not p["skipped"]]
    assert sorted(fresh) == sorted({p["local"] for pushed in records for p in pushed})


def test_naive_vs_default_over_ssh_measures_local_error_on_the_device(sshd, manifest, tmp_path):
    """The board's load_and_run computes c2 1e-4 off under its default kernels
    (tests/wrapped_lar.py): the layerwise model runs there too, and roots the fault."""

    case = manifest[CASE]
    lar = write_exe(tmp_path / "device-bin" / "load_and_run",
                    f"#!/bin/sh\nWRAPPED_LAR_FAULT=c2.weight:1e-4 PYTHONPATH={ROOT} "
                    f"exec {sys.executable} {ROOT / 'tests' / 'wrapped_lar.py'} \"$@\"\n")
    device = tmp_path / "device"
    proc = cli(["naive-vs-default", case.model, *input_args(case), "--out", tmp_path / "a", "-q",
                "--remote", sshd["target"], "--lar", lar, "--remote-dir", device, "--json", tmp_path / "a.json"],
               ssh_env(sshd))
    assert proc.returncode == 1, proc.stdout + proc.stderr
    rep = json.loads((tmp_path / "a.json").read_text())
    assert rep["local"]["measured"], rep["local"]
    assert [(r["name"], r["rule"]) for r in rep["roots"]] == [("c2.Convolution", "local")]
    conv = next(v for v in rep["vars"] if v["name"] == "c2.Convolution")
    assert conv["label"] == "root" and conv["local_err"] > 5e-5
    assert "local" in proc.stdout and "inherited <- " in proc.stdout  # the local columns in the terminal
    # the layerwise run went to the device: its binary, the pushed layerwise model and feeds
    (run,) = rep["local"]["runs"]
    assert run["remote"] == sshd["target"] and run["argv"][0] == str(lar)
    rec = json.loads(Path(run["dir"], "run.json").read_text())
    assert rec["status"] == "ok" and rec["remote"]["target"] == sshd["target"]
    pushed = {Path(p["local"]).name: p for p in rec["remote"]["pushed"]}
    feeds = sorted(Path(rep["local"]["dir"], "inputs-ref").glob("*.npy"))
    assert feeds and {"layerwise.mge", *(f.name for f in feeds)} <= set(pushed)
    model_arg = run["argv"][1]
    assert model_arg == pushed["layerwise.mge"]["remote"] and model_arg.startswith(str(device))
    assert all(item.split(":", 1)[1].startswith(str(device / "files"))
               for item in run["argv"][run["argv"].index("--input") + 1].split(";"))
    assert any(Path(run["dir"], "dump").iterdir())
    # the device is clean: no run folder, and the layerwise files (made for this analysis only)
    # are gone; the model and inputs stay cached as before
    assert not (device / "runs").exists() or not any((device / "runs").iterdir())
    left = {p.name for p in (device / "files").iterdir()}
    assert not any("layerwise" in n for n in left) and not any(p["remote"].endswith(n) for n in left
                                                               for k, p in pushed.items() if k != "layerwise.mge")
    assert any(n.endswith("-model.mge") for n in left)


def test_fast_run_over_ssh_pins_the_algorithms_on_the_device_for_the_layerwise_run(sshd, manifest, tmp_path):
    case = manifest["mlp"]  # its naive run takes --fast-run (convolutions refuse it under the naive kernels)
    lar = lar_wrapper(tmp_path / "device-bin" / "load_and_run")
    device = tmp_path / "device"
    proc = cli(["naive-vs-default", case.model, *input_args(case), "--out", tmp_path / "a", "-q", "--fast-run",
                "--local-checks", "--remote", sshd["target"], "--lar", lar, "--remote-dir", device,
                "--json", tmp_path / "a.json"], ssh_env(sshd))
    assert proc.returncode in (0, 1), proc.stderr
    rep = json.loads((tmp_path / "a.json").read_text())
    assert rep["local"]["measured"], rep["local"]
    default = next(r for r in rep["runs"] if r["label"] == "default")
    cache = default["argv"][default["argv"].index("--fast-run-algo-policy") + 1]
    # the cache is a device path, written by the default run and read by the layerwise runs there
    assert cache.startswith(str(device)) and Path(cache).is_file()
    for run in rep["local"]["runs"]:
        if run["label"] != "reference-self":
            assert run["argv"][run["argv"].index("--fast-run-algo-policy") + 1] == cache
    # so the layerwise model fed with the default run's values reproduces it bit for bit
    assert {c["name"]: c["status"] for c in rep["local"]["checks"]}["test_fed"] == "pass"


def test_devices_ssh_and_local_agree_per_target(sshd, manifest, tmp_path):
    case = manifest[CASE]
    env = ssh_env(sshd)
    lar = lar_wrapper(tmp_path / "device-bin" / "load_and_run")
    proc = cli(["devices", case.model, *input_args(case), "--out", tmp_path / "dev", "-q",
                "--remote", f"{sshd['target']}={lar}", "--local", "--remote-dir", tmp_path / "device",
                "--config", "naive", "--json", tmp_path / "dev.json", "--html", tmp_path / "dev.html"], env)
    # naive on both: the same reference kernels, the same machine underneath -> no divergence
    assert proc.returncode == 0, proc.stderr
    rep = json.loads((tmp_path / "dev.json").read_text())
    assert rep["command"] == "devices" and rep["reference"] == "local"
    targets = {t["target"]: t for t in rep["targets"]}
    assert set(targets) == {"local", sshd["target"]}
    for t in targets.values():
        assert not t["diverged"] and t["pairing"] == "id" and t["final_outputs"]
        assert t["final_output_max_err"] == 0.0 and t["root"] is None
        assert len(t["max_err_by_var"]) == len(rep["vars"])
    assert targets["local"]["reference"] and not targets[sshd["target"]]["reference"]
    # the two targets ran different binaries on different "hosts": the report says so
    fields = {d["field"] for d in rep["environment_differences"]}
    assert {"host", "load_and_run"} <= fields
    assert "Environment differs between runs" in proc.stdout
    assert "host differs: " in proc.stdout
    table = proc.stdout.split("Targets (against the naive run on local)", 1)[1]
    assert sshd["target"] in table and "local (reference)" in table
    _check_devices_page(tmp_path / "dev.html", rep)


def _check_devices_page(path: Path, rep: dict) -> None:
    """The page draws the targets table, the target-by-variable table and the differences."""
    from browser_helpers import CHROMIUM, Browser

    if CHROMIUM is None:
        pytest.skip("headless chromium not installed (run scripts/ensure-chromium.sh as root)")
    b = Browser()
    try:
        b.open(path)
        assert b.js("document.body.dataset.rendered") is not None
        assert b.js("document.getElementById('fatal').hidden") is True and b.problems() == []
        assert b.js("document.getElementById('targets-section').hidden") is False
        rows = b.js("document.querySelectorAll('#targets-table tbody tr').length")
        assert rows == len(rep["targets"])
        heads = b.js("Array.from(document.querySelectorAll('#target-var-table th')).map(t => t.textContent)")
        assert heads == ["variable"] + [t["target"] for t in rep["targets"]]
        assert b.js("document.querySelectorAll('#target-var-table tbody tr').length") == len(rep["vars"])
        env = b.js("document.getElementById('envdiff').innerText")
        assert not b.js("document.getElementById('envdiff').hidden") and "host" in env
    finally:
        b.close()


def test_devices_default_config_finds_the_same_root_as_naive_vs_default(sshd, manifest, tmp_path):
    case = manifest[CASE]
    env = ssh_env(sshd)
    lar = lar_wrapper(tmp_path / "device-bin" / "load_and_run")
    nvd = cli(["naive-vs-default", case.model, *input_args(case), "--out", tmp_path / "nvd", "-q",
               "--json", tmp_path / "nvd.json"], env)
    dev = cli(["devices", case.model, *input_args(case), "--out", tmp_path / "dev", "-q", "--lar", lar,
               "--remote", sshd["target"], "--remote-dir", tmp_path / "device", "--json", tmp_path / "dev.json"], env)
    assert dev.returncode == nvd.returncode, dev.stderr
    a, b = json.loads((tmp_path / "nvd.json").read_text()), json.loads((tmp_path / "dev.json").read_text())
    t = b["targets"][0]
    assert t["target"] == sshd["target"] and t["diverged"] == a["diverged"]
    assert [r["id"] for r in b["roots"]] == [r["id"] for r in a["roots"]]
    if a["roots"]:
        assert t["root"]["id"] == a["roots"][0]["id"]


def test_connection_refused_is_exit_3_in_one_line(sshd, manifest, tmp_path):
    case = manifest[CASE]
    proc = cli(["run", case.model, *input_args(case), "--out", tmp_path / "r", "--remote",
                f"ssh:root@127.0.0.1:{free_port()}", "--lar", "/bin/true"], ssh_env(sshd), timeout=120)
    assert proc.returncode == 3, proc.stderr
    errs = error_lines(proc.stderr)
    assert len(errs) == 1 and "Connection refused" in errs[0]
    assert "Traceback" not in proc.stderr
    rec = json.loads(next((tmp_path / "r").rglob("run.json")).read_text())
    assert rec["status"] == "failed" and "Connection refused" in rec["error"]


def test_missing_binary_on_the_device_is_exit_3(sshd, manifest, tmp_path):
    case = manifest[CASE]
    proc = cli(["naive-vs-default", case.model, *input_args(case), "--out", tmp_path / "a", "-q",
                "--remote", sshd["target"], "--lar", tmp_path / "nowhere" / "load_and_run",
                "--remote-dir", tmp_path / "device"], ssh_env(sshd), timeout=120)
    assert proc.returncode == 3, proc.stderr
    errs = error_lines(proc.stderr)
    assert len(errs) == 1 and "not found on" in errs[0] and "--lar" in errs[0]
    assert "Traceback" not in proc.stderr


def test_timeout_is_exit_3_and_the_device_process_is_gone(sshd, manifest, tmp_path):
    case = manifest[CASE]
    pidfile = tmp_path / "device.pid"
    lar = slow_wrapper(tmp_path / "device-bin" / "slow", pidfile)
    t0 = time.monotonic()
    proc = cli(["run", case.model, *input_args(case), "--out", tmp_path / "r", "--remote", sshd["target"],
                "--lar", lar, "--remote-dir", tmp_path / "device", "--timeout", "4"], ssh_env(sshd), timeout=120)
    assert proc.returncode == 3, proc.stderr
    assert time.monotonic() - t0 < 90
    assert len(error_lines(proc.stderr)) == 1 and "did not finish within 4 s" in proc.stderr
    assert wait_gone(int(pidfile.read_text())), "the device's load_and_run survived the timeout"
    rec = json.loads(next((tmp_path / "r").rglob("run.json")).read_text())
    assert rec["status"] == "timeout" and rec["remote"]["timed_out"] and "killed" in rec["remote"]["kill_report"]


def test_run_over_fake_adb_records_the_phone(fake_adb, manifest, lar_dump, tmp_path):
    case = manifest[CASE]
    lar = lar_wrapper(fake_adb.root / "data" / "local" / "tmp" / "load_and_run")
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = cli(["run", case.model, *input_args(case), "--config", "naive", "--out", tmp_path / "r",
                "--remote", "adb:SER1", "--lar", lar, "--remote-dir", fake_adb.remote_dir], env)
    assert proc.returncode == 0, proc.stderr
    run_dir = Path(proc.stdout.strip())
    rec = json.loads((run_dir / "run.json").read_text())
    dev = rec["remote"]["device"]
    assert rec["remote"]["transport"] == "adb" and dev["android_model"] == "Pixel 7"
    assert dev["android_abi"] == "arm64-v8a" and rec["environment"]["android_model"] == "Pixel 7"
    # the pulled dump equals a local naive run file by file
    local = lar_dump(CASE, "naive")
    assert sorted(p.name for p in (run_dir / "dump").iterdir()) == sorted(os.listdir(local))
    for name in os.listdir(local):
        assert (run_dir / "dump" / name).read_bytes() == (local / name).read_bytes()
    calls = [c for c in fake_adb.calls() if "-s" in c]
    assert calls and all(c[c.index("-s") + 1] == "SER1" for c in calls)


def rewriting_wrapper(path: Path, flag: str) -> Path:
    """A device's load_and_run build that rewrites the graph (fusion, a packed layout): its var
    ids differ from the reference's, its var names do not."""

    return write_exe(path, f"#!/bin/sh\nPYTHONPATH={ROOT} exec {sys.executable} -m lar_prec.lar \"$@\" {flag}\n")


@pytest.mark.megengine
def test_devices_pairs_rewritten_graphs_by_name(sshd, fake_adb, manifest, tmp_path, monkeypatch):
    from lar_prec.workflows.devices.devices import parse_targets, devices
    from lar_prec.remote.transport import SshOptions  # noqa: F401
    from lar_prec.run.device import RemoteSpec

    case = manifest[CASE]
    fused = rewriting_wrapper(tmp_path / "device-bin" / "load_and_run", "--enable-fuse-conv-bias-nonlinearity")
    packed = rewriting_wrapper(fake_adb.root / "data" / "local" / "tmp" / "load_and_run", "--enable-nchw44")
    monkeypatch.setenv("LAR_PREC_LOAD_AND_RUN", "bundled")
    targets = parse_targets([RemoteSpec(sshd["target"], str(fused), str(tmp_path / "device"), ssh=sshd["options"]),
                             RemoteSpec("adb:SER1", str(packed), fake_adb.remote_dir)], local=True)
    a = devices(case.model, [f"{n}:{p}" for n, p in case.inputs], targets, out=tmp_path / "dev", html=False)
    by = {t["target"]: t for t in a.report.extra["targets"]}
    assert by["local"]["pairing"] == "id"
    assert by[sshd["target"]]["pairing"] == "name" and by["adb:SER1"]["pairing"] == "name"
    n_vars = len(by["local"]["max_err_by_var"])
    for name in (sshd["target"], "adb:SER1"):
        t = by[name]
        # the model's output pairs and is compared; its error is small rounding, not a fault
        assert t["final_outputs"] and t["final_output_max_err"] is not None and t["final_output_max_err"] < 1e-3
        compared = [e for e in t["max_err_by_var"].values() if e is not None]
        assert 0.5 * n_vars < len(compared) <= n_vars and t["pairing_detail"]["compared"] == len(compared)
        # a rewrite is not a fault: nothing unpaired is reported missing, nothing diverges
        assert not t["diverged"] and t["root"] is None, t
    assert a.exit_code == 0 and a.report.n_not_ok == 0
    # the model's output is the reference's, whatever each target fused away
    assert by[sshd["target"]]["final_outputs"] == by["local"]["final_outputs"] == by["adb:SER1"]["final_outputs"]
    # the fused convolutions have no partner on the fusing device: left out, never paired wrongly
    ref = DumpFolder(next(r.dump_dir for r in a.runs if r.label == "local-naive"))
    names = {str(v.var.id): v.var.name for v in ref}
    left_out = {names[i] for i in set(names) - set(by[sshd["target"]]["max_err_by_var"])}
    assert left_out == {"c1.Convolution", "c2.Convolution"}
    assert any("paired by name" in n for n in a.report.notes)


def test_shake_over_ssh_finds_the_jitter_and_its_cause_on_the_device(sshd, manifest, lar_dump, tmp_path):
    """A board whose load_and_run jitters in the first convolution unless --reproducible."""

    case = manifest[CASE]
    src = lar_dump(CASE, "default")
    folder = DumpFolder(src)
    conv = next(v for v in folder.ids if folder.var_info(v).opr_type == "ConvolutionForward")
    lar = write_exe(tmp_path / "device-bin" / "load_and_run", "\n".join([
        "#!/bin/sh", f"FAKE_LAR_SOURCE_DUMP={src}", f"FAKE_LAR_JITTER_VAR={folder.paths()[conv].name}",
        "FAKE_LAR_JITTER_UNLESS=--reproducible", "export FAKE_LAR_SOURCE_DUMP FAKE_LAR_JITTER_VAR FAKE_LAR_JITTER_UNLESS",
        f"exec {sys.executable} {ROOT / 'tests' / 'fake_lar.py'} \"$@\"", ""]))
    proc = cli(["shake", case.model, *input_args(case), "--repeat", "3", "--out", tmp_path / "s", "-q",
                "--remote", sshd["target"], "--lar", lar, "--remote-dir", tmp_path / "device",
                "--json", tmp_path / "s.json"], ssh_env(sshd))
    assert proc.returncode == 1, proc.stderr
    rep = json.loads((tmp_path / "s.json").read_text())
    assert rep["cause"] == "same algorithm, result differs"
    assert "--reproducible runs agree" in rep["roots"][0]["cause_detail"]
    assert rep["roots"][0]["id"] == conv
    assert {r["label"] for r in rep["runs"]} >= {"default-1", "default-3", "reproducible-1"}
    assert all(r["environment"]["host"] == sshd["target"] for r in rep["runs"])
    assert all(r["argv"][0] == str(lar) for r in rep["runs"])
    assert "load_and_run (fake)" in rep["runs"][0]["environment"]["load_and_run_version"]
    # the fake copies a fixed dump whatever model it is given: no local error to read, and
    # the report says so instead of showing columns of nothing
    assert not rep["local"]["measured"] and "holds none of the layerwise model's outputs" in rep["local"]["why"]
    assert rep["local"]["why"].startswith(f"local error could not be measured on {sshd['target']}")


def test_ctrl_c_stops_the_device_run_and_exits_130(sshd, manifest, tmp_path):
    import signal

    case = manifest[CASE]
    pidfile = tmp_path / "device.pid"
    lar = slow_wrapper(tmp_path / "device-bin" / "slow", pidfile)
    out = tmp_path / "a"
    proc = subprocess.Popen([sys.executable, "-m", "lar_prec", "naive-vs-default", str(case.model), *input_args(case),
                             "--out", str(out), "-q", "--remote", sshd["target"], "--lar", str(lar),
                             "--remote-dir", str(tmp_path / "device")],
                            cwd=ROOT, env=ssh_env(sshd), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and not pidfile.exists():
            time.sleep(0.1)
        assert pidfile.exists(), "the device's run did not start"
        time.sleep(0.5)
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=90)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 130, err
    assert "interrupted" in err and "Traceback" not in err
    assert wait_gone(int(pidfile.read_text())), "the device's load_and_run survived Ctrl-C"
    runs = [json.loads(p.read_text()) for p in out.rglob("run.json")]
    assert runs and {r["status"] for r in runs} <= {"interrupted", "not_started"}
    assert any(r["status"] == "interrupted" for r in runs)


def test_ctrl_c_during_the_device_facts_probe_ends_load_and_run_version_on_the_device(sshd, manifest, tmp_path):
    """Issue 21 §3: Ctrl-C while the device's `load_and_run --version` hangs (a board without
    timeout(1) would keep it forever): the device's process is gone within seconds."""
    import signal

    case = manifest[CASE]
    pidfile = tmp_path / "version.pid"
    lar = write_exe(tmp_path / "device-bin" / "stuck", f"#!/bin/sh\necho $$ > {pidfile}\nexec sleep 300\n")
    proc = subprocess.Popen([sys.executable, "-m", "lar_prec", "naive-vs-default", str(case.model), *input_args(case),
                             "--out", str(tmp_path / "a"), "-q", "--remote", sshd["target"], "--lar", str(lar),
                             "--remote-dir", str(tmp_path / "device")],
                            cwd=ROOT, env=ssh_env(sshd), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and not (pidfile.exists() and pidfile.read_text().strip()):
            time.sleep(0.1)
        assert pidfile.exists(), "the device's --version probe did not start"
        time.sleep(0.5)
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=90)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 130, err
    assert "Traceback" not in err
    assert wait_gone(int(pidfile.read_text()), 5), "the device's load_and_run --version survived Ctrl-C"
    assert not list((tmp_path / "device").rglob("probe-*")), "the probe folder was left on the device"


@pytest.mark.parametrize("bad", ["/tmp/x;rm -rf /", "-rf", "/tmp/a\nb", "/tmp/`id`"])
def test_a_remote_dir_a_shell_would_misread_is_exit_2_naming_the_option(sshd, manifest, tmp_path, bad):
    case = manifest[CASE]
    proc = cli(["naive-vs-default", str(case.model), *input_args(case), "--out", str(tmp_path / "a"), "-q",
                "--remote", sshd["target"], "--remote-dir", bad], ssh_env(sshd))
    assert proc.returncode == 2, proc.stderr
    assert error_lines(proc.stderr)[0].startswith("Error: --remote-dir"), proc.stderr
    assert not (tmp_path / "a").exists() or not list((tmp_path / "a").rglob("run.json"))


def test_a_run_that_stalls_on_the_device_is_seen_in_seconds(sshd, manifest, tmp_path):
    """Issue 21 §2, remote: the device's /proc says the run's process group uses no CPU; it is
    ended there and reported `stalled` with its last error line, long before the timeout."""
    case = manifest[CASE]
    pidfile = tmp_path / "device.pid"
    lar = write_exe(tmp_path / "device-bin" / "stall",
                    f"#!/bin/sh\nif [ \"$1\" = --version ]; then echo 'load_and_run (stand-in)'; exit 0; fi\n"
                    f"echo $$ > {pidfile}\necho 'bad err=45 in Xbyak::Error' >&2\n"
                    # then every thread parked in a futex wait, as MegEngine's are
                    f"exec {sys.executable} -c 'import threading; threading.Event().wait()'\n")
    t0 = time.monotonic()
    proc = cli(["run", str(case.model), *input_args(case), "--out", str(tmp_path / "a"), "--remote", sshd["target"],
                "--lar", str(lar), "--remote-dir", str(tmp_path / "device"), "--timeout", "200"],
               {**ssh_env(sshd), "LAR_PREC_STALL_AFTER": "3"})
    assert time.monotonic() - t0 < 90, proc.stderr
    assert proc.returncode == 3, proc.stderr
    assert "stalled" in proc.stderr and "Xbyak" in proc.stderr
    rec = json.loads(next((tmp_path / "a").rglob("run.json")).read_text())
    assert rec["status"] == "stalled" and rec["remote"]["stalled"] is True
    assert wait_gone(int(pidfile.read_text()), 5), "the device's run survived"


def test_environment_differences_name_what_differs():
    from lar_prec.run.env import environment_differences, format_differences, local_environment

    here = local_environment("bundled lar_prec.lar", "v1", {"MGB_USE_MEGDNN_DBG": "2"}, ["MGB_USE_MEGDNN_DBG"])
    same = local_environment("bundled lar_prec.lar", "v1", {"MGB_USE_MEGDNN_DBG": None}, ["MGB_USE_MEGDNN_DBG"])
    # naive and default differ only in the variable the configuration sets on purpose
    assert environment_differences([("naive", here), ("default", same)]) == []
    board = {**same, "host": "ssh:board", "cpu_features": [f for f in same["cpu_features"]][1:] + ["asimd"],
             "mgb_env": {"MGB_CONV_ALGO": "x"}, "load_and_run": "/opt/load_and_run"}
    diffs = {d["field"]: d["values"] for d in environment_differences([("naive", here), ("board", board)])}
    assert set(diffs) == {"host", "cpu_features", "mgb_env", "load_and_run"}
    assert diffs["cpu_features"]["board"] == "only: asimd"
    assert diffs["mgb_env"] == {"naive": "(none)", "board": "MGB_CONV_ALGO=x"}
    assert any(line.startswith("cpu_features differs: ") for line in format_differences(
        environment_differences([("naive", here), ("board", board)])))


def test_full_device_disk_is_exit_3_with_the_device_message(sshd, manifest, tmp_path):
    """The push's temporary file is a link to /dev/full: the device's write fails with ENOSPC."""
    from lar_prec.outputs import sha256_file as sha256_of

    case = manifest[CASE]
    files = tmp_path / "device" / "files"
    files.mkdir(parents=True)
    (files / f"{sha256_of(case.model)[:16]}-{case.model.name}.part").symlink_to("/dev/full")
    lar = lar_wrapper(tmp_path / "device-bin" / "load_and_run")
    proc = cli(["run", case.model, *input_args(case), "--out", tmp_path / "r", "--remote", sshd["target"],
                "--lar", lar, "--remote-dir", tmp_path / "device"], ssh_env(sshd), timeout=120)
    assert proc.returncode == 3, proc.stderr
    errs = error_lines(proc.stderr)
    assert len(errs) == 1 and "No space left on device" in errs[0], proc.stderr
    rec = json.loads(next((tmp_path / "r").rglob("run.json")).read_text())
    assert rec["status"] == "failed" and "No space left on device" in rec["remote"]["device_message"]


def test_truncated_pull_is_exit_3_and_keeps_what_arrived(fake_adb, manifest, lar_dump, tmp_path, monkeypatch):
    case = manifest[CASE]
    lar, victim = truncate_a_pull(fake_adb, lar_dump(CASE, "naive"), monkeypatch)
    proc = cli(["run", case.model, *input_args(case), "--config", "naive", "--out", tmp_path / "r",
                "--remote", "adb:SER1", "--lar", lar, "--remote-dir", fake_adb.remote_dir],
               {**os.environ, "PYTHONPATH": str(ROOT)})
    assert proc.returncode == 3, proc.stderr
    errs = error_lines(proc.stderr)
    assert len(errs) == 1 and "incomplete" in errs[0] and f"dump/{victim}" in errs[0]
    run_json = next((tmp_path / "r").rglob("run.json"))
    rec = json.loads(run_json.read_text())
    assert rec["status"] == "failed" and rec["incomplete"]
    dump = run_json.parent / "dump"
    assert set(os.listdir(lar_dump(CASE, "naive"))) <= set(os.listdir(dump)), "every file that arrived is kept"
    # the dump is marked incomplete, so no reader takes it for a whole one
    assert (dump / ".incomplete").exists()


def test_naive_vs_default_over_adb_with_a_text_dump(fake_adb, manifest, tmp_path):
    case = manifest[CASE]
    lar = lar_wrapper(fake_adb.root / "data" / "local" / "tmp" / "load_and_run")
    env = {**os.environ, "PYTHONPATH": str(ROOT), "LAR_PREC_LOAD_AND_RUN": "bundled"}
    local = cli(["naive-vs-default", case.model, *input_args(case), "--text-dump", "--out", tmp_path / "l", "-q",
                 "--json", tmp_path / "l.json"], env)
    remote = cli(["naive-vs-default", case.model, *input_args(case), "--text-dump", "--out", tmp_path / "r", "-q",
                  "--remote", "adb:SER1", "--lar", lar, "--remote-dir", fake_adb.remote_dir, "--keep-remote",
                  "--json", tmp_path / "r.json"], env)
    assert remote.returncode == local.returncode, remote.stderr
    a, b = json.loads((tmp_path / "l.json").read_text()), json.loads((tmp_path / "r.json").read_text())
    assert [(v["id"], v["inputs"], v["status"]) for v in b["vars"]] == [(v["id"], v["inputs"], v["status"]) for v in a["vars"]]
    text_run = next(r for r in b["runs"] if r["label"] == "default-text")
    assert Path(text_run["dir"], "io_dump.txt").stat().st_size > 0
    assert "--io-dump" in text_run["argv"] and text_run["argv"][text_run["argv"].index("--io-dump") + 1].startswith(
        fake_adb.remote_dir)
    # --keep-remote: every run's device folder is still there
    kept = list(Path(fake_adb.remote_dir, "runs").iterdir())
    assert len(kept) == 3 + 1 and all((k / "stderr.txt").is_file() for k in kept)  # + the layerwise run
    assert b["local"]["measured"] and b["local"]["runs"][0]["remote"] == "adb:SER1"
    assert any(p.name.endswith("-layerwise.mge") for p in Path(fake_adb.remote_dir, "files").iterdir())
    assert all(r["environment"]["android_model"] == "Pixel 7" for r in b["runs"])


def test_devices_with_the_phone_as_reference(fake_adb, manifest, tmp_path):
    case = manifest[CASE]
    lar = lar_wrapper(fake_adb.root / "data" / "local" / "tmp" / "load_and_run")
    env = {**os.environ, "PYTHONPATH": str(ROOT), "LAR_PREC_LOAD_AND_RUN": "bundled"}
    proc = cli(["devices", case.model, *input_args(case), "--local", "--remote", f"adb:SER1={lar}",
                "--remote-dir", fake_adb.remote_dir, "--reference", "adb:SER1", "--out", tmp_path / "d", "-q",
                "--json", "-"], env)
    assert proc.returncode in (0, 1), proc.stderr
    rep = json.loads(proc.stdout)
    assert rep["reference"] == "adb:SER1"
    by = {t["target"]: t for t in rep["targets"]}
    assert by["adb:SER1"]["reference"] and not by["local"]["reference"]
    naive = next(r for r in rep["runs"] if r["label"] == "adb_SER1-naive")
    assert naive["env"] == {"MGB_USE_MEGDNN_DBG": "2"} and naive["environment"]["host"] == "adb:SER1"
    # an unknown reference is a usage error before anything runs
    bad = cli(["devices", case.model, *input_args(case), "--local", "--reference", "adb:OTHER",
               "--out", tmp_path / "e"], env)
    assert bad.returncode == 2 and "--reference 'adb:OTHER'" in bad.stderr and not (tmp_path / "e").exists()


def test_sweep_over_ssh_runs_every_option_on_the_device(sshd, manifest, tmp_path):
    """sweep --remote: the reference and each option run on the board, the analysis here."""
    case = manifest[CASE]
    env = ssh_env(sshd)
    lar = lar_wrapper(tmp_path / "device-bin" / "load_and_run")
    proc = cli(["sweep", case.model, *input_args(case), "--options", "weight-preprocess,const-shape",
                "--out", tmp_path / "s", "-q", "--remote", sshd["target"], "--lar", lar,
                "--remote-dir", tmp_path / "device", "--json", tmp_path / "s.json", "-j", "2"], env)
    assert proc.returncode == 0, proc.stderr
    rep = json.loads((tmp_path / "s.json").read_text())
    assert rep["command"] == "sweep"
    assert {o["option"] for o in rep["options"]} >= {"weight-preprocess", "const-shape"}
    assert all(o["status"] == "runs" and o["verdict"] == "ok" for o in rep["options"]), rep["options"]
    for run in rep["runs"]:
        rec = json.loads(Path(run["dir"], "run.json").read_text())
        assert rec["status"] == "ok" and rec["remote"]["target"] == sshd["target"], run["label"]
        assert rec["argv"][0] == str(lar)
    # each option's layerwise run went to the device too: local error measured there, no false alarm
    for o in rep["options"]:
        assert o["local"]["measured"] and o["root_rule"] == "local" and o["local"]["roots"] == [], o["local"]
        run = json.loads(next(Path(o["local"]["dir"]).rglob("run.json")).read_text())
        assert run["status"] == "ok" and run["remote"]["target"] == sshd["target"] and run["argv"][0] == str(lar)
    # the layerwise model was pushed for all options at once (two ran together) and removed at the end
    assert not [f.name for f in (tmp_path / "device" / "files").iterdir() if "layerwise" in f.name]


@pytest.mark.megengine
def test_fast_run_shake_over_ssh_reads_each_runs_algorithms_from_the_device(sshd, manifest, tmp_path):
    """Each fast-run run on the device writes its algorithm cache into its own run folder,
    which comes back with the dump: the algorithms per operator and run are known there too."""
    case = manifest["fastrun_shake"]
    lar = lar_wrapper(tmp_path / "device-bin" / "load_and_run")
    proc = cli(["shake", case.model, *input_args(case), "--repeat", "2", "--config", "fast-run", "-q", "--no-local",
                "--out", tmp_path / "s", "--remote", sshd["target"], "--lar", lar, "--remote-dir", tmp_path / "device",
                "--json", tmp_path / "s.json"], ssh_env(sshd))
    assert proc.returncode in (0, 1), proc.stderr
    rep = json.loads((tmp_path / "s.json").read_text())
    choice = rep["algorithm_choice"]
    assert choice["known"], choice
    for r in rep["runs"][:2]:
        assert r["argv"][r["argv"].index("--fast-run-algo-policy") + 1] == "fast-run-algo-policy.cache"
        assert choice["caches"][r["label"]] == str(Path(r["dir"]) / "fast-run-algo-policy.cache")
        assert Path(choice["caches"][r["label"]]).is_file()
    convs = [v for v in rep["vars"] if v["opr_type"] == "ConvolutionForward"]
    assert convs and all(sorted(v["algorithms"]) == ["fast-run-1", "fast-run-2"] for v in convs)
