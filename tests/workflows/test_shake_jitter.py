"""shake explains jitter per operator (issue 22), on real runs of the cases: the algorithm of
every operator in every fast-run run, a cause per root and per diverging var, local error
like with like, the disk bound, and the threads, batch-position and observer modes.

Whether a CPU jitters is its own business: where it gives none, the tests check the report
says so (never which kernel this CPU picked)."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from conftest import ROOT
from lar_prec.dumps.folder import DumpFolder
from lar_prec.workflows.shake.causes import CAUSES

pytestmark = pytest.mark.megengine

ALGO, SAME, THREADS, BATCH, INHERITED = ("algorithm differs between runs", "same algorithm, result differs",
                                         "thread count", "batch position", "inherited from root")


def shake(case, out: Path, *args: str, env=None) -> "tuple[subprocess.CompletedProcess, dict]":
    argv = [sys.executable, "-m", "lar_prec", "shake", str(case.model), "--input", ";".join(case.input_specs()),
            "--out", str(out), "--json", str(out) + ".json", *args]
    proc = subprocess.run(argv, cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT), **(env or {})},
                          capture_output=True, text=True, timeout=900)
    assert proc.returncode in (0, 1), proc.stdout[-2000:] + proc.stderr[-3000:]
    rep = json.loads(Path(str(out) + ".json").read_text())
    assert rep["summary"]["exit_code"] == proc.returncode
    return proc, rep


def check_causes(rep: dict) -> None:
    """Every root and every var that is not ok has a cause of the vocabulary; an inherited one
    names a var upstream that is a root or a root's descendant, and a root's cause is a root's."""
    assert rep["cause_vocabulary"] == list(CAUSES)
    by_id = {v["id"]: v for v in rep["vars"]}
    dump_roots = {r["id"] for r in rep["roots"]}
    for r in rep["roots"]:
        assert r["cause"] in CAUSES and r["cause"] != INHERITED and r["cause_text"].startswith(r["cause"])
    for v in rep["vars"]:
        if v["status"] == "ok":
            assert "cause" not in v
            continue
        assert v["cause"] in CAUSES, v
        if v["id"] in dump_roots:
            assert v["cause"] != INHERITED
        elif v["cause"] == INHERITED:
            assert v["cause_root"] in dump_roots
            # the root is upstream: follow inputs back
            seen, todo = set(), [v["id"]]
            while todo:
                u = todo.pop()
                if u in seen or u not in by_id:
                    continue
                seen.add(u)
                todo += by_id[u]["inputs"]
            assert v["cause_root"] in seen
    if rep["roots"]:
        assert rep["cause"].split(" (")[0].split(";")[0] in CAUSES


def check_results(rep: dict, labels: list) -> None:
    """Distinct results per var: every run in exactly one group, run 1's group first with no
    error, and the runs that differ from run 1 are counted in runs_differing."""
    for v in rep["vars"]:
        assert v["n_results"] >= 1
        if v["n_results"] == 1:
            assert "results" not in v and v["runs_differing"] == 0
            continue
        groups = v["results"]
        assert len(groups) == v["n_results"]
        runs = [lbl for g in groups for lbl in g["runs"]]
        assert sorted(runs) == sorted(labels) and groups[0]["runs"][0] == labels[0]
        assert groups[0]["max_err"] == 0
        assert all(g["max_err"] is None or g["max_err"] > 0 for g in groups[1:]) or v["status"] != "divergent"
        assert v["runs_differing"] == len(labels) - len(groups[0]["runs"])


@pytest.mark.slow
def test_fast_run_jitter_names_each_roots_algorithm_in_every_run(manifest, tmp_path):
    case = manifest["fastrun_shake"]
    proc, rep = shake(case, tmp_path / "s", "--config", "fast-run", "--repeat", "3", "-q")
    labels = ["fast-run-1", "fast-run-2", "fast-run-3"]
    choice = rep["algorithm_choice"]
    assert choice["known"] and sorted(choice["caches"]) == labels
    # every operator with an algorithm choice has one per run, read from that run's own cache
    convs = [v for v in rep["vars"] if v["opr_type"] == "ConvolutionForward"]
    assert convs and all(sorted(v["algorithms"]) == labels for v in convs)
    for v in convs:
        assert v.get("algorithm_differs", False) == (len(set(v["algorithms"].values())) > 1)
    check_results(rep, labels)
    if proc.returncode == 0:
        assert rep["verdict"].startswith("no jitter") and rep["roots"] == []
        pytest.skip("fast-run gave the same result in all 3 runs on this machine (the report says so)")
    check_causes(rep)
    for r in rep["roots"]:
        v = next(x for x in rep["vars"] if x["id"] == r["id"])
        assert r["algorithms"] == v["algorithms"]
        differing = [lbl for g in v["results"][1:] for lbl in g["runs"]]
        if r["cause"] == ALGO:
            base = v["algorithms"]["fast-run-1"]
            assert any(v["algorithms"][lbl] != base for lbl in differing)
            for lbl in labels:  # the detail names every run's algorithm
                assert lbl in r["cause_detail"] and v["algorithms"][lbl] in r["cause_detail"]
        else:
            assert r["cause"] == SAME and all(v["algorithms"][lbl] == v["algorithms"]["fast-run-1"] for lbl in differing)
            assert [s["step"] for s in rep["explanation"]][:1] == ["algorithms pinned by --fast-run-algo-policy"]
    # local error compared like with like: each measured run under its own algorithm cache
    loc = rep["local"]
    assert loc["measured"] and loc["runs_measured"] and set(loc["runs_measured"]) <= set(labels[1:])
    for run in loc["runs"]:
        cache = run["argv"][run["argv"].index("--fast-run-algo-policy") + 1]
        assert Path(cache).name.endswith(".local.cache")
    agreement = loc["agreement"]
    assert isinstance(agreement["agree"], bool) and agreement["why"]
    if not agreement["agree"]:
        assert rep["notes"][0] == agreement["why"]  # said in one line, first
    # the roots named by the dumps have local error in a run that differs there, unless said why
    for r in rep["roots"]:
        v = next(x for x in rep["vars"] if x["id"] == r["id"])
        if agreement["agree"]:
            assert any(e for e in v["local_by_run"].values())
    # repro folders only for the jitter's roots (the most likely local root when local error
    # names none of them), not for every operator whose bits wobble; "inherited" names a source
    repros = sorted(int(p.name.split("-", 1)[1]) for p in (tmp_path / "s").rglob("repro-*") if p.is_dir())
    dump_roots = {r["id"] for r in rep["roots"]}
    assert set(repros) <= dump_roots or len(repros) <= 1, (repros, dump_roots)
    assert not [v["name"] for v in rep["vars"] if v.get("label") == "inherited" and not v.get("inherited_from")]
    # the terminal and the runs-by-operator table say it too
    assert "root #1 cause: " + rep["roots"][0]["cause"] in proc.stdout
    assert "Runs by operator" in proc.stdout


def test_threads_mode_against_one_thread(manifest, tmp_path):
    proc, rep = shake(manifest["cnn"], tmp_path / "t", "--threads", "2,1", "-q")
    labels = ["threads-1", "threads-1-again", "threads-2"]
    assert [r["label"] for r in rep["shake_runs"]] == labels and rep["mode"] == "threads"
    for r in rep["runs"]:
        n = r["label"].split("-")[1]
        assert r["argv"][r["argv"].index("--multithread") + 1] == n
    check_results(rep, labels)
    if proc.returncode == 0:
        assert rep["verdict"].startswith("no jitter: default runs under 1, 2 threads")
        assert rep["roots"] == [] and all(v["n_results"] == 1 for v in rep["vars"])
        return
    check_causes(rep)
    for r in rep["roots"]:
        v = next(x for x in rep["vars"] if x["id"] == r["id"])
        again_differs = any("threads-1-again" in g["runs"] for g in v["results"][1:])
        assert r["cause"] == (SAME if again_differs else THREADS)


def test_batch_positions_cut_the_sample_out_of_each_batch(manifest, tmp_path):
    case = manifest["cnn"]
    proc, rep = shake(case, tmp_path / "b", "--batch-positions", "3", "--keep-all", "-q")
    labels = ["batch-1", "batch-1-again", "batch-3-at-0", "batch-3-at-1", "batch-3-at-2"]
    assert [r["label"] for r in rep["shake_runs"]] == labels and rep["mode"] == "batch"
    sample = np.load(case.inputs[0][1])
    base = DumpFolder(tmp_path / "b" / "batch-1" / "dump")
    for k in range(3):
        run = tmp_path / "b" / f"batch-3-at-{k}"
        fed = json.loads((run / "run.json").read_text())["inputs"][0]
        batch = np.load(fed["path"])
        assert batch.shape == (3, *sample.shape[1:]) and np.array_equal(batch[k:k + 1], sample)
        assert not any(np.array_equal(batch[j:j + 1], sample) for j in range(3) if j != k)
        # --keep-all keeps the batch run's whole dump next to the sample's slice of it
        whole, cut = DumpFolder(run / "dump"), DumpFolder(run / "sample-slice")
        for vid in cut.files():
            a, b = np.asarray(cut[vid].array()), np.asarray(whole[vid].array())
            assert a.shape == tuple(base[vid].shape)
            assert np.array_equal(a, b if b.shape == a.shape else b[k:k + 1])
    check_results(rep, labels)
    if proc.returncode == 0:
        assert rep["verdict"].startswith("no jitter") and rep["roots"] == []
        return
    check_causes(rep)
    for r in rep["roots"]:
        v = next(x for x in rep["vars"] if x["id"] == r["id"])
        again_differs = any("batch-1-again" in g["runs"] for g in v["results"][1:])
        assert r["cause"] == (SAME if again_differs else BATCH)
        if r["cause"] == BATCH:
            assert "position" in r["cause_detail"]
    assert not rep["local"]["measured"] and "batch-position" in rep["local"]["why"]


def test_repeats_keep_only_what_differs_from_run_1(manifest, tmp_path):
    case = manifest["resnet"]
    one = subprocess.run([sys.executable, "-m", "lar_prec", "run", str(case.model), "--config", "default",
                          "--input", ";".join(case.input_specs()), "--out", str(tmp_path / "one")],
                         cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)}, capture_output=True, text=True)
    assert one.returncode == 0, one.stderr
    proc, rep = shake(case, tmp_path / "s", "--repeat", "5", "-q", "--no-local")
    labels = [f"default-{k}" for k in range(1, 6)]
    base = DumpFolder(tmp_path / "s" / "default-1" / "dump")
    assert len(base.files()) == len(rep["vars"])
    for lbl in labels[1:]:
        pruned = json.loads((tmp_path / "s" / lbl / "pruned.json").read_text())
        kept = set(DumpFolder(tmp_path / "s" / lbl / "dump").files())
        assert sorted(kept) == pruned["kept"] and len(pruned["digests"]) == len(base.files())
        differing = {v["id"] for v in rep["vars"] if any(lbl in g["runs"] for g in (v.get("results") or [])[1:])}
        # a result an earlier run kept already is not kept twice
        assert kept | {int(k) for k in pruned["same_as"]} == differing
        assert all(Path(p).is_file() for p in pruned["same_as"].values())
    check_results(rep, labels)

    def size(p: Path) -> int:
        return sum(f.stat().st_blocks * 512 for f in p.rglob("*") if f.is_file() and not f.is_symlink())

    assert size(tmp_path / "s") < 3 * size(tmp_path / "one")
    assert not (tmp_path / "s" / ".views").exists()
    # --keep-all keeps every dump whole
    _, rep2 = shake(case, tmp_path / "k", "--repeat", "2", "-q", "--no-local", "--keep-all")
    assert len(DumpFolder(tmp_path / "k" / "default-2" / "dump").files()) == len(rep2["vars"])
    assert not (tmp_path / "k" / "default-2" / "pruned.json").exists() and rep2["storage"]["keep_all"]


def test_observer_check_finds_outputs_equal_without_the_dump(manifest, tmp_path):
    proc, rep = shake(manifest["cnn"], tmp_path / "o", "--repeat", "2", "--observer", "-q", "--no-local")
    obs = rep["observer"]
    run = next(r for r in rep["runs"] if r["label"] == "observer")
    assert "--bin-out-dump" in run["argv"] and "--bin-io-dump" not in run["argv"]
    names = {o["name"] for o in obs["outputs"]}
    outputs = {v["name"] for v in rep["vars"] if not any(v["id"] in u["inputs"] for u in rep["vars"])}
    assert names and names <= outputs
    assert obs["checked"] and obs["differs"] == (not all(o["equal"] for o in obs["outputs"]))
    if not obs["differs"]:
        assert "does not perturb" in obs["summary"] and not rep["verdict"].startswith("the dump perturbs")


def test_a_dump_that_perturbs_the_run_is_said_first(manifest, tmp_path):
    """A binary whose outputs change when nothing dumps every var (hand-made: the bundled
    runner, with the low bit of each output flipped when it dumps outputs only)."""
    lar = tmp_path / "perturbed_lar"
    lar.write_text(f"""#!{sys.executable}
import os, subprocess, sys
rc = subprocess.call([{sys.executable!r}, "-m", "lar_prec.lar", *sys.argv[1:]])
if rc == 0 and "--bin-out-dump" in sys.argv:
    from lar_prec.dumps.binary import read_binary_dump
    out = sys.argv[sys.argv.index("--bin-out-dump") + 1]
    for name in os.listdir(out):
        d = read_binary_dump(os.path.join(out, name))
        with open(os.path.join(out, name), "r+b") as fh:
            fh.seek(d.data_offset)
            b = fh.read(1)
            fh.seek(d.data_offset)
            fh.write(bytes([b[0] ^ 1]))
sys.exit(rc)
""")
    lar.chmod(0o755)
    proc, rep = shake(manifest["cnn"], tmp_path / "p", "--repeat", "2", "--observer", "-q", "--no-local",
                      "--lar", str(lar))
    obs = rep["observer"]
    assert obs["differs"] and not any(o["equal"] for o in obs["outputs"])
    assert rep["verdict"].startswith("the dump perturbs the run")
    assert rep["notes"][0] == obs["summary"]
    assert rep["cause"].startswith("the dump perturbs the run")
    assert proc.stdout.index("Observer check: the dump perturbs") < proc.stdout.index("Roots") \
        if "Roots" in proc.stdout else "Observer check: the dump perturbs" in proc.stdout


def test_an_observer_run_that_fails_is_a_note_not_a_failed_shake(manifest, lar_dump, tmp_path):
    """A load_and_run that refuses --bin-out-dump (the real one in lite mode throws)."""
    env = {"FAKE_LAR_SOURCE_DUMP": str(lar_dump("cnn", "default")), "FAKE_LAR_MODE_IF_FLAG": "--bin-out-dump=exit1"}
    proc, rep = shake(manifest["cnn"], tmp_path / "f", "--repeat", "2", "--observer", "-q", "--no-local",
                      "--lar", str(ROOT / "tests" / "fake_lar.py"), env=env)
    assert proc.returncode == 0
    obs = rep["observer"]
    assert not obs["checked"] and obs["summary"].startswith("observer check could not run")
    assert "Observer check: observer check could not run" in proc.stdout


@pytest.mark.parametrize("args, says", [
    (["--threads", "1,x"], "--threads '1,x'"),
    (["--threads", "1"], "at least one count besides 1"),
    (["--threads", "2", "--batch-positions", "2"], "give one of them"),
    (["--threads", "2", "--", "--multithread", "2"], "leave it out"),
])
def test_bad_mode_options_are_usage_errors_before_any_run(manifest, tmp_path, args, says):
    case = manifest["cnn"]
    proc = subprocess.run([sys.executable, "-m", "lar_prec", "shake", str(case.model), "--input",
                           ";".join(case.input_specs()), "--out", str(tmp_path / "x"), "-q", *args],
                          cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)}, capture_output=True, text=True)
    assert proc.returncode == 2 and proc.stderr.startswith("Error: ") and says in proc.stderr, proc.stderr
    assert not (tmp_path / "x").exists()
