"""The zoo manifest on real cases: the issue's form expands to the tasks it names, each task's id is
a hash of what it runs (files by sha256, not names or paths), and every bad manifest is refused
before anything runs with one line naming the file, the table and what was expected (exit 2)."""
from __future__ import annotations

import shutil

import pytest

from lar_prec.errors import UsageError
from lar_prec.zoo.manifest import device_resource, load_manifest
from lar_prec.zoo.tasks import expand
from zoo_helpers import write_manifest, zoo_cli

ISSUE_FORM = """
[[run]]
command = "sweep"                 # naive-vs-default | shake | sweep | mixed | quant
options = ["nchw44", "ioc16"]
[[build]]
name = "bundled"                  # or: path = "/opt/mge-1.13/load_and_run"
[[device]]
name = "local"                    # or: remote = "ssh:user@board"
"""


def test_the_issue_form_expands_to_one_sweep_per_model(manifest, tmp_path):
    m = load_manifest(write_manifest(tmp_path / "zoo.toml", [manifest["cnn"], manifest["mlp"]], ISSUE_FORM))
    tasks = expand(m)
    assert [(t.model, t.command, t.options, t.build, t.device, t.resource) for t in tasks] == [
        ("cnn", "sweep", ("nchw44", "ioc16"), "bundled", "local", None),
        ("mlp", "sweep", ("nchw44", "ioc16"), "bundled", "local", None)]
    assert len({t.id for t in tasks}) == 2 and all(len(t.id) == 32 for t in tasks)


def test_a_task_id_is_what_it_runs_not_what_it_is_called(manifest, tmp_path):
    cnn = manifest["cnn"]
    body = ('[[run]]\ncommand = "naive-vs-default"\noptions = ["nchw44", "ioc16"]\n'
            '[[config]]\nname = "default"\n[[config]]\nname = "fast"\nflags = ["--fast-run"]\n')
    first = expand(load_manifest(write_manifest(tmp_path / "a.toml", [cnn], body)))
    assert [(t.options, t.config, t.flags) for t in first] == [
        (("nchw44",), "default", ()), (("ioc16",), "default", ()),
        (("nchw44",), "fast", ("--fast-run",)), (("ioc16",), "fast", ("--fast-run",))]
    # the same files under other names and paths: the same tasks
    copy = tmp_path / "copy"
    shutil.copytree(cnn.model.parent, copy)
    text = (tmp_path / "a.toml").read_text().replace(str(cnn.model.parent), str(copy)).replace('name = "cnn"',
                                                                                                 'name = "net"')
    (tmp_path / "b.toml").write_text(text.replace('name = "fast"', 'name = "profiled"'))
    assert [t.id for t in expand(load_manifest(tmp_path / "b.toml"))] == [t.id for t in first]
    # other input bytes: other tasks
    data = copy / "data.npy"
    raw = bytearray(data.read_bytes())
    raw[-1] ^= 1
    data.write_bytes(bytes(raw))
    assert not {t.id for t in expand(load_manifest(tmp_path / "b.toml"))} & {t.id for t in first}


def test_devices_builds_and_what_runs_where(manifest, tmp_path):
    body = """
[[run]]
command = "naive-vs-default"
[[run]]
command = "mixed"
[[build]]
name = "bundled"
[[build]]
name = "board"
path = "/opt/mge/load_and_run"
devices = ["board"]
[[device]]
name = "local"
[[device]]
name = "board"
remote = "ssh:me@board.lan:2222"
"""
    tasks = expand(load_manifest(write_manifest(tmp_path / "zoo.toml", [manifest["cnn"]], body)))
    # the bundled build, mixed and quant stay on the worker's machine; a build's devices limit it
    assert [(t.command, t.build, t.device, t.resource) for t in tasks] == [
        ("naive-vs-default", "bundled", "local", None),
        ("naive-vs-default", "board", "board", "dev-ssh-board.lan-2222"),
        ("mixed", "bundled", "local", None)]
    assert device_resource("adb:192.168.1.5:5555") == "dev-adb-192.168.1.5-5555"


@pytest.mark.parametrize("body, expected", [
    ('[[run]]\ncommand = "sweep"\noptons = ["ioc16"]\n', "'optons' is not a key of a sweep run"),
    ('[[run]]\ncommand = "sweep"\nrepeat = 3\n', "'repeat' is not a key of a sweep run"),
    ('[[run]]\ncommand = "sweeps"\n', "command = 'sweeps': expected naive-vs-default | shake | sweep | mixed | quant"),
    ('[[run]]\ncommand = "sweep"\noptions = ["nchw88x"]\n', "unknown sweep option 'nchw88x'"),
    ('[[run]]\ncommand = "sweep"\nconfigs = ["fast"]\n', "configs names config 'fast', which the manifest does not define"),
    ('[[run]]\ncommand = "mixed"\nconfigs = ["default"]\n', "mixed takes no load_and_run flags, so no configs"),
    ('[[run]]\ncommand = "quant"\n', "quant needs a [[model]] with `float`"),
    ('[[run]]\ncommand = "shake"\n[[config]]\nname = "x"\nflags = ["--bin-io-dump=/tmp"]\n', "conflicts with the dump"),
    ('[[run]]\ncommand = "shake"\n[[device]]\nname = "board"\n', "device 'board' has no remote"),
    ('[[run]]\ncommand = "shake"\n[[device]]\nname = "b"\nremote = "tcp:board"\n', "unknown transport"),
    ('[[run]]\ncommand = "shake"\n[[build]]\nname = "nightly"\n', "build 'nightly' has no path"),
    ('[[run]]\ncommand = "shake"\n[[build]]\nname = "bundled"\n[[build]]\nname = "bundled"\n', "repeats the name"),
    ('[[run]]\ncommand = "shake"\n[[device]]\nname = "local"\n[[device]]\nname = "b"\nremote = "ssh:b"\n'
     '[[build]]\nname = "bundled"\ndevices = ["b"]\n', "no task: its models, builds and devices never meet"),
    ('[[run]]\ncommand = "shake"\n[[runs]]\ncommand = "shake"\n', "unknown key 'runs'"),
    ('[[run]]\ncommand = "shake"\n[zoo]\n', "not a TOML file"),
    ('[[run]]\ncommand = "shake"\n', "retries = -1: expected an integer from 0 to 100"),
    ('[[run]]\ncommand = "shake"\n', "min_history = 0: expected an integer from 1 to 10000"),
])
def test_a_bad_manifest_is_one_line_naming_what_was_expected(manifest, tmp_path, body, expected):
    path = tmp_path / "zoo.toml"
    zoo = "retries = -1\n" if "retries" in expected else "min_history = 0\n" if "min_history" in expected else ""
    write_manifest(path, [manifest["cnn"]], body, zoo=zoo)
    with pytest.raises(UsageError) as info:
        expand(load_manifest(path))
    assert expected in str(info.value) and str(path) in str(info.value) and "\n" not in str(info.value)


def test_a_missing_model_is_named_with_its_table(manifest, tmp_path):
    path = tmp_path / "zoo.toml"
    path.write_text('[[model]]\nname = "gone"\npath = "nowhere/model.mge"\n[[run]]\ncommand = "shake"\n')
    with pytest.raises(UsageError) as info:
        load_manifest(path)
    assert str(info.value) == f"{path}: [[model]] #1: model file {tmp_path / 'nowhere/model.mge'} does not exist"


def test_the_command_refuses_bad_input_before_anything_runs(manifest, tmp_path):
    path = write_manifest(tmp_path / "zoo.toml", [manifest["cnn"]], '[[run]]\ncommand = "sweep"\nmodel = "x"\n')
    bad = zoo_cli([path, "--store", tmp_path / "r.db", "--out", tmp_path / "out"])
    assert bad.returncode == 2 and bad.stderr.strip().splitlines() == [
        f"Error: {path}: [[run]] #1: 'model' is not a key of a sweep run (its keys: command, configs, devices, local, "
        "models, options, timeout)"]
    good = write_manifest(tmp_path / "ok.toml", [manifest["cnn"]], '[[run]]\ncommand = "sweep"\n')
    unreachable = zoo_cli([good, "--store", tmp_path / "r.db", "--out", tmp_path / "out", "--scheduler",
                           "tcp://127.0.0.1:9", "--connect-timeout", "1"])
    assert unreachable.returncode == 3, unreachable.stderr
    lines = unreachable.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("Error: scheduler tcp://127.0.0.1:9: cannot reach it within 1 s")
    assert not (tmp_path / "out").exists(), "nothing ran: no zoo folder"
