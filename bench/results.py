"""The benchmark's report: the machine, and RESULTS.md (the targets' rows come from targets.py)."""
from __future__ import annotations

import argparse
import importlib.util
import os
import platform
import subprocess
from pathlib import Path
from typing import Any, Dict, List, Optional

from gen import PairInfo
from harness import Table
from procs import ROOT, TREE_METRIC, rss_method
from sections import THRESHOLD, Section, _fmt_bytes, kernel_state


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
    ok = compileall.compile_dir(where, quiet=1)  # every stage subpackage too
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
    table = Table("tool", "median", "GB/s", "speed-up", "runs (s)", "peak RSS, one process",
                  f"peak {TREE_METRIC}, process tree (sampled)", "of which anonymous", "exit codes", "divergent vars found")
    labels = list(s.data.get("tools", []))
    if "lar_note" in s.data:
        labels.insert(0, "lar-prec")
    if "mge_note" in s.data:
        labels.append("megengine")
    for tool in labels:
        d = s.data.get(tool)
        if d is None:
            table.row(tool, s.data.get("lar_note" if tool == "lar-prec" else "mge_note", "not available"), *[None] * 8)
            continue
        tree = f"{d['tree_peak_mb']:.0f} MB" if d.get("tree_peak_mb") is not None else "-"
        anon = f"{d['tree_peak_anon_mb']:.0f} MB" if d.get("tree_peak_anon_mb") is not None else "-"
        found = d.get("divergent_found")
        sp = f"{d['speedup']:.2f}x" if d.get("speedup") else "-"
        table.row(tool, f"{d['median_s']:.2f} s", f"{d['gbps']:.2f}", sp, ", ".join(f"{x:.2f}" for x in d["seconds"]),
                  f"{d['maxrss_mb']:.0f} MB", tree, anon, ", ".join(map(str, d["returncodes"])),
                  found if found is not None else "?")
    L += table.lines()
    L.append("")
    if s.data.get("auto_over_fixed"):
        n_runs = len((s.data.get("lar-prec") or {}).get("seconds") or ())
        L.append(f"`--threshold auto` / fixed: {s.data['auto_over_fixed']:.2f}x (medians of {n_runs} runs each, all rows alternating)"
                 + (f"; `cat` of both folders {s.data['cat_s']:.2f} s, auto at {100 * s.data['auto_of_cat']:.0f}% of its speed"
                    if s.data.get("auto_of_cat") else "")
                 + (f"; fixed threshold, this build / `--before`: {s.data['over_before']:.2f}x" if s.data.get("over_before")
                    else "") + ".")
        L.append("")
    L.append(f"Generated divergent variables: {s.data['generated_divergent']}. "
             f"Threshold: `{THRESHOLD}` for both (`--threshold` / `-e`); `auto` rows: lar-prec's default `--threshold auto`. "
             "Speed-up = MegEngine median / this median. "
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
    _render_head(L, args, machine, rows, started, total_s)
    L.append("## 1. compare: lar-prec vs MegEngine")
    L.append("")
    _render_compare(L, sections.get("compare"), pairs.get("main"), "Skipped (`--skip compare`).")
    L.append("")
    _render_memory(L, sections, pairs)
    L.append("## 2b. compare: many small variables")
    L.append("")
    L.append("Per-variable cost (headers, titles, bookkeeping) rather than bytes: real detection models have "
             "thousands of small variables. No target in issue 7; informational.")
    L.append("")
    _render_compare(L, sections.get("many"), pairs.get("many"), "Skipped (`--many-vars 0` or `--skip many`).")
    L.append("")
    _render_profile_many(L, sections.get("profile-many"))
    _render_startup(L, sections, pairs)
    _render_rooting(L, sections)
    _render_nvd(L, sections)
    _render_notes(L)
    return "\n".join(L) + "\n"


def _render_head(L: List[str], args: argparse.Namespace, machine: Dict[str, str], rows: List[Dict[str, Any]],
                 started: str, total_s: float) -> None:
    """Title, machine and the targets table."""
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
    table = Table("target", "measured", "goal", "result")
    for r in rows:
        table.row(r["target"], r["shown"], r["goal"], r["result"])
    L += table.lines()
    L.append("")


def _render_profile_many(L: List[str], s: Optional[Section]) -> None:
    """Section 2c: the many-variable compare per stage (issue 24)."""
    L.append("## 2c. where the time goes on the many-variable pair")
    L.append("")
    if s is None:
        L.append("Skipped (no many-variable pair).")
        L.append("")
        return
    if not s.available:
        L.append(s.note + ".")
        L.append("")
        return
    d = s.data
    n = d["n_vars"]
    L.append("`bench/profile_many.py`: each stage of `lar-prec compare` timed in one process (medians), start-up "
             "as a child process `python -c \"import lar_prec.cli\"`. The sum is close to, not equal to, the whole "
             "command in section 2b (which also parses its options and writes the terminal verdict).")
    L.append("")
    table = Table("stage", "what", "seconds", "us per var", "share")
    what = {"start-up": "interpreter and lar-prec imports (numpy is loaded by the stages that use it)", "index": "list both folders",
            "read": "every pair of files read once in C on threads: headers, titles, values compared; filed in the folders",
            "pairing": "names checked, execution order",
            "records": "each var's record made and judged (and what the batch reader left, measured)",
            "tree": "variable tree and roots", "report": "Report model (vars made lazily)", "json": "report written"}
    for k in ("start-up", "index", "read", "pairing", "records", "tree", "report", "json"):
        table.row(k, what[k], f"{d[k]:.3f}", f"{d[k] / n * 1e6:.0f}", f"{100 * d[k] / d['total']:.0f}%")
    table.row("total", None, f"{d['total']:.3f}", f"{d['total'] / n * 1e6:.0f}", None)
    L += table.lines()
    L.append("")


def _render_memory(L: List[str], sections: Dict[str, Section], pairs: Dict[str, PairInfo]) -> None:
    """Section 2: peak memory on the big pair."""
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
        if d.get("timed_seconds"):
            L.append(f"- Speed, {len(d['timed_seconds'])} more runs without memory sampling: {', '.join(f'{x:.2f}' for x in d['timed_seconds'])} s.")
        if d.get("cat_s"):
            L.append(f"- `cat` of both folders to /dev/null (`find A B -type f -exec cat {{}} +`, warm, median of 3): "
                     f"{d['cat_s']:.2f} s, {d['cat_gbps']:.2f} GB/s; lar-prec's best run without sampling is "
                     f"{100 * d['of_cat']:.0f}% of that speed.")
        if d.get("stderr_tail"):
            L.append(f"- failed: `{' '.join(d['stderr_tail'].split())[-400:]}`")
    L.append("")


def _render_startup(L: List[str], sections: Dict[str, Section], pairs: Dict[str, PairInfo]) -> None:
    """Section 3: start-up and the megengine import check."""
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


def _render_rooting(L: List[str], sections: Dict[str, Section]) -> None:
    """Section 4: rooting a big graph."""
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
        ch = d.get("chain")
        if ch:
            L.append(f"- A chain {ch['depth']:,} vars deep diverging at its last var (issue 41 #9): the tree, its "
                     f"root and the path from the input to it ({ch['path_len']:,} vars), median {ch['median_s']:.3f} s "
                     f"over 3 ({', '.join(f'{x:.3f}' for x in ch['seconds'])}), Python's allocations peaking at "
                     f"{ch['peak_mb']} MB (one search for every path: linear in the depth).")
    L.append("")


def _render_nvd(L: List[str], sections: Dict[str, Section]) -> None:
    """Section 5: naive-vs-default on resnet and the new architectures."""
    L.append("## 5. naive-vs-default on resnet, vit, mobilenetv3, gru_topk")
    L.append("")
    nvd = sections.get("naive-vs-default")
    d = _section_data(L, nvd)
    if d is not None:
        L.append(f"- `{d['argv']}`")
        L.append("- analysis = whole-command wall time minus the `seconds` of every load_and_run process it started: the "
                 "naive and default runs (the JSON `runs`) and the layerwise runs of local error (`local/**/run.json`). "
                 "The layerwise model's build, describing the model and everything else are analysis.")
        L.append("")
        L.append("- pipe: stdout and stderr piped (no progress bars); terminal: on a pseudo-terminal, progress bars "
                 "on, as a user at a terminal runs it.")
        L.append("")
        by_case = Table("case", "median overhead, piped", "median overhead, terminal")
        for name, med in d.get("by_case", {}).items():
            by_case.row(name, *(f"{100 * med[m]:.1f}%" if med.get(m) is not None else "?" for m in ("pipe", "terminal")))
        L += by_case.lines()
        L.append("")
        runs = Table("case", "run", "where", "wall (s)", "load_and_run runs (s)", "layerwise runs (s)", "analysis (s)",
                     "overhead", "exit code")
        for r in d["rows"]:
            rs = ", ".join(f"{x:.2f}" for x in r["run_seconds"]) if r.get("run_seconds") else "?"
            ls = ", ".join(f"{x:.2f}" for x in r.get("local_run_seconds") or []) or "-"
            an = f"{r['analysis_s']:.2f}" if "analysis_s" in r else "?"
            ov = f"{100 * r['overhead']:.1f}%" if r.get("overhead") is not None else "?"
            runs.row(r.get("case", "resnet"), r.get("i", "?"), r.get("mode", "pipe"), f"{r['wall_s']:.2f}", rs, ls, an, ov,
                     r["rc"])
        L += runs.lines()
        if nvd.note:
            L.append("")
            L.append(nvd.note + ".")
    L.append("")


def _render_notes(L: List[str]) -> None:
    """How the pairs are made and what the columns measure."""
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
