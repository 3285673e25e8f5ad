"""The benchmark's sections (issue 7): compare against MegEngine's compare_binary_iodump, peak
memory on a big pair, start-up, rooting a big graph, naive-vs-default on resnet. Each returns
a :class:`Section`; a missing piece of lar-prec is "not available", never a crash."""
from __future__ import annotations

import json
import os
import re
import subprocess
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence, Tuple

from gen import PairInfo, PairSpec, generate_pair, graph_edges
from harness import BUILD, alternate, cases as built_cases
from procs import LAR, MGE_COMPARE, PY, ROOT, Proc, _median, _ok, run_proc

THRESHOLD = "1e-3"
ROOTING_VARS = 20_000
#: depth of the chain whose root's path is measured (issue 41 #9: 50,000 deep ran 14 minutes at 5 GB)
CHAIN_VARS = 50_000


@dataclass
class Section:
    """Results of one benchmark section; ``available`` False means the measured piece is missing."""

    name: str
    available: bool = True
    note: str = ""
    data: Dict[str, Any] = field(default_factory=dict)


def parse_size(text: str) -> int:
    """``"1G"`` -> 10**9; K/M/G are decimal, Ki/Mi/Gi binary; ``0``/``none`` -> 0."""
    t = text.strip().lower().rstrip("b")
    if t in ("", "0", "none", "off", "no"):
        return 0
    units = {"ki": 1 << 10, "mi": 1 << 20, "gi": 1 << 30, "k": 10**3, "m": 10**6, "g": 10**9}
    for u, mult in units.items():
        if t.endswith(u):
            return int(float(t[: -len(u)]) * mult)
    return int(float(t))


def _fmt_bytes(n: float) -> str:
    for unit, div in (("GB", 1e9), ("MB", 1e6), ("KB", 1e3)):
        if n >= div:
            return f"{n / div:.2f} {unit}"
    return f"{int(n)} B"


def get_pair(root: Path, spec: PairSpec, keep: bool) -> PairInfo:
    """Generate the pair, or reuse one kept by an earlier ``--keep`` run with the same spec."""
    meta = root / "pair.json"
    if keep and meta.exists():
        try:
            m = json.loads(meta.read_text())
            if m.get("spec") == asdict(spec) and Path(m["dir_a"]).is_dir() and Path(m["dir_b"]).is_dir():
                m["divergent_ids"] = tuple(m["divergent_ids"])
                m["seconds"] = 0.0  # reused
                print(f"  reusing {root} (kept from an earlier run)", flush=True)
                return PairInfo(**m)
        except (ValueError, KeyError, TypeError):
            pass
    return generate_pair(root, spec)


def _count_lar_divergent(json_path: Path) -> Optional[int]:
    try:
        rep = json.loads(json_path.read_text())
        return sum(1 for v in rep.get("vars", []) if v.get("status") != "ok")
    except (OSError, ValueError, AttributeError):
        return None


def kernel_state() -> str:
    """Which path lar-prec compares float32 with here, as `lar-prec --version` says it
    ("C kernel", or why it is the numpy path); "unknown" when that fails."""
    try:
        out = subprocess.run(LAR + ["--version"], cwd=ROOT, capture_output=True, text=True, timeout=60).stdout
    except (OSError, subprocess.TimeoutExpired):
        return "unknown"
    m = re.search(r"\(compare: (.*)\)", out)
    return m.group(1) if m else "unknown"


def _lar_jobs_option() -> Optional[str]:
    """The spelling of `lar-prec compare`'s parallelism option, if it has one."""
    try:
        text = subprocess.run(LAR + ["compare", "--help"], cwd=ROOT, capture_output=True, text=True, timeout=60).stdout
    except (OSError, subprocess.TimeoutExpired):
        return None
    return "--jobs" if "--jobs" in text else None


def _tool_summary(pair: PairInfo, runs: List[Proc], first: Proc, json_path: Optional[Path], mge_out: Path) -> Dict[str, Any]:
    """One tool's row of a compare section: timings, memory, exit codes, divergent vars found."""
    ps = runs or [first]
    secs = [p.seconds for p in ps]
    med = _median(secs)
    d: Dict[str, Any] = {
        "argv": " ".join(ps[0].argv),
        "seconds": secs,
        "median_s": med,
        "gbps": pair.total_bytes / 1e9 / med if med else None,
        "maxrss_mb": max(p.maxrss_mb for p in ps + [first]),
        "tree_peak_mb": first.tree_peak_mb,
        "tree_peak_anon_mb": first.tree_peak_anon_mb,
        "returncodes": sorted({p.returncode for p in ps + [first]}),
        "warmup_s": first.seconds,
        "stderr_tail": first.stderr_tail[-600:] if first.returncode not in (0, 1) else "",
        "timed_from": "repeat runs" if runs else "warm-up run only (--repeat 0)",
    }
    if json_path is not None:
        d["divergent_found"] = _count_lar_divergent(json_path)
    else:
        try:
            d["divergent_found"] = mge_out.read_text(errors="replace").count(" not equal: ")
        except OSError:
            d["divergent_found"] = None
    return d


#: runs the lar-prec of a checkout given as the first argument (``--before``), not this one
_BEFORE = ("import sys; sys.path[0:0] = [sys.argv.pop(1)]; sys.argv[0] = 'lar-prec'; "
           "from lar_prec.cli import main; sys.exit(main())")


def bench_compare(pair: PairInfo, work: Path, repeat: int, have_lar: bool, have_mge: bool, warm: bool,
                  name: str = "compare", variants: bool = True, before: Optional[str] = None,
                  pair_repeat: int = 0) -> Section:
    """Section 1: lar-prec compare vs MegEngine's compare_binary_iodump, alternating.

    `lar-prec` is the command as a user types it (its default parallelism: every core), piped,
    with the benchmark's fixed threshold; `lar-prec, auto` the same with the default
    `--threshold auto` (issue 40: as fast as the fixed one); `lar-prec, terminal` on a
    pseudo-terminal, what a user at a terminal gets. Also timed (``variants``): `lar-prec
    --jobs 1` (one process) when there are several cores, and lar-prec's numpy path
    (LAR_PREC_NO_KERNEL=1), which is what runs where the C kernel could not be built. With
    ``before`` (a checkout of an earlier lar-prec) its fixed and auto runs too. The main pair
    also gets `cat` of both folders timed, the speed auto is held to. ``pair_repeat``: lar-prec's
    rows get that many timed runs in all (MegEngine's ``repeat``), every row in every round, the
    order alternating: the many-variable pair's per-var time and auto/fixed ratio are targets, a
    run under a second, where a median of three moves with the machine's load.
    """
    s = Section(name)
    a, b = pair.dir_a, pair.dir_b
    mge_out = work / f"{name}-mge.txt"
    j0, j1, j2, j3, j4, j5, j6 = (work / f"{name}-{i}.json" for i in range(7))
    tools: List[Tuple[str, List[str], Optional[Path]]] = []
    envs: Dict[str, Dict[str, str]] = {}
    ttys = {"lar-prec, terminal"}
    if have_lar:
        tools.append(("lar-prec", LAR + ["compare", a, b, "--threshold", THRESHOLD, "--json", str(j0)], j0))
        tools.append(("lar-prec, auto", LAR + ["compare", a, b, "--json", str(j4)], j4))
        tools.append(("lar-prec, terminal", LAR + ["compare", a, b, "--threshold", THRESHOLD, "--json", str(j3)], j3))
        if before:
            old = [PY, "-c", _BEFORE, before]
            tools.append(("lar-prec (before)", old + ["compare", a, b, "--threshold", THRESHOLD, "--json", str(j5)], j5))
            tools.append(("lar-prec, auto (before)", old + ["compare", a, b, "--json", str(j6)], j6))
        jobs_opt = _lar_jobs_option() if variants else None
        if jobs_opt and (os.cpu_count() or 1) > 1:
            tools.append((f"lar-prec {jobs_opt} 1",
                          LAR + ["compare", a, b, "--threshold", THRESHOLD, "--json", str(j1), jobs_opt, "1"], j1))
        if variants and kernel_state() == "C kernel":
            numpy_path = "lar-prec, numpy path"
            tools.append((numpy_path, LAR + ["compare", a, b, "--threshold", THRESHOLD, "--json", str(j2)], j2))
            envs[numpy_path] = {**os.environ, "LAR_PREC_NO_KERNEL": "1"}
    else:
        s.data["lar_note"] = "not available: `lar-prec compare` does not exist yet"
    if have_mge:
        tools.append(("megengine", MGE_COMPARE + [a, b, "-e", THRESHOLD], None))
    else:
        s.data["mge_note"] = "not available: megengine is not installed"
    s.data["tools"] = [t for t, _, _ in tools]
    if not tools:
        s.available = False
        s.note = "neither tool is available"
        return s
    runs: Dict[str, List[Proc]] = {t: [] for t, _, _ in tools}
    # first run of each: untimed warm-up that also fills the page cache and gives the outputs
    # checked below; its memory is sampled over the whole process tree
    first: Dict[str, Proc] = {}
    for tool, argv, _ in tools:
        print(f"  {tool}: warm-up run", flush=True)
        first[tool] = run_proc(argv, stdout=mge_out if tool == "megengine" else None, sample=True, env=envs.get(tool),
                               tty=tool in ttys)
    rounds = max(repeat, pair_repeat) if repeat else 0  # --quick: the warm-up run is the only run

    def timed_run(tool: str, argv: List[str], i: int) -> None:
        if i >= repeat and tool == "megengine":  # the extra rounds are lar-prec's (all of its rows, interleaved)
            return
        p = run_proc(argv, env=envs.get(tool), tty=tool in ttys)
        runs[tool].append(p)
        print(f"  {tool} run {i + 1}/{rounds}: {p.seconds:.2f} s, rc {p.returncode}, peak RSS {p.maxrss_mb:.0f} MB",
              flush=True)

    # lar-prec's rows and their counterpart, MegEngine's script, in turn (every other round reversed)
    alternate([(tool, argv) for tool, argv, _ in tools], rounds, timed_run, turn=True)
    for tool, _, json_path in tools:
        s.data[tool] = _tool_summary(pair, runs[tool], first[tool], json_path, mge_out)
    s.data["generated_divergent"] = pair.n_divergent
    s.data["n_vars"] = pair.n_vars
    mge = s.data.get("megengine")
    for tool in s.data["tools"]:
        lar = s.data[tool]
        if tool != "megengine" and mge and lar["median_s"] and mge["median_s"]:
            lar["speedup"] = mge["median_s"] / lar["median_s"]
    if "lar-prec" in s.data and "speedup" in s.data["lar-prec"]:
        s.data["speedup"] = s.data["lar-prec"]["speedup"]
    fixed, auto = s.data.get("lar-prec"), s.data.get("lar-prec, auto")
    if fixed and auto and fixed.get("median_s") and auto.get("median_s"):
        s.data["auto_over_fixed"] = auto["median_s"] / fixed["median_s"]
        if variants:  # the main pair: auto's speed as a share of cat's (issue 40 #6)
            cat = cat_seconds(pair, repeat=max(1, repeat))
            if cat:
                s.data["cat_s"], s.data["auto_of_cat"] = cat, cat / auto["median_s"]
    old = s.data.get("lar-prec (before)")
    if fixed and old and fixed.get("median_s") and old.get("median_s"):
        s.data["over_before"] = fixed["median_s"] / old["median_s"]
    s.note = "warm page cache" if warm else ""
    return s


def cat_seconds(pair: PairInfo, repeat: int = 3) -> Optional[float]:
    """Median wall time of ``cat`` of every file of both folders to /dev/null (warm page cache):
    the page-cache read speed the issue holds compare to (issue 24)."""
    argv = ["find", pair.dir_a, pair.dir_b, "-type", "f", "-exec", "cat", "{}", "+"]
    times = []
    for _ in range(repeat + 1):  # the first one only warms the cache
        t0 = time.monotonic()
        p = subprocess.run(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        if p.returncode != 0:
            return None
        times.append(time.monotonic() - t0)
    return _median(times[1:])


def bench_profile_many(pair: PairInfo, work: Path, repeat: int) -> Section:
    """Section 2c: where the time of compare goes on the many-variable pair, per stage
    (``bench/profile_many.py`` in a child process)."""
    s = Section("profile-many")
    out = work / "profile-many.json"
    p = subprocess.run([PY, str(ROOT / "bench" / "profile_many.py"),
                        pair.dir_a, pair.dir_b, "--threshold", THRESHOLD, "--repeat", str(max(1, repeat)),
                        "--json", str(out)], capture_output=True, text=True, cwd=ROOT)
    if p.returncode != 0 or not out.is_file():
        s.available = False
        s.note = f"profile failed: {p.stderr[-300:]}"
        return s
    s.data = json.loads(out.read_text())
    return s


def bench_memory(pair: PairInfo, work: Path, have_lar: bool) -> Section:
    """Section 2: peak memory of lar-prec compare on the big pair (two runs sampled, the second
    warm), and its speed (three warm runs, not sampled: the sampler reads /proc every 50 ms,
    on a core the compare would use)."""
    s = Section("memory")
    if not have_lar:
        s.available = False
        s.note = "not available: `lar-prec compare` does not exist yet"
        return s
    argv = LAR + ["compare", pair.dir_a, pair.dir_b, "--threshold", THRESHOLD, "--json", str(work / "big.json")]
    ps = []
    for i in range(2):
        p = run_proc(argv, sample=True)
        ps.append(p)
        print(f"  lar-prec compare big pair run {i + 1}/2: {p.seconds:.2f} s, rc {p.returncode}, "
              f"peak RSS {p.maxrss_mb:.0f} MB (tree {p.tree_peak_mb:.0f} MB, anon {p.tree_peak_anon_mb:.0f} MB)",
              flush=True)
    s.data = {
        "argv": " ".join(argv),
        "seconds": [p.seconds for p in ps],
        "gbps_warm": pair.total_bytes / 1e9 / ps[-1].seconds,
        "maxrss_mb": max(p.maxrss_mb for p in ps),
        "tree_peak_mb": max(p.tree_peak_mb or 0.0 for p in ps),
        "tree_peak_anon_mb": max(p.tree_peak_anon_mb or 0.0 for p in ps),
        "returncodes": sorted({p.returncode for p in ps}),
        "divergent_found": _count_lar_divergent(work / "big.json"),
        "generated_divergent": pair.n_divergent,
        "stderr_tail": ps[-1].stderr_tail[-600:] if ps[-1].returncode not in (0, 1) else "",
    }
    # the peak is whichever OS figure is larger: the command's RSS (GNU time) or the sampled tree sum
    s.data["peak_mb"] = max(s.data["maxrss_mb"], s.data["tree_peak_mb"])
    timed = [run_proc(argv).seconds for _ in range(3)]
    s.data["timed_seconds"] = timed
    cat = cat_seconds(pair)
    if cat:
        s.data["cat_s"] = cat
        s.data["cat_gbps"] = pair.total_bytes / 1e9 / cat
        s.data["of_cat"] = cat / min(timed)  # lar-prec's speed as a share of cat's
    return s


def _megengine_imports(stderr: str) -> List[str]:
    mods = []
    for line in stderr.splitlines():
        if line.startswith("import time:") and "|" in line:
            mod = line.rsplit("|", 1)[1].strip()
            if mod.split(".")[0] in ("megengine", "megenginelite"):
                mods.append(mod)
    return mods


def bench_startup(tiny: Optional[PairInfo], repeat: int, have_lar: bool) -> Section:
    """Section 3: `lar-prec --help` time; megengine must not be imported by --help nor compare."""
    s = Section("startup")
    if not _ok(LAR + ["--help"]):
        s.available = False
        s.note = "not available: `lar-prec --help` fails"
        return s
    run_proc(LAR + ["--help"])  # warm-up
    secs = [run_proc(LAR + ["--help"]).seconds for _ in range(max(3, repeat))]
    s.data["help_seconds"] = secs
    s.data["help_median_s"] = _median(secs)
    env = {**os.environ, "PYTHONPROFILEIMPORTTIME": "1"}
    checks = {"--help": LAR + ["--help"]}
    if have_lar and tiny is not None:
        checks["compare"] = LAR + ["compare", tiny.dir_a, tiny.dir_b, "--threshold", THRESHOLD]
        # the fixed cost of any compare (interpreter, imports, indexing, report) on a pair of a
        # few vars: what the whole-process GB/s of section 1 pays once
        tiny_argv = checks["compare"] + ["--json", os.devnull]
        run_proc(tiny_argv)  # warm-up
        tsecs = [run_proc(tiny_argv).seconds for _ in range(max(3, repeat))]
        s.data["tiny_compare_seconds"] = tsecs
        s.data["tiny_compare_median_s"] = _median(tsecs)
        s.data["tiny_bytes"] = tiny.total_bytes
        s.data["tiny_vars"] = tiny.n_vars
    imported: Dict[str, List[str]] = {}
    for label, argv in checks.items():
        p = subprocess.run(argv, cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
        imported[label] = sorted(set(_megengine_imports(p.stderr)))
        s.data.setdefault("import_check_rc", {})[label] = p.returncode
    s.data["megengine_imported_by"] = imported
    if "compare" not in checks:
        s.data["compare_note"] = "not available: `lar-prec compare` does not exist yet"
    return s


def bench_rooting(n_vars: int, chain_vars: int = CHAIN_VARS) -> Section:
    """Section 4: roots of a synthetic n_vars graph, and the path to a root ``chain_vars`` deep.

    The graph is a chain with skip connections (gen.graph_edges); divergence starts at a third
    and again at two thirds, so there are two true roots. Per-var results are built in memory
    (untimed: that is the comparison's work); timed is building the tree and its roots().
    """
    s = Section("rooting")
    s.data["n_vars"] = n_vars
    try:
        from lar_prec.diagnosis import tree as vartree
        from lar_prec.compare.records import VarDiff
    except Exception as e:  # ImportError, or an error inside a module being written right now
        s.available = False
        s.note = f"not available: lar_prec.vartree cannot be imported ({type(e).__name__}: {e})"
        return s
    tree_cls = getattr(vartree, "VarTree", None)
    if tree_cls is None or not hasattr(tree_cls, "roots"):
        s.available = False
        s.note = "not available: lar_prec.vartree has no VarTree with roots()"
        return s
    edges = graph_edges(n_vars)
    ids = [v for v, _ in edges]
    bad = set(ids[n_vars // 3: n_vars // 2]) | set(ids[2 * n_vars // 3:])
    try:
        diffs = [
            VarDiff(id=v, name=f"var{v}", opr=f"op{v}({','.join(f'var{u}' for u in ins)})[{v - 1}]",
                    opr_type="Elemwise", dtype="Float32", shape=(1, 64, 8, 8), inputs=tuple(ins),
                    status="divergent" if v in bad else "ok", max_err=1e-2 if v in bad else 1e-7,
                    size=4096, scale=4.0, index=i)
            for i, (v, ins) in enumerate(edges)
        ]
    except TypeError as e:
        s.available = False
        s.note = f"not available: cannot build VarDiff results in memory ({e})"
        return s
    build_s, roots_s, totals = [], [], []
    roots = ()
    for _ in range(3):
        t0 = time.perf_counter()
        tree = tree_cls(diffs)
        t1 = time.perf_counter()
        roots = tree.roots()
        t2 = time.perf_counter()
        build_s.append(t1 - t0)
        roots_s.append(t2 - t1)
        totals.append(t2 - t0)
    s.data["seconds"] = totals
    s.data["median_s"] = _median(totals)
    s.data["build_median_s"] = _median(build_s)
    s.data["roots_median_s"] = _median(roots_s)
    s.data["n_roots"] = len(roots)
    s.data["root_ids"] = [r.id for r in roots][:5]
    s.data["expected_roots"] = [ids[n_vars // 3], ids[2 * n_vars // 3]]
    s.data["api"] = "VarTree(diffs) then .roots(), diffs = in-memory lar_prec.compare.VarDiff"
    if chain_vars:
        s.data["chain"] = _deep_chain(tree_cls, VarDiff, chain_vars)
    return s


def _deep_chain(tree_cls: Any, diff_cls: Any, depth: int) -> Dict[str, Any]:
    """A plain chain ``depth`` vars deep (a model input, then one operator after another) that
    diverges at its last var: the tree, its root and the path from the input to that root, as
    a report builds them (median of 3, and the peak of Python's allocations in that work)."""
    import tracemalloc

    diffs = [diff_cls(id=v, name=f"var{v}", opr=f"op{v}", opr_type="Host2DeviceCopy" if v == 1 else "Elemwise",
                      dtype="Float32", shape=(16,), inputs=(v - 1,) if v > 1 else (),
                      status="divergent" if v == depth else "ok", max_err=1e-2 if v == depth else 1e-7,
                      size=64, scale=1.0, index=v - 1)
                 for v in range(1, depth + 1)]
    def work() -> Tuple[int, int]:
        tree = tree_cls(diffs)
        root = tree.roots()[0].id
        return root, len(tree.path(root))

    seconds = []
    for _ in range(3):
        t0 = time.perf_counter()
        root, length = work()
        seconds.append(time.perf_counter() - t0)
    tracemalloc.start()  # a fourth time for memory: tracing slows what it traces
    work()
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    return {"depth": depth, "seconds": seconds, "median_s": _median(seconds), "root": root, "path_len": length,
            "peak_mb": round(peak / 2**20, 1)}


def _local_run_seconds(folder: Optional[Path]) -> List[float]:
    """Seconds of the load_and_run processes of local error (the layerwise model's runs:
    every run.json under ``folder/local``)."""
    out: List[float] = []
    if folder is None:
        return out
    for rj in sorted((folder / "local").rglob("run.json")):
        try:
            out.append(float(json.loads(rj.read_text())["seconds"]))
        except (OSError, ValueError, KeyError, TypeError):
            pass
    return out


def _nvd_row(p: Proc, out_json: Path, i: int, case: str, folder: Optional[Path] = None) -> Dict[str, Any]:
    """One naive-vs-default run: wall time, its load_and_run runs' seconds (the naive and
    default runs, and the layerwise runs of local error), the overhead."""
    runs_s = None
    try:
        rep = json.loads(out_json.read_text())
        runs_s = [float(r["seconds"]) for r in rep.get("runs", [])]
    except (OSError, ValueError, KeyError, TypeError):
        pass
    local_s = _local_run_seconds(folder)
    row: Dict[str, Any] = {"i": i, "case": case, "wall_s": p.seconds, "rc": p.returncode, "run_seconds": runs_s,
                           "local_run_seconds": local_s,
                           "stderr_tail": p.stderr_tail[-600:] if p.returncode not in (0, 1) else ""}
    if runs_s:
        lar_s = sum(runs_s) + sum(local_s)
        row["analysis_s"] = p.seconds - lar_s
        row["overhead"] = (p.seconds - lar_s) / lar_s if lar_s > 0 else None
    print(f"  naive-vs-default {case} {'warm-up' if i == 0 else f'run {i}'}: {p.seconds:.2f} s, rc {p.returncode}",
          flush=True)
    return row


#: the cases section 5 runs (issue 34: resnet and the architectures added for it)
NVD_CASES = ("resnet", "vit", "mobilenetv3", "gru_topk")


def bench_nvd(repeat: int, work: Path, warmup: bool = True, cases: Sequence[str] = NVD_CASES) -> Section:
    """Section 5: naive-vs-default on each of ``cases``; overhead = wall - sum of run seconds.
    The headline overhead is the largest of the cases' medians (piped)."""
    s = Section("naive-vs-default")
    if not _ok(LAR + ["naive-vs-default", "--help"]):
        s.available = False
        s.note = "not available: `lar-prec naive-vs-default` does not exist yet"
        return s
    if not (BUILD / "manifest.json").exists():
        s.available = False
        s.note = "not available: cases are not built (run `make cases`)"
        return s
    built = built_cases()
    cases = [c for c in cases if c in built]
    if not cases:
        s.available = False
        s.note = "not available: none of the cases in the manifest"
        return s
    rows = []
    first = 0 if warmup else 1
    argv: List[str] = []
    for name in cases:
        c = built[name]
        for i in range(first, max(1, repeat) + 1):
            # piped (progress bars off) and on a terminal (progress bars on), alternating
            for mode in (("pipe", "terminal") if i % 2 else ("terminal", "pipe")):
                out_json = work / f"nvd-{name}-{i}-{mode}.json"
                folder = work / f"nvd-runs-{name}-{i}-{mode}"
                argv = LAR + ["naive-vs-default", str(c.model), "--input", ";".join(c.input_specs()),
                              "--json", str(out_json), "--out", str(folder)]
                row = _nvd_row(run_proc(argv, tty=mode == "terminal"), out_json, i, name, folder)
                row["mode"] = mode
                rows.append(row)
    timed = [r for r in rows if r["i"] > 0] if warmup else rows
    s.data["argv"] = " ".join(argv)
    s.data["rows"] = timed
    s.data["by_case"] = {}
    for name in cases:
        mine = [r for r in timed if r["case"] == name]
        s.data["by_case"][name] = {
            mode: _median([r["overhead"] for r in mine if r["mode"] == mode and r.get("overhead") is not None])
            for mode in ("pipe", "terminal")}
    for mode, key in (("pipe", ""), ("terminal", "_terminal")):
        medians = [v[mode] for v in s.data["by_case"].values() if v[mode] is not None]
        s.data["overhead_median" + key] = max(medians) if medians else None
        mine = [r for r in timed if r["mode"] == mode]
        s.data["analysis_median_s" + key] = _median([r["analysis_s"] for r in mine if "analysis_s" in r])
        s.data["wall_median_s" + key] = _median([r["wall_s"] for r in mine])
    if not any(r.get("overhead") is not None for r in timed):
        s.note = "the JSON report has no per-run seconds, so the overhead cannot be computed"
    return s
