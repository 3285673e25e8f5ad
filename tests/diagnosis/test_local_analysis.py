"""Local error wired into the CLI (issue 14): real runs of real cases, faults injected by
rewriting the model (``local.scale_constant``), so the error really propagates.

The reference (A) is always the naive run of the unchanged case; the test side (B) is the
faulty model under the default kernels: ``lar-prec compare A B --model FAULTY``.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import ROOT, run_lar
from proc_helpers import user_lar
from lar_prec.diagnosis.local import scale_constant

CONV = "c2.Convolution"


def cli(*args: str, cwd: Path = ROOT, timeout: float = 600, env=None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "lar_prec", *map(str, args)], cwd=cwd, capture_output=True,
                          text=True, timeout=timeout, env={**os.environ, **env} if env else None)


@pytest.fixture(scope="module")
def faulty(manifest, tmp_path_factory):
    """``faulty(size)`` -> (model, default dump) of cnn with c2.weight x (1 + size)."""
    cache = {}

    def make(size: float):
        if size not in cache:
            base = tmp_path_factory.mktemp(f"cnn-fault-{size:g}")
            model = scale_constant(manifest["cnn"].model, "c2.weight", 1 + size, base / "faulty.mge")
            run_lar(model, manifest["cnn"].input_specs(), base / "dump")
            cache[size] = (model, base / "dump")
        return cache[size]

    return make


def _compare(lar_dump, model, dump, out, *extra):
    json_path = Path(out).with_suffix(".json")
    proc = cli("compare", lar_dump("cnn", "naive"), dump, "--model", model, "--out", out, "--json", json_path, *extra)
    assert proc.returncode in (0, 1), proc.stderr
    return proc, json.loads(json_path.read_text())


def test_conv_fault_is_the_local_root_downstream_inherited_and_the_repro_reproduces(faulty, lar_dump, tmp_path):
    model, dump = faulty(1e-4)
    proc, rep = _compare(lar_dump, model, dump, tmp_path / "a")
    assert proc.returncode == 1
    root = rep["roots"][0]
    assert root["name"] == CONV and root["rule"] == "local"
    assert root["local_err"] > root["floor"] > 0 and root["margin"] == pytest.approx(root["local_err"] / root["floor"])
    assert len(rep["roots"]) == 1, rep["roots"]
    by_name = {v["name"]: v for v in rep["vars"]}
    conv = by_name[CONV]
    assert conv["label"] == "root" and conv["local_err"] > 5e-5
    # everything after the conv carries its error but makes none of it
    for name in ("RELU[1]", "Pooling[1]", "fc.ADD", "Softmax"):
        assert by_name[name]["label"] == "inherited", by_name[name]
        assert by_name[name]["inherited_from"] == [conv["id"]]
        assert by_name[name]["status"] == "divergent"
    # both columns in the JSON: accumulated max_err and local local_err, with floor and label
    assert all({"local_err", "floor", "label", "inherited_from"} <= set(v) for v in rep["vars"]
               if v["opr_type"] in ("ConvolutionForward", "Elemwise", "PoolingForward"))
    assert rep["local"]["measured"] and rep["local"]["roots_by"] == "local"
    assert rep["local"]["not_isolated"] == []
    # the terminal table shows the local column
    assert "local" in proc.stdout and "inherited <- " in proc.stdout
    repro = tmp_path / "a" / f"repro-{conv['id']}"
    assert rep["local"]["repros"] == [str(repro)]
    assert (repro / "model.mge").is_file() and (repro / "README.md").is_file()
    replay = cli("replay", repro)
    assert replay.returncode == 1, replay.stdout + replay.stderr
    assert replay.stdout.startswith("reproduced")


def test_a_fault_inside_the_band_is_rooted_by_local_error(faulty, lar_dump, tmp_path):
    # 5e-6 of the conv weight: inside the 32..80 ulp band of the dump-only rule
    model, dump = faulty(5e-6)
    proc, rep = _compare(lar_dump, model, dump, tmp_path / "a")
    assert proc.returncode == 1, proc.stdout
    assert [r["name"] for r in rep["roots"]] == [CONV]
    conv = next(v for v in rep["vars"] if v["name"] == CONV)
    assert conv["status"] == "divergent" and conv["label"] == "root"
    assert rep["diverged"] and rep["counts"]["divergent"] == rep["summary"]["by_status"]["divergent"] >= 1


def test_threshold_band_and_no_local_keep_the_dump_only_rule(faulty, lar_dump, tmp_path):
    model, dump = faulty(1e-4)
    _, band = _compare(lar_dump, model, dump, tmp_path / "band", "--threshold", "band")
    _, off = _compare(lar_dump, model, dump, tmp_path / "off", "--no-local")
    plain = cli("compare", lar_dump("cnn", "naive"), dump, "--json", tmp_path / "plain.json")
    plain_rep = json.loads((tmp_path / "plain.json").read_text())
    assert [r["id"] for r in band["roots"]] == [r["id"] for r in off["roots"]] == [r["id"] for r in plain_rep["roots"]]
    assert plain.returncode == 1
    assert band["local"]["roots_by"] == "band" and band["local"]["measured"]
    assert "local_err" in next(v for v in band["vars"] if v["name"] == CONV)  # columns still there
    assert off["local"] == {"measured": False, "why": "local error not measured (--no-local)", "roots_by": "band"}
    assert not any("local_err" in v for v in off["vars"])
    assert "local error not measured (--no-local)" in off["notes"]


def test_naive_vs_default_measures_local_error_and_no_local_turns_it_off(manifest, tmp_path):
    case = manifest["cnn"]
    args = ["naive-vs-default", case.model, "--input", ";".join(case.input_specs()), "-q"]
    on = cli(*args, "--out", tmp_path / "on", "--json", tmp_path / "on.json")
    off = cli(*args, "--out", tmp_path / "off", "--json", tmp_path / "off.json", "--no-local")
    rep_on, rep_off = (json.loads((tmp_path / f"{k}.json").read_text()) for k in ("on", "off"))
    assert on.returncode == rep_on["summary"]["exit_code"], on.stderr
    assert off.returncode == rep_off["summary"]["exit_code"], off.stderr
    assert rep_on["local"]["measured"] and rep_on["local"]["config"] == "default"
    convs = [v for v in rep_on["vars"] if v["opr_type"] == "ConvolutionForward"]
    assert convs and all(v["label"] in ("noise", "clean", "inherited") and v["local_err"] is not None for v in convs)
    moves = [v for v in rep_on["vars"] if v["opr_type"] in ("Reshape", "Dimshuffle")]
    assert moves and all(v["local_err"] == 0.0 and v["floor"] == 0.0 for v in moves)
    # the same runs without local error: no local columns, a note why
    assert not rep_off["local"]["measured"] and not any("label" in v for v in rep_off["vars"])
    # clean pair: no local root (a false alarm would name one)
    assert [r for r in rep_on["roots"] if r.get("rule") == "local"] == []
    assert (tmp_path / "on" / "local" / "local.json").is_file()


def _nvd(case, out: Path, *extra, env=None) -> "tuple[subprocess.CompletedProcess, dict]":
    proc = cli("naive-vs-default", case.model, "--input", ";".join(case.input_specs()), "-q", "--out", out,
               "--json", out.with_suffix(".json"), *extra, env=env)
    assert proc.returncode in (0, 1), proc.stderr
    return proc, json.loads(out.with_suffix(".json").read_text())


def test_a_user_load_and_run_measures_local_error_with_that_binary_and_roots_its_fault(manifest, tmp_path):
    # the user's binary computes c2 1e-4 off under its default kernels (naive ones are right)
    lar = user_lar(tmp_path / "my_load_and_run", WRAPPED_LAR_FAULT="c2.weight:1e-4")
    proc, rep = _nvd(manifest["cnn"], tmp_path / "a", "--lar", lar, "--local-checks")
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert rep["local"]["measured"] and rep["local"]["roots_by"] == "local"
    assert [(r["name"], r["rule"]) for r in rep["roots"]] == [(CONV, "local")]
    by_name = {v["name"]: v for v in rep["vars"]}
    assert by_name[CONV]["label"] == "root" and by_name[CONV]["local_err"] > 5e-5
    assert by_name["Softmax"]["label"] == "inherited" and by_name["Softmax"]["inherited_from"] == [by_name[CONV]["id"]]
    # every layerwise run went through the user's binary, with the run's environment and a run.json
    runs = rep["local"]["runs"]
    assert [r["label"] for r in runs] == ["local", "reference-self", "test-fed"]
    assert all(r["argv"][0] == str(lar) and r["load_and_run"] == str(lar) and r["returncode"] == 0 for r in runs)
    rec = json.loads(Path(runs[0]["dir"], "run.json").read_text())
    assert rec["status"] == "ok" and rec["load_and_run"]["version"] == "load_and_run (wrapped) 1.13.0"
    assert rec["env_changes"] == {"MGB_USE_MEGDNN_DBG": None}
    assert json.loads(Path(runs[1]["dir"], "run.json").read_text())["env_changes"] == {"MGB_USE_MEGDNN_DBG": "2"}
    # the checks hold with the user's binary: its naive kernels reproduce the reference, and
    # fed with its own default values the layerwise model reproduces its default run
    assert {c["name"]: c["status"] for c in rep["local"]["checks"]} == {
        "isolation": "pass", "reference_self": "pass", "test_fed": "pass"}
    assert not any("local error" in n and "not" in n for n in rep["notes"])


def test_sweep_with_a_user_load_and_run_measures_local_error_with_that_binary(manifest, tmp_path):
    # the same faulty binary under sweep: each option's layerwise run goes through it too
    lar = user_lar(tmp_path / "my_load_and_run", WRAPPED_LAR_FAULT="c2.weight:1e-4")
    case = manifest["cnn"]
    proc = cli("sweep", case.model, "--input", ";".join(case.input_specs()), "-q", "--options",
               "weight-preprocess,fuse-preprocess", "--speed-runs", "0", "--lar", lar, "--out", tmp_path / "s", "--json", tmp_path / "s.json")
    assert proc.returncode == 1, proc.stdout + proc.stderr
    rep = json.loads((tmp_path / "s.json").read_text())
    assert rep["local"]["measured"] is not False, rep["local"]
    # the binary's default kernels are wrong in every run: the default run's own root, which the
    # options show too (as default, issue 34 #4)
    assert rep["default"]["verdict"] == "diverges" and rep["default"]["root"]["name"] == CONV, rep["default"]
    for o in rep["options"]:
        assert o["local"]["measured"], o["local"]
        assert o["verdict"] == "as_default" and o["root_rule"] == "local" and o["shared_roots"][:1] == [CONV], o
        assert [r["name"] for r in o["local"]["roots"]][:1] == [CONV], o["local"]["roots"]
        run = json.loads(next(Path(o["local"]["dir"]).rglob("run.json")).read_text())
        assert run["argv"][0] == str(lar) and run["status"] == "ok"
        # a repro per root, under the option's flags; it reproduces with the binary that made it
        assert o["local"]["repro_errors"] == [] and len(o["local"]["repros"]) == len(o["local"]["roots"][:3])
        repro = Path(o["local"]["repros"][0])
        rec = json.loads((repro / "repro.json").read_text())
        # an option with another run's bits takes that run's local error and repros (issue 55 #3)
        made_by = {"default": ()}.get(o["local"].get("same_bits_as") or "", o["flags"])
        if o["local"].get("same_bits_as") not in (None, "default"):
            made_by = next(x["flags"] for x in rep["options"] if x["option"] == o["local"]["same_bits_as"])
        assert rec["var"]["name"] == CONV and all(f in rec["test"]["flags"] for f in made_by), rec["test"]
        again = cli("replay", repro, "--lar", lar)
        assert again.returncode == 1 and again.stdout.startswith("reproduced"), again.stdout + again.stderr


def test_a_repro_of_a_user_binarys_fault_replays_with_that_binary(manifest, tmp_path):
    lar = user_lar(tmp_path / "my_load_and_run", WRAPPED_LAR_FAULT="c2.weight:1e-4")
    proc, rep = _nvd(manifest["cnn"], tmp_path / "a", "--lar", lar)
    assert proc.returncode == 1 and [r["name"] for r in rep["roots"]] == [CONV], proc.stderr
    repro = Path(rep["local"]["repros"][0])
    again = cli("replay", repro, "--lar", lar)
    assert again.returncode == 1 and again.stdout.startswith("reproduced"), again.stdout + again.stderr
    # the bundled binary's kernels are right: the divergence is the user binary's, not reproduced here
    bundled = cli("replay", repro)
    assert bundled.returncode == 0 and "differs from the recorded one" in bundled.stdout, bundled.stdout
    missing = cli("replay", repro, "--lar", tmp_path / "nope")
    assert missing.returncode == 2 and "nope" in missing.stderr and "Traceback" not in missing.stderr


def test_compare_model_with_the_binary_b_ran_measures_local_error_with_it(manifest, lar_dump, tmp_path):
    case = manifest["cnn"]
    lar = user_lar(tmp_path / "my_load_and_run", WRAPPED_LAR_FAULT="c2.weight:1e-4")
    b = tmp_path / "b"
    b.mkdir()
    run = subprocess.run([str(lar), case.model, "--input", ";".join(case.input_specs()), "--iter", "1",
                          "--bin-io-dump", str(b)], capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert run.returncode == 0, run.stderr[-1500:]
    a = lar_dump("cnn", "naive")
    proc = cli("compare", a, b, "--model", case.model, "--lar", lar, "--out", tmp_path / "c", "--json", tmp_path / "c.json")
    assert proc.returncode == 1, proc.stdout + proc.stderr
    rep = json.loads((tmp_path / "c.json").read_text())
    assert rep["local"]["measured"] and [(r["name"], r["rule"]) for r in rep["roots"]] == [(CONV, "local")]
    assert all(r["argv"][0] == str(lar) for r in rep["local"]["runs"])
    # the bundled binary computes c2 right: the same dumps then show the fault as inherited from nothing
    bundled = cli("compare", a, b, "--model", case.model, "--out", tmp_path / "d", "--json", tmp_path / "d.json")
    rep_b = json.loads((tmp_path / "d.json").read_text())
    assert bundled.returncode in (0, 1) and CONV not in [r["name"] for r in rep_b["roots"]]
    # --lar is for the layerwise run: without --model, or a binary that is not there, is exit 2
    for argv in (("--lar", lar), ("--model", case.model, "--lar", tmp_path / "nope")):
        bad = cli("compare", a, b, *argv, "--out", tmp_path / "e")
        assert bad.returncode == 2 and bad.stderr.startswith("Error: ") and "Traceback" not in bad.stderr, bad.stderr


def test_a_user_load_and_run_that_cannot_run_the_layerwise_model_leaves_a_note_and_the_usual_exit(manifest, tmp_path):
    lar = user_lar(tmp_path / "old_load_and_run", WRAPPED_LAR_FAULT="c2.weight:1e-4", WRAPPED_LAR_REFUSE="layerwise")
    proc, rep = _nvd(manifest["cnn"], tmp_path / "a", "--lar", lar)
    off_proc, off = _nvd(manifest["cnn"], tmp_path / "off", "--lar", lar, "--no-local")
    # the exit code and roots of the analysis without local error
    assert proc.returncode == off_proc.returncode == 1, proc.stderr
    assert [r["id"] for r in rep["roots"]] == [r["id"] for r in off["roots"]] and rep["roots"]
    assert "Traceback" not in proc.stderr
    why = rep["local"]["why"]
    assert not rep["local"]["measured"] and why.startswith(f"local error could not be measured with {lar}")
    assert "unsupported model format" in why and why in rep["notes"]
    assert not any("local_err" in v for v in rep["vars"])
    # the failed layerwise run kept its folder and run.json, like any failed run
    rec = json.loads((tmp_path / "a" / "local" / "local" / "run.json").read_text())
    assert rec["status"] == "failed" and rec["returncode"] == 1 and rec["argv"][0] == str(lar)


def test_replay_of_a_folder_that_is_not_a_repro_is_exit_2(tmp_path):
    proc = cli("replay", tmp_path)
    assert proc.returncode == 2 and proc.stderr.startswith("Error: ") and "repro.json" in proc.stderr
    assert "Traceback" not in proc.stderr


def test_compare_model_that_does_not_exist_is_exit_2(lar_dump, tmp_path):
    d = lar_dump("cnn", "naive")
    proc = cli("compare", d, d, "--model", tmp_path / "nope.mge")
    assert proc.returncode == 2 and "nope.mge" in proc.stderr and "Traceback" not in proc.stderr


def test_shake_without_jitter_says_local_error_was_not_needed(manifest, tmp_path):
    case = manifest["cnn"]
    proc = cli("shake", case.model, "--input", ";".join(case.input_specs()), "-q", "-n", "2", "--out", tmp_path / "a",
               "--json", tmp_path / "a.json")
    rep = json.loads((tmp_path / "a.json").read_text())
    assert proc.returncode == rep["summary"]["exit_code"], proc.stderr
    if rep["diverged"]:  # default kernels jittered on this machine: then local error was measured
        assert rep["local"]["measured"] and all("label" in v for v in rep["vars"] if v["opr_type"] == "ConvolutionForward")
    else:
        assert rep["local"] == {"measured": False, "why": "local error not measured: no jitter", "roots_by": "fixed"}


def test_shake_with_a_user_load_and_run_measures_local_error_with_that_binary(manifest, tmp_path):
    # the user's binary: c2's default kernel jitters from process to process, unless --reproducible
    # (its k-th process jitters by (1 + k) x 1e-5: the layerwise run's output differs from run
    # 1's by 1e-5 or more, never by a chance near zero)
    lar = user_lar(tmp_path / "my_load_and_run", WRAPPED_LAR_JITTER="c2.weight:1e-5", WRAPPED_LAR_JITTER_DIR=str(tmp_path))
    case = manifest["cnn"]
    proc = cli("shake", case.model, "--input", ";".join(case.input_specs()), "-q", "-n", "2", "--lar", lar,
               "--out", tmp_path / "s", "--json", tmp_path / "s.json")
    assert proc.returncode == 1, proc.stdout + proc.stderr
    rep = json.loads((tmp_path / "s.json").read_text())
    assert rep["cause"] == "same algorithm, result differs"
    assert "--reproducible runs agree" in rep["roots"][0]["cause_detail"]
    assert rep["local"]["measured"], rep["local"]
    by_name = {v["name"]: v for v in rep["vars"]}
    # made in c2 alone (run once more by the user's binary on run 1's inputs), carried downstream
    assert by_name[CONV]["label"] == "root" and by_name[CONV]["local_err"] > 0
    assert by_name["c1.Convolution"]["local_err"] == 0.0
    assert by_name["Softmax"]["label"] == "inherited" and by_name["Softmax"]["inherited_from"] == [by_name[CONV]["id"]]
    assert [r["argv"][0] for r in rep["local"]["runs"]] == [str(lar)]


def test_a_layerwise_run_past_the_timeout_is_killed_with_its_group_and_leaves_a_note(manifest, tmp_path):
    from proc_helpers import wait_gone

    pid = tmp_path / "hang.pid"
    lar = user_lar(tmp_path / "my_load_and_run", WRAPPED_LAR_HANG="layerwise", WRAPPED_LAR_HANG_PID=str(pid))
    # the stand-in sleeps (no CPU): with the CPU watch on it would be `stalled`; this is about the timeout
    proc, rep = _nvd(manifest["cnn"], tmp_path / "a", "--lar", lar, "--timeout", "15", env={"LAR_PREC_STALL_AFTER": "0"})
    assert proc.returncode == rep["summary"]["exit_code"], proc.stderr
    assert not rep["local"]["measured"] and "RunTimeout" in rep["local"]["why"] and "15 s" in rep["local"]["why"]
    assert wait_gone(int(pid.read_text()), 5), "the layerwise run's child survived its timeout"
    rec = json.loads((tmp_path / "a" / "local" / "local" / "run.json").read_text())
    assert rec["status"] == "timeout" and rec["timeout"] == 15


def test_ctrl_c_during_the_layerwise_run_kills_it_and_exits_130(manifest, tmp_path):
    import os

    from proc_helpers import ctrl_c, wait_gone

    pid = tmp_path / "hang.pid"
    lar = user_lar(tmp_path / "my_load_and_run", WRAPPED_LAR_HANG="layerwise", WRAPPED_LAR_HANG_PID=str(pid))
    case = manifest["cnn"]
    out = tmp_path / "a"
    rc, err, _ = ctrl_c([sys.executable, "-m", "lar_prec", "naive-vs-default", str(case.model), "--input",
                         ";".join(case.input_specs()), "-q", "--out", str(out), "--lar", str(lar)],
                        {**os.environ, "LAR_PREC_STALL_AFTER": "0"}, pid)  # the stand-in sleeps: no CPU watch
    assert rc == 130, err
    assert "interrupted while measuring local error" in err and "Traceback" not in err
    assert wait_gone(int(pid.read_text()), 5), "the layerwise run's child survived Ctrl-C"
    assert json.loads((out / "local" / "local" / "run.json").read_text())["status"] == "interrupted"


def test_local_columns_follow_the_reference_dump_ids_of_a_binary_that_numbers_vars_differently(manifest, tmp_path):
    # a real load_and_run in MDL mode may number vars unlike the graph MegEngine loads in
    # Python for the build: the local error of each operator must land on its own var
    lar = user_lar(tmp_path / "my_load_and_run", WRAPPED_LAR_FAULT="c2.weight:1e-4", WRAPPED_LAR_RENUMBER="1000")
    proc, rep = _nvd(manifest["cnn"], tmp_path / "a", "--lar", lar)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    by_name = {v["name"]: v for v in rep["vars"]}
    conv = by_name[CONV]
    assert conv["id"] >= 1000 and rep["local"]["measured"]
    assert [(r["id"], r["name"], r["rule"]) for r in rep["roots"]] == [(conv["id"], CONV, "local")]
    assert conv["label"] == "root" and conv["local_err"] > 5e-5
    assert by_name["Softmax"]["label"] == "inherited" and by_name["Softmax"]["inherited_from"] == [conv["id"]]
    moves = [v for v in rep["vars"] if v["opr_type"] in ("Reshape", "Dimshuffle")]
    assert moves and all(v["local_err"] == 0.0 for v in moves)
    # its repro folder carries the report's id, as the root does
    assert [Path(d).name for d in rep["local"]["repros"]] == [f"repro-{conv['id']}"]
