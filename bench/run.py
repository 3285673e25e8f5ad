#!/usr/bin/env python
"""lar-prec benchmark (issue 7): `make bench`, or `.venv/bin/python bench/run.py --help`.

Measures, on this machine, whatever parts of lar-prec exist (a missing part is reported as
"not available", never a crash):

1. `lar-prec compare` against `python -m megengine.tools.compare_binary_iodump` on a generated
   dump pair (--size, default 1G = two 500 MB folders), alternating the two tools, median of
   --repeat whole-process wall times, GB/s of dump read, peak RSS;
2. peak memory of `lar-prec compare` on a big pair (--big, default 4G) holding one variable far
   larger than the memory budget;
3. start-up: `lar-prec --help` time, and that neither `--help` nor `compare` imports megengine;
4. rooting a synthetic graph of 20,000 variables (lar_prec.vartree);
5. `lar-prec naive-vs-default` on the `resnet` case: the analysis time on top of the two
   load_and_run processes.

It writes --out (default bench/RESULTS.md) with the machine, the date, every number and its
target. Timings are of a warm page cache: every command runs once untimed first (dropping the
cache needs root and disturbs everything else on the machine).
"""
from __future__ import annotations

import argparse
import datetime as _dt
import importlib.util
import json
import os
import platform
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from gen import PairInfo, PairSpec, generate_pair, graph_edges  # noqa: E402

PY = sys.executable
_LAR_SCRIPT = Path(PY).parent / "lar-prec"
LAR: List[str] = [str(_LAR_SCRIPT)] if _LAR_SCRIPT.exists() else [PY, "-m", "lar_prec"]
MGE_COMPARE: List[str] = [PY, "-m", "megengine.tools.compare_binary_iodump"]
THRESHOLD = "1e-3"

TARGETS = {
    "speedup": 5.0,          # lar-prec compare at least 5x faster than MegEngine's script
    "gbps": 1.5,             # GB/s of dump read (both folders) per second of wall time
    "peak_rss_mb": 150.0,    # peak RSS of lar-prec compare, any dump size
    "help_s": 0.5,           # lar-prec --help
    "rooting_s": 2.0,        # roots of a 20,000-variable graph
    "nvd_overhead": 0.20,    # naive-vs-default analysis time / load_and_run time
}
ROOTING_VARS = 20_000


# ------------------------------------------------------------------ processes


@dataclass
class Proc:
    """One finished child process."""

    argv: List[str]
    returncode: int
    seconds: float
    maxrss_mb: float                      # peak RSS of the command's process from the OS (GNU time %M)
    tree_peak_mb: Optional[float] = None  # sampled sum of PSS (else RSS) over the process tree
    tree_peak_anon_mb: Optional[float] = None  # same, anonymous memory only (no file pages)
    stderr_tail: str = ""


def _descendants(root: int) -> List[int]:
    children: Dict[int, List[int]] = {}
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat") as f:
                stat = f.read()
        except OSError:
            continue
        ppid = int(stat.rsplit(")", 1)[1].split()[1])
        children.setdefault(ppid, []).append(int(name))
    out, i = [root], 0
    while i < len(out):
        out.extend(children.get(out[i], ()))
        i += 1
    return out


_HAVE_PSS = os.path.exists("/proc/self/smaps_rollup")


def _mem_kb(pid: int) -> Tuple[int, int]:
    """(total, anonymous) memory of one process in kB: proportional set size when the kernel
    has smaps_rollup (pages shared between the command and its forked workers counted once),
    else VmRSS/RssAnon (shared pages counted in every process)."""
    total = anon = 0
    try:
        if _HAVE_PSS:
            with open(f"/proc/{pid}/smaps_rollup") as f:
                for line in f:
                    if line.startswith("Pss:"):
                        total = int(line.split()[1])
                    elif line.startswith("Pss_Anon:"):
                        anon = int(line.split()[1])
        else:
            with open(f"/proc/{pid}/status") as f:
                for line in f:
                    if line.startswith("VmRSS:"):
                        total = int(line.split()[1])
                    elif line.startswith("RssAnon:"):
                        anon = int(line.split()[1])
    except (OSError, ValueError, IndexError):
        pass
    return total, anon


TREE_METRIC = "PSS" if _HAVE_PSS else "RSS"


class _Sampler(threading.Thread):
    """Polls the memory of a process and all its descendants (worker processes count too)."""

    def __init__(self, pid: int, interval: float = 0.05) -> None:
        super().__init__(daemon=True)
        self.pid, self.interval = pid, interval
        self.peak_kb = self.peak_anon_kb = 0
        self.stop = threading.Event()

    def run(self) -> None:
        while not self.stop.is_set():
            tot = anon = 0
            for p in _descendants(self.pid)[1:]:  # [0] is the GNU time / launcher wrapper
                t, a = _mem_kb(p)
                tot += t
                anon += a
            self.peak_kb = max(self.peak_kb, tot)
            self.peak_anon_kb = max(self.peak_anon_kb, anon)
            self.stop.wait(self.interval)


_TIME = "/usr/bin/time"
# Fallback when GNU time is missing: a small launcher that forks, execs and reports
# ru_maxrss of that child only. (wait4 on a child of this process would not do: Linux keeps
# the pre-exec high-water mark, i.e. the RSS of this benchmark process, in ru_maxrss.)
_LAUNCHER = (
    "import os,sys\n"
    "out=sys.argv[1]; argv=sys.argv[2:]\n"
    "pid=os.fork()\n"
    "if pid==0:\n"
    "    try: os.execvp(argv[0], argv)\n"
    "    finally: os._exit(127)\n"
    "_,st,ru=os.wait4(pid,0)\n"
    "open(out,'w').write(str(ru.ru_maxrss))\n"
    "sys.exit(os.waitstatus_to_exitcode(st) & 255)\n"
)


def rss_method() -> str:
    """How peak RSS is measured on this machine (for the report)."""
    if os.access(_TIME, os.X_OK):
        return "GNU time `%M` (/usr/bin/time -f %M)"
    return "ru_maxrss from a fork+exec launcher (its own ~10 MB pre-exec RSS may be included)"


class _Pty:
    """A pseudo-terminal whose output a thread drains (keeping the tail): the command sees a
    terminal on stdout and stderr, as a user's shell gives it (progress bars on)."""

    def __init__(self) -> None:
        import pty

        self.master, self.slave = pty.openpty()
        self.tail = b""
        self.thread = threading.Thread(target=self._drain, daemon=True)
        self.thread.start()

    def _drain(self) -> None:
        while True:
            try:
                data = os.read(self.master, 65536)
            except OSError:  # EIO once the last writer closed
                break
            if not data:
                break
            self.tail = (self.tail + data)[-3000:]

    def close(self) -> str:
        """Wait for the output to end (the command exited); its tail as text."""
        os.close(self.slave)
        self.thread.join(timeout=10)
        os.close(self.master)
        return self.tail.decode("utf-8", "replace")


def run_proc(argv: Sequence[str], *, stdout: Optional[Path] = None, sample: bool = False,
             timeout: float = 3600.0, env: Optional[Dict[str, str]] = None, tty: bool = False) -> Proc:
    """Run ``argv`` to the end; wall time, peak RSS from the OS, optional tree sampling.

    stdout goes to ``stdout`` (a file) or /dev/null: MegEngine's script prints a page per
    divergent var and a terminal would slow it down; stderr is kept for error messages.
    With ``tty`` both go to a pseudo-terminal instead: what a user at a terminal runs.
    """
    if tty:
        return _run_tty(argv, timeout=timeout, env=env)
    with tempfile.TemporaryDirectory() as tmp:
        rss_file = Path(tmp) / "maxrss"
        if os.access(_TIME, os.X_OK):
            full = [_TIME, "-f", "%M", "-o", str(rss_file), *argv]
        else:
            full = [PY, "-I", "-S", "-c", _LAUNCHER, str(rss_file), *argv]
        with open(Path(tmp) / "stderr", "w+b") as err, (open(stdout, "wb") if stdout else open(os.devnull, "wb")) as out:
            t0 = time.perf_counter()
            p = subprocess.Popen(full, stdout=out, stderr=err, cwd=ROOT, env=env, start_new_session=True)
            sampler = _Sampler(p.pid) if sample else None
            if sampler:
                sampler.start()
            timer = threading.Timer(timeout, lambda: os.killpg(p.pid, signal.SIGKILL))
            timer.start()
            try:
                p.wait()
            finally:
                timer.cancel()
            seconds = time.perf_counter() - t0
            if sampler:
                sampler.stop.set()
                sampler.join()
            err.seek(0)
            tail = err.read()[-3000:].decode("utf-8", "replace")
        try:
            maxrss_kb = float(rss_file.read_text().split()[-1])
        except (OSError, ValueError, IndexError):
            maxrss_kb = float("nan")
    return Proc(list(argv), p.returncode, seconds, maxrss_kb / 1024.0,
                sampler.peak_kb / 1024.0 if sampler else None,
                sampler.peak_anon_kb / 1024.0 if sampler else None, tail)


def _run_tty(argv: Sequence[str], *, timeout: float, env: Optional[Dict[str, str]]) -> Proc:
    """:func:`run_proc` with stdout and stderr on a pseudo-terminal."""
    with tempfile.TemporaryDirectory() as tmp:
        rss_file = Path(tmp) / "maxrss"
        if os.access(_TIME, os.X_OK):
            full = [_TIME, "-f", "%M", "-o", str(rss_file), *argv]
        else:
            full = [PY, "-I", "-S", "-c", _LAUNCHER, str(rss_file), *argv]
        term = _Pty()
        env = {**(env if env is not None else os.environ), "TERM": "xterm-256color", "COLUMNS": "120", "LINES": "40"}
        t0 = time.perf_counter()
        p = subprocess.Popen(full, stdin=subprocess.DEVNULL, stdout=term.slave, stderr=term.slave, cwd=ROOT, env=env,
                             start_new_session=True)
        timer = threading.Timer(timeout, lambda: os.killpg(p.pid, signal.SIGKILL))
        timer.start()
        try:
            p.wait()
        finally:
            timer.cancel()
        seconds = time.perf_counter() - t0
        tail = term.close()
        try:
            maxrss_kb = float(rss_file.read_text().split()[-1])
        except (OSError, ValueError, IndexError):
            maxrss_kb = float("nan")
    return Proc(list(argv), p.returncode, seconds, maxrss_kb / 1024.0, None, None, tail)


def _ok(argv: Sequence[str]) -> bool:
    try:
        return subprocess.run(list(argv), cwd=ROOT, capture_output=True, timeout=120).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


def _median(xs: Sequence[float]) -> Optional[float]:
    return statistics.median(xs) if xs else None


# ------------------------------------------------------------------ sections


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


def bench_compare(pair: PairInfo, work: Path, repeat: int, have_lar: bool, have_mge: bool, warm: bool,
                  name: str = "compare", variants: bool = True) -> Section:
    """Section 1: lar-prec compare vs MegEngine's compare_binary_iodump, alternating.

    `lar-prec` is the command as a user types it (its default parallelism: every core), piped;
    `lar-prec, terminal` the same with stdout and stderr on a pseudo-terminal, what a user at
    a terminal gets. Also timed (``variants``): `lar-prec --jobs 1` (one process) when there
    are several cores, and lar-prec's numpy path (LAR_PREC_NO_KERNEL=1), which is what runs
    where the C kernel could not be built.
    """
    s = Section(name)
    a, b = pair.dir_a, pair.dir_b
    mge_out = work / f"{name}-mge.txt"
    j0, j1, j2, j3 = (work / f"{name}-{i}.json" for i in range(4))
    tools: List[Tuple[str, List[str], Optional[Path]]] = []
    envs: Dict[str, Dict[str, str]] = {}
    ttys = {"lar-prec, terminal"}
    if have_lar:
        tools.append(("lar-prec", LAR + ["compare", a, b, "--threshold", THRESHOLD, "--json", str(j0)], j0))
        tools.append(("lar-prec, terminal", LAR + ["compare", a, b, "--threshold", THRESHOLD, "--json", str(j3)], j3))
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
    for i in range(repeat):
        order = tools if i % 2 == 0 else tools[::-1]
        for tool, argv, _ in order:
            p = run_proc(argv, env=envs.get(tool), tty=tool in ttys)
            runs[tool].append(p)
            print(f"  {tool} run {i + 1}/{repeat}: {p.seconds:.2f} s, rc {p.returncode}, peak RSS {p.maxrss_mb:.0f} MB",
                  flush=True)
    for tool, _, json_path in tools:
        s.data[tool] = _tool_summary(pair, runs[tool], first[tool], json_path, mge_out)
    s.data["generated_divergent"] = pair.n_divergent
    mge = s.data.get("megengine")
    for tool in s.data["tools"]:
        lar = s.data[tool]
        if tool != "megengine" and mge and lar["median_s"] and mge["median_s"]:
            lar["speedup"] = mge["median_s"] / lar["median_s"]
    if "lar-prec" in s.data and "speedup" in s.data["lar-prec"]:
        s.data["speedup"] = s.data["lar-prec"]["speedup"]
    s.note = "warm page cache" if warm else ""
    return s


def bench_memory(pair: PairInfo, work: Path, have_lar: bool) -> Section:
    """Section 2: peak memory of lar-prec compare on the big pair (two runs, the second warm)."""
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


def bench_rooting(n_vars: int) -> Section:
    """Section 4: roots of a synthetic n_vars graph.

    The graph is a chain with skip connections (gen.graph_edges); divergence starts at a third
    and again at two thirds, so there are two true roots. Per-var results are built in memory
    (untimed: that is the comparison's work); timed is building the tree and its roots().
    """
    s = Section("rooting")
    s.data["n_vars"] = n_vars
    try:
        from lar_prec import vartree
        from lar_prec.compare import VarDiff
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
    return s


def _nvd_row(p: Proc, out_json: Path, i: int) -> Dict[str, Any]:
    """One naive-vs-default run: wall time, its load_and_run runs' seconds, the overhead."""
    runs_s = None
    try:
        rep = json.loads(out_json.read_text())
        runs_s = [float(r["seconds"]) for r in rep.get("runs", [])]
    except (OSError, ValueError, KeyError, TypeError):
        pass
    row: Dict[str, Any] = {"i": i, "wall_s": p.seconds, "rc": p.returncode, "run_seconds": runs_s,
                           "stderr_tail": p.stderr_tail[-600:] if p.returncode not in (0, 1) else ""}
    if runs_s:
        lar_s = sum(runs_s)
        row["analysis_s"] = p.seconds - lar_s
        row["overhead"] = (p.seconds - lar_s) / lar_s if lar_s > 0 else None
    print(f"  naive-vs-default resnet {'warm-up' if i == 0 else f'run {i}'}: {p.seconds:.2f} s, rc {p.returncode}",
          flush=True)
    return row


def bench_nvd(repeat: int, work: Path, warmup: bool = True) -> Section:
    """Section 5: naive-vs-default on the resnet case; overhead = wall - sum of run seconds."""
    s = Section("naive-vs-default")
    if not _ok(LAR + ["naive-vs-default", "--help"]):
        s.available = False
        s.note = "not available: `lar-prec naive-vs-default` does not exist yet"
        return s
    manifest = ROOT / "cases" / "build" / "manifest.json"
    if not manifest.exists():
        s.available = False
        s.note = "not available: cases are not built (run `make cases`)"
        return s
    cases = {c["name"]: c for c in json.loads(manifest.read_text())["cases"]}
    if "resnet" not in cases:
        s.available = False
        s.note = "not available: no resnet case in the manifest"
        return s
    c = cases["resnet"]
    base = manifest.parent
    inputs = []
    for spec in c["inputs"]:
        name, path = spec.split(":", 1)
        inputs.append(f"{name}:{base / path}")
    help_text = subprocess.run(LAR + ["naive-vs-default", "--help"], cwd=ROOT, capture_output=True,
                               text=True).stdout
    rows = []
    first = 0 if warmup else 1
    for i in range(first, max(1, repeat) + 1):
        # piped (progress bars off) and on a terminal (progress bars on), alternating
        for mode in (("pipe", "terminal") if i % 2 else ("terminal", "pipe")):
            out_json = work / f"nvd-{i}-{mode}.json"
            argv = LAR + ["naive-vs-default", str(base / c["model"]), "--input", ";".join(inputs),
                          "--json", str(out_json)]
            for opt in ("--out", "--workdir", "--work-dir"):
                if f"{opt} " in help_text or f"{opt}=" in help_text:
                    argv += [opt, str(work / f"nvd-runs-{i}-{mode}")]
                    break
            row = _nvd_row(run_proc(argv, tty=mode == "terminal"), out_json, i)
            row["mode"] = mode
            rows.append(row)
    timed = [r for r in rows if r["i"] > 0] if warmup else rows
    s.data["argv"] = " ".join(argv)
    s.data["rows"] = timed
    for mode, key in (("pipe", ""), ("terminal", "_terminal")):
        mine = [r for r in timed if r["mode"] == mode]
        s.data["overhead_median" + key] = _median([r["overhead"] for r in mine if r.get("overhead") is not None])
        s.data["analysis_median_s" + key] = _median([r["analysis_s"] for r in mine if "analysis_s" in r])
        s.data["wall_median_s" + key] = _median([r["wall_s"] for r in mine])
    over = [r["overhead"] for r in timed if r.get("overhead") is not None]
    if not over:
        s.note = "the JSON report has no per-run seconds, so the overhead cannot be computed"
    return s


# ------------------------------------------------------------------ report


def ensure_bytecode() -> str:
    """Compile lar_prec's modules to ``__pycache__`` once, as ``pip install`` does.

    With PYTHONDONTWRITEBYTECODE set (some sandboxes and CI images set it) an editable
    install never caches bytecode, so every run would recompile lar-prec's sources (~0.1 s):
    a start-up cost no installed copy pays. Python still reads a cache that exists.
    """
    import compileall

    spec = importlib.util.find_spec("lar_prec")
    if spec is None or not spec.submodule_search_locations:
        return "lar_prec not found"
    where = list(spec.submodule_search_locations)[0]
    ok = compileall.compile_dir(where, quiet=1, maxlevels=0)
    return f"lar_prec byte-compiled in {where}/__pycache__ before timing, as pip install does" + ("" if ok else " (some files failed)")


def machine_info() -> Dict[str, str]:
    """CPU, cores, RAM, OS and versions, without importing megengine."""
    cpu = "unknown"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    ram = "unknown"
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                ram = f"{int(line.split()[1]) / 1024 / 1024:.1f} GiB"
    except OSError:
        pass
    from importlib import metadata

    def ver(name: str) -> str:
        try:
            return metadata.version(name)
        except metadata.PackageNotFoundError:
            return "not installed"

    try:
        commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True,
                                text=True, timeout=10).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--", "lar_prec"], cwd=ROOT, capture_output=True,
                               text=True, timeout=10).stdout.strip()
        if dirty:
            commit += " (lar_prec/ has uncommitted changes)"
    except (OSError, subprocess.TimeoutExpired):
        commit = "unknown"
    try:
        load = " ".join(Path("/proc/loadavg").read_text().split()[:3])
    except OSError:
        load = "unknown"
    return {
        "load": load,
        "cpu": cpu,
        "cores": str(os.cpu_count()),
        "ram": ram,
        "os": f"{platform.system()} {platform.release()}",
        "python": platform.python_version(),
        "numpy": ver("numpy"),
        "networkx": ver("networkx"),
        "megengine": ver("megengine"),
        "lar-prec": f"{ver('lar-prec')} (git {commit})",
        "kernel": kernel_state(),
    }


def _verdict(value: Optional[float], goal: float, higher_is_better: bool) -> str:
    if value is None:
        return "n/a"
    ok = value >= goal if higher_is_better else value < goal
    return "PASS" if ok else "FAIL"


def _row(target: str, value: Optional[float], shown: Callable[[float], str], goal: str, limit: float,
         higher_is_better: bool) -> Dict[str, Any]:
    """One row of the targets table: ``shown(value)``, or "not available" without a value."""
    return {"target": target, "value": value, "shown": shown(value) if value is not None else "not available",
            "goal": goal, "result": _verdict(value, limit, higher_is_better)}


def targets(sections: Dict[str, Section]) -> List[Dict[str, Any]]:
    """The issue's targets with the measured values and PASS/FAIL/n/a."""
    rows: List[Dict[str, Any]] = []
    cmp_ = sections.get("compare")
    lar = cmp_.data.get("lar-prec") if cmp_ else None
    speed = cmp_.data.get("speedup") if cmp_ else None
    other = [t for t in (cmp_.data.get("tools", []) if cmp_ else []) if t.startswith("lar-prec ")]
    alt = cmp_.data[other[0]] if other else None
    alt_speed = f" (`{other[0]}`: {alt['speedup']:.1f}x)" if alt and alt.get("speedup") else ""
    alt_gbps = f" (`{other[0]}`: {alt['gbps']:.2f} GB/s)" if alt and alt.get("gbps") else ""
    rows.append(_row("compare: speed vs MegEngine compare_binary_iodump (main pair)", speed,
                     lambda v: f"{v:.1f}x{alt_speed}", f">= {TARGETS['speedup']:g}x", TARGETS["speedup"], True))
    gbps = lar.get("gbps") if lar else None
    rows.append(_row("compare: dump read throughput (main pair, whole process)", gbps,
                     lambda v: f"{v:.2f} GB/s{alt_gbps}", f">= {TARGETS['gbps']:g} GB/s", TARGETS["gbps"], True))
    mem = sections.get("memory")
    peak = mem.data.get("peak_mb") if mem and mem.available else None
    if peak is None and lar:
        peak_note = " (main pair only; big pair skipped)"
        peak = max(lar["maxrss_mb"], lar.get("tree_peak_mb") or 0.0)
    else:
        peak_note = ""
    rows.append(_row("compare: peak RSS (big pair)" + peak_note, peak,
                     lambda v: f"{v:.0f} MB", f"< {TARGETS['peak_rss_mb']:g} MB", TARGETS["peak_rss_mb"], False))
    st = sections.get("startup")
    helps = st.data.get("help_median_s") if st and st.available else None
    rows.append(_row("`lar-prec --help` wall time", helps, lambda v: f"{v:.3f} s", f"< {TARGETS['help_s']:g} s",
                     TARGETS["help_s"], False))
    imp = st.data.get("megengine_imported_by") if st and st.available else None
    if imp is None:
        rows.append({"target": "no megengine import (--help, compare)", "value": None, "shown": "not available",
                     "goal": "none imported", "result": "n/a"})
    else:
        bad = {k: v for k, v in imp.items() if v}
        shown = "none (" + ", ".join(imp) + ")" if not bad else "; ".join(f"{k}: {', '.join(v[:3])}" for k, v in bad.items())
        if "compare" not in imp:
            shown += "; compare not checked (not available)"
        rows.append({"target": "no megengine import (--help, compare)", "value": not bad, "shown": shown,
                     "goal": "none imported", "result": "PASS" if not bad and "compare" in imp else ("FAIL" if bad else "n/a")})
    rt = sections.get("rooting")
    rs = rt.data.get("median_s") if rt and rt.available else None
    rows.append(_row(f"rooting a graph of {rt.data.get('n_vars', ROOTING_VARS) if rt else ROOTING_VARS:,} variables", rs,
                     lambda v: f"{v:.3f} s", f"< {TARGETS['rooting_s']:g} s", TARGETS["rooting_s"], False))
    nv = sections.get("naive-vs-default")
    ov = nv.data.get("overhead_median") if nv and nv.available else None
    rows.append(_row("naive-vs-default (resnet): analysis time / load_and_run time", ov, lambda v: f"{100 * v:.1f}%",
                     f"< {100 * TARGETS['nvd_overhead']:g}%", TARGETS["nvd_overhead"], False))
    return rows


def _pair_line(p: PairInfo) -> str:
    dts = ", ".join(f"{k} {v}" for k, v in p.dtype_counts.items())
    gen = f"generated in {p.seconds:.1f} s" if p.seconds else "reused from an earlier --keep run"
    return (f"{_fmt_bytes(p.total_bytes)} in two folders of {p.n_vars} variables ({dts}); {p.n_divergent} divergent; "
            f"largest variable {_fmt_bytes(p.largest_var_bytes)}; {gen}")


def _section_data(L: list, s) -> "dict | None":
    """A section's data, or None after writing why it has none (skipped or not available)."""
    if s is None:
        L.append("Skipped.")
        return None
    if not s.available:
        L.append(s.note + ".")
        return None
    return s.data


def _render_compare(L: List[str], s: Optional[Section], pair: Optional[PairInfo], skipped: str) -> None:
    if pair is not None:
        L.append(f"Pair: {_pair_line(pair)}.")
        L.append("")
    if s is None:
        L.append(skipped)
        return
    if not s.available:
        L.append(s.note + ".")
        return
    L.append(f"| tool | median | GB/s | speed-up | runs (s) | peak RSS, one process | peak {TREE_METRIC}, process tree (sampled) "
             "| of which anonymous | exit codes | divergent vars found |")
    L.append("|---|---|---|---|---|---|---|---|---|---|")
    labels = list(s.data.get("tools", []))
    if "lar_note" in s.data:
        labels.insert(0, "lar-prec")
    if "mge_note" in s.data:
        labels.append("megengine")
    for tool in labels:
        d = s.data.get(tool)
        if d is None:
            L.append(f"| {tool} | {s.data.get('lar_note' if tool == 'lar-prec' else 'mge_note', 'not available')} "
                     "| | | | | | | | |")
            continue
        tree = f"{d['tree_peak_mb']:.0f} MB" if d.get("tree_peak_mb") is not None else "-"
        anon = f"{d['tree_peak_anon_mb']:.0f} MB" if d.get("tree_peak_anon_mb") is not None else "-"
        found = d.get("divergent_found")
        sp = f"{d['speedup']:.2f}x" if d.get("speedup") else "-"
        L.append(f"| {tool} | {d['median_s']:.2f} s | {d['gbps']:.2f} | {sp} | {', '.join(f'{x:.2f}' for x in d['seconds'])} "
                 f"| {d['maxrss_mb']:.0f} MB | {tree} | {anon} | {', '.join(map(str, d['returncodes']))} "
                 f"| {found if found is not None else '?'} |")
    L.append("")
    L.append(f"Generated divergent variables: {s.data['generated_divergent']}. "
             f"Threshold: `{THRESHOLD}` for both (`--threshold` / `-e`). Speed-up = MegEngine median / this median. "
             "Peak RSS of one process is the largest over all runs; the tree columns are sampled in the warm-up run.")
    for tool in s.data.get("tools", []):
        d = s.data[tool]
        L.append(f"- {tool}: `{d['argv']}`" + (f" (timed from the {d['timed_from']})" if d["timed_from"] != "repeat runs" else ""))
        if d.get("stderr_tail"):
            L.append(f"  - failed: `{' '.join(d['stderr_tail'].split())[-400:]}`")


def render(args: argparse.Namespace, machine: Dict[str, str], pairs: Dict[str, PairInfo],
           sections: Dict[str, Section], rows: List[Dict[str, Any]], started: str, total_s: float) -> str:
    """RESULTS.md text."""
    L: List[str] = []
    L.append("# lar-prec benchmark results")
    L.append("")
    L.append(f"Generated by `bench/run.py` on {started} in {total_s:.0f} s; do not edit by hand (`make bench` rewrites it).")
    if args.quick:
        L.append("")
        L.append("**Quick mode** (`--quick`): tiny sizes that only prove the script works; "
                 "the PASS/FAIL column means nothing at these sizes.")
    L.append("")
    L.append("## Machine")
    L.append("")
    L.append(f"- CPU: {machine['cpu']}, {machine['cores']} cores; RAM {machine['ram']}; {machine['os']}")
    L.append(f"- Python {machine['python']}, numpy {machine['numpy']}, networkx {machine['networkx']}, "
             f"megengine {machine['megengine']}, lar-prec {machine['lar-prec']}")
    L.append(f"- lar-prec compares float32 with: {machine.get('kernel', '?')} (`lar-prec --version`); "
             "`lar-prec, numpy path` rows run with LAR_PREC_NO_KERNEL=1, as where the C kernel cannot be built.")
    L.append(f"- Options: `{' '.join(args.argv)}`")
    L.append(f"- Load average (1, 5, 15 min) at the start: {machine['load']}; at the end: {machine.get('load_end', '?')}. "
             "Other work on the machine slows both tools alike (they alternate) but lowers GB/s.")
    if machine.get("bytecode"):
        L.append(f"- Bytecode: {machine['bytecode']} (PYTHONDONTWRITEBYTECODE={os.environ.get('PYTHONDONTWRITEBYTECODE', 'unset')} here).")
    L.append("- Page cache: warm. Each command runs once untimed first; times are whole-process wall "
             "clock (start-up included), medians over the repeats, the compare commands alternating.")
    L.append("")
    L.append("## Targets")
    L.append("")
    L.append("| target | measured | goal | result |")
    L.append("|---|---|---|---|")
    for r in rows:
        L.append(f"| {r['target']} | {r['shown']} | {r['goal']} | {r['result']} |")
    L.append("")

    L.append("## 1. compare: lar-prec vs MegEngine")
    L.append("")
    _render_compare(L, sections.get("compare"), pairs.get("main"), "Skipped (`--skip compare`).")
    L.append("")
    L.append("## 2. compare: peak memory on the big pair")
    L.append("")
    s = sections.get("memory")
    if "big" in pairs:
        L.append(f"Pair: {_pair_line(pairs['big'])}.")
        L.append("")
    if s is None:
        L.append("Skipped (`--big 0` or `--skip memory`).")
    elif not s.available:
        L.append(s.note + ".")
    else:
        d = s.data
        L.append(f"- `{d['argv']}`")
        L.append(f"- Runs: {', '.join(f'{x:.2f}' for x in d['seconds'])} s (second run: {d['gbps_warm']:.2f} GB/s, with memory sampling); "
                 f"exit codes {', '.join(map(str, d['returncodes']))}; divergent vars found "
                 f"{d['divergent_found']} of {d['generated_divergent']} generated.")
        L.append(f"- Peak memory: the command's process (RSS) {d['maxrss_mb']:.0f} MB; its process tree ({TREE_METRIC}, "
                 f"sampled every 50 ms) {d['tree_peak_mb']:.0f} MB, of which anonymous {d['tree_peak_anon_mb']:.0f} MB "
                 "(the rest are file pages: the program and libraries, and any mapped dump pages).")
        if d.get("stderr_tail"):
            L.append(f"- failed: `{' '.join(d['stderr_tail'].split())[-400:]}`")
    L.append("")

    L.append("## 2b. compare: many small variables")
    L.append("")
    L.append("Per-variable cost (headers, titles, bookkeeping) rather than bytes: real detection models have "
             "thousands of small variables. No target in issue 7; informational.")
    L.append("")
    _render_compare(L, sections.get("many"), pairs.get("many"), "Skipped (`--many-vars 0` or `--skip many`).")
    L.append("")

    L.append("## 3. start-up")
    L.append("")
    d = _section_data(L, sections.get("startup"))
    if d is not None:
        L.append(f"- `lar-prec --help`: median {d['help_median_s']:.3f} s over {len(d['help_seconds'])} runs "
                 f"({', '.join(f'{x:.3f}' for x in d['help_seconds'])}).")
        if d.get("tiny_compare_median_s") is not None:
            L.append(f"- `lar-prec compare --json` on a pair of {d['tiny_vars']} vars ({_fmt_bytes(d['tiny_bytes'])}): median "
                     f"{d['tiny_compare_median_s']:.3f} s ({', '.join(f'{x:.3f}' for x in d['tiny_compare_seconds'])}): the fixed "
                     "cost (interpreter, numpy and lar-prec imports, indexing, report) every compare pays once.")
            cmp_ = sections.get("compare")
            lar = cmp_.data.get("lar-prec") if cmp_ is not None and cmp_.available else None
            pair = pairs.get("main")
            if lar and lar.get("median_s") and pair is not None and lar["median_s"] > d["tiny_compare_median_s"]:
                rate = pair.total_bytes / 1e9 / (lar["median_s"] - d["tiny_compare_median_s"])
                L.append(f"- Section 1's main pair without that fixed cost: {rate:.2f} GB/s (the target counts the whole process).")
        for label, mods in d["megengine_imported_by"].items():
            L.append(f"- `lar-prec {label}` with PYTHONPROFILEIMPORTTIME=1 (exit code {d['import_check_rc'][label]}): "
                     + ("no megengine module imported." if not mods else f"imports {', '.join(mods)}."))
        if d.get("compare_note"):
            L.append(f"- `lar-prec compare`: {d['compare_note']}.")
    L.append("")

    L.append("## 4. rooting")
    L.append("")
    d = _section_data(L, sections.get("rooting"))
    if d is not None:
        L.append(f"- {d['n_vars']:,} variables (chain with skip connections, two divergent stretches): "
                 f"median {d['median_s']:.3f} s over 3 ({', '.join(f'{x:.3f}' for x in d['seconds'])}): "
                 f"building the tree {d['build_median_s']:.3f} s, roots() {d['roots_median_s']:.3f} s.")
        L.append(f"- Roots found: {d['n_roots']} ({', '.join(map(str, d['root_ids']))}); expected "
                 f"{', '.join(map(str, d['expected_roots']))}.")
        L.append(f"- API used: {d['api']}.")
    L.append("")

    L.append("## 5. naive-vs-default on resnet")
    L.append("")
    nvd = sections.get("naive-vs-default")
    d = _section_data(L, nvd)
    if d is not None:
        L.append(f"- `{d['argv']}`")
        L.append("- analysis = whole-command wall time minus the `seconds` of its load_and_run runs in the JSON `runs`.")
        L.append("")
        L.append("- pipe: stdout and stderr piped (no progress bars); terminal: on a pseudo-terminal, progress bars "
                 "on, as a user at a terminal runs it.")
        L.append("")
        L.append("| run | where | wall (s) | load_and_run runs (s) | analysis (s) | overhead | exit code |")
        L.append("|---|---|---|---|---|---|---|")
        for r in d["rows"]:
            rs = ", ".join(f"{x:.2f}" for x in r["run_seconds"]) if r.get("run_seconds") else "?"
            an = f"{r['analysis_s']:.2f}" if "analysis_s" in r else "?"
            ov = f"{100 * r['overhead']:.1f}%" if r.get("overhead") is not None else "?"
            L.append(f"| {r.get('i', '?')} | {r.get('mode', 'pipe')} | {r['wall_s']:.2f} | {rs} | {an} | {ov} | {r['rc']} |")
        if nvd.note:
            L.append("")
            L.append(nvd.note + ".")
    L.append("")
    L.append("## Notes")
    L.append("")
    L.append("- Pairs come from `bench/gen.py`: realistic titles (Host2DeviceCopy, ImmutableTensor weights, "
             "ConvolutionForward, Elemwise RELU/ADD with skips, TypeCvt, Argmax), random values; clean variables "
             "differ by float32 rounding-level noise (1e-7 relative), divergent ones by 1e-2 relative with at "
             "least one element far above the threshold, so both tools must flag exactly the generated set.")
    L.append("- The timed pair holds only dtypes MegEngine's script can load (Float32, Int32, Float16, Uint8, "
             "Int8): it raises KeyError on Bool (12) and Uint16 (13) outside its try block and aborts the whole "
             "comparison. The big pair, read by lar-prec only, also holds Bool and Uint16 variables.")
    L.append("- GB/s = bytes of both folders / median whole-process wall time.")
    L.append(f"- Peak RSS of the command's process: {rss_method()}; with worker processes that is the largest single "
             f"process. The whole process tree (the command and its workers) is also sampled from /proc every 50 ms in the "
             f"warm-up and memory runs as the sum of {TREE_METRIC}"
             + (" (proportional set size: pages a forked worker shares with its parent count once)" if TREE_METRIC == "PSS"
                else "") + ", with its anonymous part apart. The memory target uses the larger of the two.")
    return "\n".join(L) + "\n"


# ------------------------------------------------------------------ main


def main(argv: Optional[Sequence[str]] = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--size", default="1G", help="main pair size, both folders together (default 1G = 2 x 500 MB)")
    ap.add_argument("--big", default="4G", help="memory-check pair size (default 4G; 0 to skip)")
    ap.add_argument("--repeat", type=int, default=3, help="timed runs per tool (default 3)")
    ap.add_argument("--vars", type=int, default=400, help="variables per folder (default 400)")
    ap.add_argument("--divergent", type=float, default=0.5, help="share of divergent variables (default 0.5)")
    ap.add_argument("--many-vars", type=int, default=20_000,
                    help="variables of the many-small-variables pair (default 20000; 0 skips it)")
    ap.add_argument("--rooting-vars", type=int, default=ROOTING_VARS, help="graph size for the rooting benchmark")
    ap.add_argument("--quick", action="store_true",
                    help="tiny sizes, each command run once (no warm-up): proves the script works (tests)")
    ap.add_argument("--out", default=str(ROOT / "bench" / "RESULTS.md"), help="report file (default bench/RESULTS.md)")
    ap.add_argument("--json", default=None, help="also write the raw numbers as JSON here")
    ap.add_argument("--data", default=str(ROOT / "bench" / "data"), help="where pairs are generated (default bench/data)")
    ap.add_argument("--keep", action="store_true", help="keep generated pairs (and reuse kept ones with the same spec)")
    ap.add_argument("--skip", default="", help="comma list of sections to skip: compare,memory,many,startup,rooting,nvd,megengine")
    args = ap.parse_args(argv)
    args.argv = ["bench/run.py", *(argv if argv is not None else sys.argv[1:])]
    if args.quick:
        args.size = "8M" if args.size == "1G" else args.size
        args.big = "16M" if args.big == "4G" else args.big
        args.repeat = 0 if args.repeat == 3 else args.repeat  # the warm-up run is the only run
        args.vars = 60 if args.vars == 400 else args.vars
        args.rooting_vars = 2000 if args.rooting_vars == ROOTING_VARS else args.rooting_vars
        args.many_vars = 300 if args.many_vars == 20_000 else args.many_vars
    skip = {x.strip() for x in args.skip.split(",") if x.strip()}
    size, big = parse_size(args.size), parse_size(args.big)

    t_start = time.perf_counter()
    started = _dt.datetime.now().astimezone().strftime("%Y-%m-%d %H:%M %Z")
    machine = machine_info()
    print(f"lar-prec benchmark: {machine['cpu']}, {machine['cores']} cores, {machine['ram']}", flush=True)
    machine["bytecode"] = ensure_bytecode()
    have_lar = _ok(LAR + ["compare", "--help"])
    have_mge = "megengine" not in skip and importlib.util.find_spec("megengine") is not None
    print(f"  lar-prec compare: {'available' if have_lar else 'not available'}; "
          f"megengine compare_binary_iodump: {'available' if have_mge else 'not available'}", flush=True)

    data_root = Path(args.data)
    data_root.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix="lar-prec-bench-"))
    pairs: Dict[str, PairInfo] = {}
    sections: Dict[str, Section] = {}
    made: List[Path] = []
    try:
        # a two-variable pair for the import check
        tiny = generate_pair(work / "tiny", PairSpec(total_bytes=200_000, n_vars=4, divergent_share=0.5))
        if "compare" not in skip:
            print(f"[1] compare on a {_fmt_bytes(size)} pair", flush=True)
            root = data_root / f"pair-{args.size}"
            made.append(root)
            pairs["main"] = get_pair(root, PairSpec(total_bytes=size, n_vars=args.vars,
                                                     divergent_share=args.divergent), args.keep)
            print(f"  {_pair_line(pairs['main'])}", flush=True)
            sections["compare"] = bench_compare(pairs["main"], work, args.repeat, have_lar, have_mge, warm=True)
        if big and "memory" not in skip:
            print(f"[2] peak memory on a {_fmt_bytes(big)} pair", flush=True)
            root = data_root / f"pair-{args.big}-big"
            made.append(root)
            # one variable of a quarter of a folder: far beyond the memory budget at full size
            pairs["big"] = get_pair(root, PairSpec(total_bytes=big, n_vars=args.vars, divergent_share=args.divergent,
                                                    megengine_compatible=False, largest_var_bytes=big // 8,
                                                    seed=7), args.keep)
            print(f"  {_pair_line(pairs['big'])}", flush=True)
            sections["memory"] = bench_memory(pairs["big"], work, have_lar)
            if not args.keep:
                shutil.rmtree(root, ignore_errors=True)
        if args.many_vars and "many" not in skip:
            print(f"[2b] compare on {args.many_vars:,} small variables", flush=True)
            root = data_root / f"pair-{args.many_vars}-vars"
            made.append(root)
            # about 8 KB per variable and folder: the per-variable cost dominates
            pairs["many"] = get_pair(root, PairSpec(total_bytes=args.many_vars * 16_000, n_vars=args.many_vars,
                                                     divergent_share=args.divergent, seed=11), args.keep)
            print(f"  {_pair_line(pairs['many'])}", flush=True)
            sections["many"] = bench_compare(pairs["many"], work, args.repeat, have_lar, have_mge, warm=True, name="many",
                                             variants=False)
            if not args.keep:
                shutil.rmtree(root, ignore_errors=True)
        if "startup" not in skip:
            print("[3] start-up", flush=True)
            sections["startup"] = bench_startup(tiny, args.repeat, have_lar)
        if "rooting" not in skip:
            print(f"[4] rooting {args.rooting_vars:,} variables", flush=True)
            sections["rooting"] = bench_rooting(args.rooting_vars)
        if "nvd" not in skip:
            print("[5] naive-vs-default on resnet", flush=True)
            sections["naive-vs-default"] = bench_nvd(args.repeat, work, warmup=not args.quick)
    finally:
        if not args.keep:
            for root in made:
                shutil.rmtree(root, ignore_errors=True)
        shutil.rmtree(work, ignore_errors=True)

    try:
        machine["load_end"] = " ".join(Path("/proc/loadavg").read_text().split()[:3])
    except OSError:
        pass
    rows = targets(sections)
    total_s = time.perf_counter() - t_start
    text = render(args, machine, pairs, sections, rows, started, total_s)
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(text)
    if args.json:
        Path(args.json).write_text(json.dumps({
            "machine": machine, "started": started, "seconds": total_s, "quick": args.quick,
            "pairs": {k: asdict(v) for k, v in pairs.items()},
            "sections": {k: asdict(v) for k, v in sections.items()},
            "targets": rows,
        }, indent=1, default=str) + "\n")
    print()
    print("| target | measured | goal | result |")
    for r in rows:
        print(f"| {r['target']} | {r['shown']} | {r['goal']} | {r['result']} |")
    print(f"\nwrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
