"""load_and_run's optimisation options in the bundled load_and_run, on real runs of the cases.

Every option runs in its own fresh process with a timeout (some options hang or crash on some
CPUs with the default kernels: that is reported, never fatal). The plain graph and each
option's rewritten graph are paired by name (lar_prec.compare.namepair), tensors are brought back to
NCHW (lar_prec.compare.relayout), and every pair is checked by value: a false pair would show as a
large difference, so "zero false pairs" is asserted by the values themselves.

The naive kernels (MGB_USE_MEGDNN_DBG=2) run every option that loads, on every CPU, so the
pairing matrix uses them; the options that changed nothing in the reference measurements are
also checked with the default kernels against the plain default run.
"""
from __future__ import annotations

import os
import subprocess
import tempfile
import sys
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Dict, Optional, Tuple

import numpy as np
import pytest

from lar_prec.graph import reach
from lar_prec.lar.flags import EXIT_FAILURE, parse_options
from lar_prec.run.proc import kill_group, wait_watched
from lar_prec.lar.graphopts import rewritten_model_path, rewritten_models
from lar_prec.errors import UsageError
from lar_prec.dumps.folder import DumpFolder
from lar_prec.compare.namepair import pair_by_name
from lar_prec.compare.relayout import OPTION_KIND, to_plain

ROOT = Path(__file__).resolve().parents[2]
NAIVE = {"MGB_USE_MEGDNN_DBG": "2"}
TIMEOUT = 90  # seconds per run; a hang is killed with its process group and reported

# option flags -> what the option does to values (tolerance class)
LAYOUTS = ("enable-nchw44", "enable-nchw88", "enable-nhwcd4", "enable-nchw4", "enable-nchw32",
           "enable-nchw64", "enable-nchw44-dot", "enable-chwn4")
FP16 = ("enable-ioc16", "enable-io16xc32")
FUSION = ("enable-fuse-conv-bias-nonlinearity", "enable-fuse-conv-bias-with-z", "optimize-for-inference",
          "fuse-grain")
UNCHANGED = ("weight-preprocess", "enable-fuse-preprocess", "const-shape", "record-comp-seq")
RECORD2 = ("record-comp-seq2", "no-sanity-check")
GLOBAL_LAYOUT = ("layout-transform=cpu",)
ALL_OPTIONS: Tuple[Tuple[str, ...], ...] = (tuple((o,) for o in LAYOUTS + FP16 + FUSION + UNCHANGED)
                                            + (RECORD2, GLOBAL_LAYOUT))

# MegEngine's error metric: |a-b| / max(|a|, |b|, 1)
TOL_F32 = 1e-5
# fp16 rewrites differ from the float32 graph by 1e-4 .. 5e-3 (reference section 4), more where fp16
# accumulates (2e-2 on attention's batched matmul under ioc16); a false pair differs by O(1) and
# points another way, which the cosine catches.
TOL_F16 = 5e-2
MIN_COSINE_F16 = 0.999


@dataclass(frozen=True)
class Outcome:
    """One run of the bundled load_and_run: ``status`` ok | failed | crashed | hung."""

    status: str
    dump: Path
    stderr: str
    returncode: Optional[int]

    @property
    def rewritten(self) -> Optional[Tuple[str, str]]:
        found = rewritten_models(self.stderr)
        return found[-1] if found else None


def run_option(case, flags: Tuple[str, ...], out: Path, env: Dict[str, str], timeout: float = TIMEOUT) -> Outcome:
    """Run one case under ``flags`` into ``out``; a hang is killed (whole process group), and a
    run that uses no CPU is seen dead in seconds by the runner's own watch (some options
    deadlock in MegEngine's JIT on some CPUs), not waited for until the timeout."""
    argv = [sys.executable, "-m", "lar_prec.lar", str(case.model), "--input", ";".join(case.input_specs()),
            "--iter", "1", "--warmup-iter", "0", "--bin-io-dump", str(out), *(f"--{f}" for f in flags)]
    full_env = {k: v for k, v in os.environ.items() if k not in ("MGB_USE_MEGDNN_DBG", "MGB_DUMP_INPUT")}
    full_env.update(env)
    err_file = out.parent / (out.name + ".stderr")
    with open(err_file, "w") as ef:
        proc = subprocess.Popen(argv, cwd=ROOT, env=full_env, stdout=subprocess.DEVNULL, stderr=ef, text=True,
                                start_new_session=True)
        how = wait_watched(proc, timeout)
        if how != "exited":
            kill_group(proc)
    err = err_file.read_text(errors="replace")
    if how != "exited":
        return Outcome("hung", out, err, None)
    if proc.returncode == 0:
        return Outcome("ok", out, err, 0)
    if proc.returncode == EXIT_FAILURE and "load_and_run: error: " in err:
        return Outcome("failed", out, err, 1)
    return Outcome("crashed", out, err, proc.returncode)


@pytest.fixture(scope="session")
def option_run(manifest, tmp_path_factory):
    """``option_run(case, flags=(), naive=True)`` -> Outcome, cached for the session."""
    cache: Dict[tuple, Outcome] = {}
    base = tmp_path_factory.mktemp("option_runs")

    def make(case: str, flags: Tuple[str, ...] = (), naive: bool = True, timeout: float = TIMEOUT) -> Outcome:
        key = (case, flags, naive)
        if key not in cache:
            name = f"{case}-{'naive' if naive else 'default'}-{'-'.join(flags) or 'plain'}"
            cache[key] = run_option(manifest[case], flags, base / name, NAIVE if naive else {}, timeout)
        return cache[key]

    return make


def _report(outcome: Outcome, what: str) -> None:
    """A hang or crash is a finding about this CPU, not a failure of the test suite."""
    if outcome.status in ("hung", "crashed"):
        tail = " | ".join(outcome.stderr.strip().splitlines()[-2:])
        pytest.skip(f"{what} {outcome.status} (rc={outcome.returncode}) on this CPU: {tail}")


def megengine_rel(a: np.ndarray, b: np.ndarray) -> float:
    a, b = a.astype(np.float64), b.astype(np.float64)
    if a.size == 0:
        return 0.0
    return float(np.max(np.abs(a - b) / np.maximum(np.maximum(np.abs(a), np.abs(b)), 1.0)))


def formats_for(case, flags: Tuple[str, ...], outcome: Outcome) -> Dict[str, str]:
    """Var name -> operator format of the graph that ran (rewritten model, or lite's pass redone)."""
    from lar_prec.lar import graphopts

    if outcome.rewritten:
        return graphopts.format_map(outcome.rewritten[0])
    layout = next((f[len("enable-"):].replace("-", "_") for f in flags if f in LAYOUTS), None)
    if not layout:
        return {}
    # megenginelite applied the layout itself: the same pass on the plain model gives the var
    # names and formats of the graph lite executed
    with tempfile.TemporaryDirectory(prefix="lar-prec-format-") as tmp:
        rewritten = graphopts.rewrite_model(case.model, Path(tmp) / "model.mge", graphopts.Rewrite(layout=layout))
        return graphopts.format_map(rewritten.path)


def _quantized_depth(folder: DumpFolder, vid: int) -> int:
    """How many computed quantized vars ``vid`` is or depends on (each may move a step)."""
    ids = set(folder.ids)
    seen = reach(vid, {v: [u for u in folder.inputs_of(v) if u in ids] for v in ids}) | {vid}
    return max(1, sum(1 for v in seen if folder[v].var.dtype.startswith("Quantized")
                      and folder[v].var.opr_type not in ("ImmutableTensor", "Host2DeviceCopy")))


def check_pairs(plain: Path, other: Path, formats: Dict[str, str], tol: float):
    """Pair by name, relayout, and compare every pair; returns (pairing, kinds used, worst error)."""
    A, B = DumpFolder(plain), DumpFolder(other)
    pairing = pair_by_name([d.var for d in A], [d.var for d in B])
    kinds = set()
    worst = 0.0
    for p in pairing.pairs:
        a, b = A[p.a].array(), B[p.b].array()
        b, det = to_plain(b, a.shape, fmt=formats.get(p.name_b), layout=B[p.b].var.layout)
        assert b is not None, f"{p.name_a}: {det}"
        kinds.add(det.kind)
        if A[p.a].var.dtype.startswith("Quantized"):
            # raw integers of the same scale: rounding may move one step per int8 layer, and
            # the steps add up along a deeper network (quant_mobile's head: 2); a false pair
            # differs by a good share of the range
            diff = int(np.max(np.abs(a.astype(np.int64) - b.astype(np.int64)))) if a.size else 0
            allowed = _quantized_depth(A, p.a)
            assert diff <= allowed, f"false pair? {p} differs by {diff} quantized steps (allowed {allowed})"
            continue
        q_depth = _quantized_depth(A, p.a) if any(u in A.ids and A[u].var.dtype.startswith("Quantized") for u in A.inputs_of(p.a)) else 0
        if q_depth and a.size > 1:
            # dequantized from int8 steps that may differ (above): values on a grid of the
            # scale, which the dump does not carry; its spacing gives it
            grid = np.diff(np.unique(a.astype(np.float64)))
            step = float(grid[grid > 0].min()) if (grid > 0).any() else 0.0
            gap = float(np.max(np.abs(a.astype(np.float64) - b.astype(np.float64))))
            assert gap <= q_depth * step * 1.001, f"false pair? {p.name_a}: {gap:.3g} > {q_depth} steps of {step:.3g}"
            continue
        err = megengine_rel(a, b)
        worst = max(worst, err)
        assert err <= tol, f"false pair? {p.name_a} (A var {p.a}) vs {p.name_b} (B var {p.b}): error {err:.3g}"
        if tol >= TOL_F16 and a.size > 1:
            x, y = a.astype(np.float64).ravel(), b.astype(np.float64).ravel()
            norm = np.linalg.norm(x) * np.linalg.norm(y)
            if norm > 0:
                cos = float(x @ y / norm)
                assert cos >= MIN_COSINE_F16, f"false pair? {p.name_a} vs {p.name_b}: cosine {cos:.6f}"
    return pairing, kinds, worst


def _last_computed(folder: Path) -> str:
    from lar_prec.compare.namepair import skip_reason

    return [d.var.name for d in DumpFolder(folder) if not skip_reason(d.var)][-1]


# ----------------------------------------------------------------------------- parsing


@pytest.mark.parametrize("flags", ALL_OPTIONS)
def test_every_option_parses_in_both_spellings(flags):
    dash = parse_options(["m.mge", *(f"--{f}" for f in flags)])
    under = parse_options(["m.mge", *(f"--{f.replace('-', '_')}" for f in flags)])
    assert dash == under
    name = flags[0].split("=")[0].replace("-", "_")
    assert getattr(dash, name) not in (False, "", None)


def test_refused_options_say_why():
    with pytest.raises(UsageError, match=r"--enable_jit cannot work on this build: JIT .*MLIR"):
        parse_options(["m", "--enable-jit"])
    assert parse_options(["m", "--enable-jit=false"]).model == "m"
    with pytest.raises(UsageError, match="one layout transform at a time"):
        parse_options(["m", "--enable-nchw44", "--enable-nhwcd4"])
    with pytest.raises(UsageError, match="--no-sanity-check should be set before --record-comp-seq2"):
        parse_options(["m", "--record-comp-seq2"])
    with pytest.raises(UsageError, match=r"unsupported target\(got:gpu\)"):
        parse_options(["m", "--layout-transform", "gpu"])
    with pytest.raises(UsageError, match="together"):
        parse_options(["m", "--enable-ioc16", "--enable-io16xc32"])
    with pytest.raises(UsageError, match="only written when an option rewrites"):
        parse_options(["m", "--rewritten-model", "x.mge"])


def test_refusals_exit_1_with_one_line():
    for args in (["m.mge", "--enable-jit"], ["m.mge", "--enable-nchw44", "--enable-nchw88"]):
        proc = subprocess.run([sys.executable, "-m", "lar_prec.lar", *args], cwd=ROOT, capture_output=True,
                              text=True, timeout=60)
        assert proc.returncode == 1 and "Traceback" not in proc.stderr
        assert len([ln for ln in proc.stderr.splitlines() if ln.startswith("load_and_run: error: ")]) == 1


def test_route_of_each_option():
    assert parse_options(["m", "--enable-nchw44"]).needs_rewrite is False  # megenginelite option
    for flag in ("enable-chwn4", "enable-ioc16", "enable-io16xc32", "optimize-for-inference", "fuse-grain",
                 "enable-fuse-conv-bias-nonlinearity", "enable-fuse-conv-bias-with-z"):
        assert parse_options(["m", f"--{flag}"]).needs_rewrite, flag
    opts = parse_options(["m", "--enable-nchw44", "--optimize-for-inference", "--bin-io-dump", "run/dump/"])
    assert opts.layout == "nchw44" and rewritten_model_path(opts) == "run/dump.rewritten.mge"
    assert parse_options(["m", "--record-comp-seq", "--record-comp-seq2", "--no-sanity-check"]).record_level == 2


# ----------------------------------------------------------------------------- real runs


MATRIX = [pytest.param("cnn", f, marks=pytest.mark.megengine, id=f"cnn-{'+'.join(f)}") for f in ALL_OPTIONS]
MATRIX += [pytest.param(c, f, marks=[pytest.mark.megengine, pytest.mark.slow], id=f"{c}-{'+'.join(f)}")
           for c in ("resnet", "mlp", "attention", "multi_input", "fastrun_shake") for f in ALL_OPTIONS]
MATRIX += [pytest.param(c, (f,), marks=pytest.mark.megengine, id=f"{c}-{f}") for c in ("quantized", "quant_mobile")
           for f in ("enable-nchw4", "enable-chwn4", "enable-nchw44-dot", "enable-nchw32", "enable-nchw64")]


@pytest.mark.parametrize("case,flags", MATRIX)
def test_option_pairs_with_plain_graph_by_name(manifest, option_run, case, flags):
    """Naive kernels, plain graph vs the option's graph: paired by name, no false pair, final output paired."""
    plain = option_run(case)
    assert plain.status == "ok", plain.stderr[-2000:]
    run = option_run(case, flags)
    _report(run, f"{case} under --{' --'.join(flags)}")
    if run.status == "failed":
        # a refused rewrite (e.g. io16xc32 on a model with a Reduce) is one line naming the cause
        line = [ln for ln in run.stderr.splitlines() if ln.startswith("load_and_run: error: ")]
        assert len(line) == 1 and "Traceback" not in run.stderr
        pytest.skip(f"{case} under --{flags[0]}: {line[0]}")
    tol = TOL_F16 if flags[0] in FP16 else TOL_F32
    pairing, kinds, worst = check_pairs(plain.dump, run.dump, formats_for(manifest[case], flags, run), tol)
    assert pairing.paired_fraction >= 0.5, (pairing.paired_fraction, pairing.unpaired_a)
    final = _last_computed(plain.dump)
    assert any(p.name_a == final for p in pairing.pairs), f"final output {final!r} not paired"
    for u in pairing.unpaired_a + pairing.unpaired_b:
        assert u.reason


@pytest.mark.megengine
def test_relayout_of_every_layout_kind_on_real_dumps(manifest, option_run):
    """Each layout kind is really met in a dump and brought back to equal the plain run."""
    wanted = {("cnn", "enable-nchw44"): "nchw4", ("cnn", "enable-nchw88"): "nchw88",
              ("cnn", "enable-nhwcd4"): "nhwcd4", ("quantized", "enable-nchw4"): "nchw4",
              ("quantized", "enable-chwn4"): "chwn4", ("cnn", "enable-nchw44-dot"): "nchw4"}
    for (case, flag), kind in wanted.items():
        plain, run = option_run(case), option_run(case, (flag,))
        assert plain.status == "ok" and run.status == "ok", run.stderr[-2000:]
        _, kinds, _ = check_pairs(plain.dump, run.dump, formats_for(manifest[case], (flag,), run), TOL_F32)
        assert kind in kinds, (case, flag, kinds)
        assert OPTION_KIND[flag[len("enable-"):].replace("-", "_")] == kind


@pytest.mark.megengine
@pytest.mark.parametrize("flag", UNCHANGED)
def test_options_that_change_nothing_equal_the_plain_run(option_run, flag):
    """Default kernels: weight/fuse preprocessing, const shape, record level 1 give the plain values."""
    plain = option_run("cnn", naive=False)
    assert plain.status == "ok", plain.stderr[-2000:]
    run = option_run("cnn", (flag,), naive=False)
    _report(run, f"cnn under --{flag} (default kernels)")
    assert run.status == "ok", run.stderr[-2000:]
    pairing, _, worst = check_pairs(plain.dump, run.dump, {}, TOL_F32)
    assert pairing.paired_fraction == 1.0 and not pairing.unpaired_b, pairing
    assert worst <= TOL_F32


@pytest.mark.megengine
@pytest.mark.parametrize("flag", ("enable-nhwcd4", "enable-fuse-conv-bias-nonlinearity", "enable-chwn4"))
def test_naive_and_default_run_the_same_graph(option_run, flag):
    """Under one option, naive and default kernels execute the same graph: same ids, same names."""
    naive, default = option_run("cnn", (flag,)), option_run("cnn", (flag,), naive=False)
    _report(default, f"cnn under --{flag} (default kernels)")
    assert naive.status == default.status == "ok"
    a, b = DumpFolder(naive.dump), DumpFolder(default.dump)
    assert a.ids == b.ids
    assert [a[i].var.name for i in a.ids] == [b[i].var.name for i in b.ids]
    if flag != "enable-nhwcd4":  # graph rewrites: the same model file, kept beside the dump
        assert naive.rewritten[1] == default.rewritten[1]
        path, sha = naive.rewritten
        assert Path(path) == Path(str(naive.dump) + ".rewritten.mge") and Path(path).is_file()
        from lar_prec.outputs import sha256_file as sha256_of

        assert sha256_of(path) == sha


@pytest.mark.megengine
def test_fp16_option_output_is_close_and_typecvt_name_pairs_last_producer(option_run):
    plain, run = option_run("cnn"), option_run("cnn", ("enable-ioc16",))
    assert run.status == "ok"
    pairing, _, worst = check_pairs(plain.dump, run.dump, {}, TOL_F16)
    assert worst > TOL_F32  # fp16 really ran
    shadowed = [u for u in pairing.unpaired_b if u.reason.startswith("name repeated")]
    assert shadowed, "the fp16 output TypeCvt reuses the name of the var it converts"


@pytest.mark.megengine
@pytest.mark.slow
def test_default_kernels_under_every_option_run_or_are_reported(option_run):
    """Default kernels, every option on cnn: a hang or crash is a finding about this CPU (warned,
    e.g. NCHW88's oneDNN JIT failure deadlocking at exit on some x86), never a lost run; a
    refusal is one line; the options that change nothing always run."""
    outcomes = {flags: option_run("cnn", flags, naive=False, timeout=45) for flags in ALL_OPTIONS}
    for flags, out in outcomes.items():
        if out.status in ("hung", "crashed"):
            warnings.warn(f"cnn under --{' --'.join(flags)} with the default kernels: {out.status} "
                          f"(rc={out.returncode})")
        if out.status == "failed":
            assert len([ln for ln in out.stderr.splitlines() if ln.startswith("load_and_run: error: ")]) == 1
        if out.status == "ok":
            assert DumpFolder(out.dump).ids, f"{flags}: ran but dumped nothing"
    for flag in UNCHANGED + FUSION:
        assert outcomes[(flag,)].status == "ok", (flag, outcomes[(flag,)].stderr[-1500:])


@pytest.mark.megengine
def test_a_rewrite_megengine_refuses_is_one_line_and_no_model(option_run):
    """io16xc32 on a model with a Reduce: MegEngine's pass asserts; the run says so in one line."""
    run = option_run("attention", ("enable-io16xc32",), naive=False)
    assert run.status == "failed", run.stderr[-2000:]
    line = [ln for ln in run.stderr.splitlines() if ln.startswith("load_and_run: error: ")]
    assert len(line) == 1 and "Traceback" not in run.stderr
    assert "cannot rewrite" in line[0] and "reduce" in line[0]
    assert not Path(str(run.dump) + ".rewritten.mge").exists() and run.rewritten is None


@pytest.mark.megengine
def test_rewritten_model_goes_where_asked_and_its_line_parses(manifest, tmp_path):
    case = manifest["cnn"]
    where = tmp_path / "my model.mge"  # a space: the path is the last field of the line
    argv = [sys.executable, "-m", "lar_prec.lar", str(case.model), "--input", ";".join(case.input_specs()),
            "--iter", "1", "--warmup-iter", "0", "--optimize-for-inference", "--rewritten-model", str(where)]
    proc = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, timeout=TIMEOUT)
    assert proc.returncode == 0, proc.stderr[-2000:]
    [(path, sha)] = rewritten_models(proc.stderr)
    from lar_prec.lar.graphopts import format_map
    from lar_prec.outputs import sha256_file as sha256_of

    assert Path(path) == where and sha256_of(where) == sha
    assert where.stat().st_mode & 0o044  # readable like any file the user writes
    assert "c1.Convolution" in format_map(where)  # names kept (keep_var_name=2)
    # without a dump or a path the model is not kept, and the line says so
    proc = subprocess.run(argv[:-2], cwd=ROOT, capture_output=True, text=True, timeout=TIMEOUT)
    assert proc.returncode == 0 and "(deleted) path=" in proc.stderr
    [(gone, _)] = rewritten_models(proc.stderr)
    assert not Path(gone).exists()
