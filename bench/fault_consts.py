"""Faults in the cases' named fault constants, judged by `lar-prec compare` (issue 51).

    PYTHONPATH=. .venv/bin/python bench/fault_consts.py                      # every case with fault_consts
    PYTHONPATH=. .venv/bin/python bench/fault_consts.py --cases unet,swin --sizes 1e-5
    PYTHONPATH=. .venv/bin/python bench/fault_consts.py --consts vit:blocks.1.fc2.weight --sizes 5e-6,2e-6

For each case of ``cases/build/manifest.json`` that names fault constants (``fault_consts``),
the clean model runs once under the naive kernels (the reference); for each constant and size,
a copy of the model gets that constant times (1 + size u), u ~ U[-1, 1] elementwise from a
seeded generator (``lar_prec.diagnosis.local.perturb_constant``; ``--uniform``: times 1 + size), runs under the
default kernels, and ``lar-prec compare NAIVE FAULTY_DUMP --model FAULTY --json -`` judges the
pair (``--stand-in``: the clean model run by ``tests/wrapped_lar.py`` whose kernel computes with the
constant faulted, ``WRAPPED_LAR_OP_FAULT=CONST:u=SIZE``, judged with the clean model: right weights,
wrong kernel). A row records its exit code, its first root, whether that root is the faulted constant
or an operator reading it (directly, or through what it computed from it: a unit fused at load
time), the local error and floor of the operators reading it (when measured), their distribution
tests (issue 57: ``units_rms`` and the channel chi2, each over its limit) and the tests the
first root failed. ``--consts`` faults any named constant of a case instead of the manifest's. The clean pair (naive against default, ``--model`` the clean model) is the control row:
a clean exit 1 is a false alarm, and makes the faulty rows' exit code say nothing.
Prints a Markdown table (``--out`` also writes it); nothing is asserted.
"""
from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Dict, List, Optional, Tuple

from harness import BUILD, LAR_MODULE, ROOT, Table, cases, timed, write  # (first: this checkout's lar_prec on the path)
from lar_prec.dumps.folder import DumpFolder  # noqa: E402
from lar_prec.diagnosis.local import perturb_constant, scale_constant  # noqa: E402
from lar_prec.run.config import get_config  # noqa: E402
from procs import RunFailed, dump_run  # noqa: E402  (bench/ is sys.path[0] when run as a script)

SIZES = (1e-4, 1e-5, 5e-6, 2e-6)


def fault(model: Path, const: str, size: float, out: Path, seed: int, uniform: bool) -> Path:
    """A copy of ``model`` with ``const`` faulted (lar-prec's rewrite, a child process: megengine
    is imported there; a constant merged into a holder too)."""
    out.parent.mkdir(parents=True, exist_ok=True)
    if uniform:
        return scale_constant(model, const, 1 + size, out)
    return perturb_constant(model, const, size, out, seed=seed)


def near(dump: DumpFolder, name: str) -> Tuple[str, ...]:
    """Names of the inputs of the var ``name`` of ``dump``, and of their own inputs (what it
    computed from them: a unit fused at load time), constants and model inputs not followed."""
    ids = [d.id for d in dump if d.var.name == name]
    if not ids:
        return ()
    first = set(dump.inputs_of(ids[0]))
    second = {w for u in first if dump.var_info(u).opr_type != "Host2DeviceCopy" for w in dump.inputs_of(u)}
    return tuple(dump.var_info(u).name for u in first | second)


def readers(dump: DumpFolder, const: str) -> Tuple[str, ...]:
    """Names of the vars of ``dump`` computed from the constant ``const`` (directly)."""
    ids = {d.id for d in dump if d.var.name == const}
    return tuple(d.var.name for d in dump if ids & set(dump.inputs_of(d.id)))


def compare(ref: Path, test: Path, model: Path, out: Path, lar: Optional[Path] = None) -> Tuple[int, dict]:
    """`lar-prec compare` of the pair, its report read from stdout (exit, report or {}); ``lar``:
    the load_and_run the test side ran (its layerwise model runs there too)."""
    argv = [*LAR_MODULE, "compare", str(ref), str(test), "--model", str(model), "--out", str(out), "--json", "-",
            *(("--lar", str(lar)) if lar else ())]
    proc = timed(argv, timeout=1800)
    try:
        report = json.loads(proc.stdout) if proc.stdout.strip() else {}
    except ValueError:
        report = {}
    if proc.returncode not in (0, 1):
        report.setdefault("error", (proc.stderr.strip().splitlines() or [""])[-1])
    return proc.returncode, report


def row(case: str, const: str, label: str, rc: int, report: dict, test: DumpFolder) -> Dict[str, object]:
    roots = report.get("roots") or []
    first = roots[0] if roots else None
    hit: Optional[bool] = None
    if first is not None and const:
        hit = first["name"] == const or const in near(test, first["name"])
    local = report.get("local") or {}
    by_name = {v["name"]: v for v in report.get("vars") or ()}
    # the operator reading the constant: its local error against its floor
    reads = [by_name[n] for n in readers(test, const) if n in by_name] if const else []
    margin = ", ".join(f"{v['local_err']:.3g}/{v['floor']:.3g}" for v in reads
                       if v.get("local_err") is not None and v.get("floor") is not None) or "-"
    # its distribution tests (issue 57): rms / limit and the channel chi2 / limit, in rounding units
    spread = ", ".join(f"rms {s['units_rms']:.3g}/{s['rms_limit']:.3g}, chi2 {s['channel_chi2']:.3g}/"
                       f"{s['channel_chi2_limit']:.3g} ({s['channels']} ch, n {s['n']})"
                       for s in (v.get("spread") for v in reads) if s) or "-"
    return {"case": case, "const": const or "(clean)", "fault": label, "exit": rc,
            "root": f"{first['name']} ({first['opr_type']})" if first else report.get("error", "-"),
            "hit": hit, "n_roots": len(roots), "reader": margin, "spread": spread,
            "tests": ",".join((first or {}).get("tests") or ()) or "-",
            "local": "measured" if local.get("measured") else f"no: {str(local.get('why', '?')).split('): ')[-1][:60]}"}


def main(argv: Optional[List[str]] = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cases", default="", help="comma-separated (default: every case with fault_consts)")
    ap.add_argument("--sizes", default=",".join(f"{s:g}" for s in SIZES))
    ap.add_argument("--consts", default="", help="case:constant,... to fault (any named constant of a case; "
                    "default: the manifest's fault_consts)")
    ap.add_argument("--stand-in", action="store_true",
                    help="the fault made by tests/wrapped_lar.py's kernel (WRAPPED_LAR_OP_FAULT=CONST:u=SIZE, seed 0): "
                         "right weights, wrong kernel; judged with the clean model")
    ap.add_argument("--seed", type=int, default=0, help="seed of u (one per run of the script)")
    ap.add_argument("--uniform", action="store_true", help="times 1 + size everywhere instead of 1 + size u")
    ap.add_argument("--build", type=Path, default=BUILD)
    ap.add_argument("--out", type=Path, default=None, help="also write the table (Markdown) here")
    ap.add_argument("--keep", action="store_true", help="keep the work folder")
    args = ap.parse_args(argv)
    manifest = cases(args.build)
    chosen: Dict[str, List[str]] = {}
    for item in (x for x in args.consts.split(",") if x):
        case_name, _, const_name = item.partition(":")
        chosen.setdefault(case_name, []).append(const_name)
    names = [n for n in args.cases.split(",") if n] or list(chosen) or [n for n, c in manifest.items() if c.fault_consts]
    sizes = [float(s) for s in args.sizes.split(",") if s]
    work = Path(tempfile.mkdtemp(prefix="lar-prec-fault-consts-"))
    t0 = time.monotonic()
    rows = []
    for name in names:
        case = manifest[name]
        model, inputs, base = case.model, case.input_specs(), work / name
        try:
            ref = dump_run(model, inputs, base / "naive", get_config("naive"), args.build)
            clean = dump_run(model, inputs, base / "default", get_config("default"), args.build)
        except RunFailed as e:
            print(f"{name}: a clean run failed: {e}", flush=True)
            continue
        rc, report = compare(ref, clean, model, base / "cmp-clean")
        rows.append(row(name, "", "none", rc, report, DumpFolder(clean)))
        print(json.dumps(rows[-1]), flush=True)
        for const in chosen.get(name) or case.fault_consts:
            for size in sizes:
                d = base / f"{const}-{size:g}"
                lar = None
                if args.stand_in:  # the model as it is, the kernel wrong: no different weights
                    d.mkdir(parents=True, exist_ok=True)
                    lar = d / "lar"
                    lar.write_text(f"#!/bin/sh\nWRAPPED_LAR_OP_FAULT={const}:u={size:g} PYTHONPATH={ROOT} "
                                   f"exec {sys.executable} {ROOT / 'tests' / 'wrapped_lar.py'} \"$@\"\n")
                    lar.chmod(0o755)
                    faulty, program = model, (str(lar),)
                else:
                    faulty, program = fault(model, const, size, d / "faulty.mge", args.seed, args.uniform), ()
                try:
                    test = dump_run(faulty, inputs, d / "default", get_config("default"), args.build, program=program)
                except RunFailed as e:
                    rows.append({"case": name, "const": const, "fault": f"{size:g}", "exit": "-",
                                 "root": f"faulty run failed: {e}", "hit": None, "n_roots": 0, "reader": "-",
                                 "spread": "-", "tests": "-",
                                 "local": "-"})
                    continue
                rc, report = compare(ref, test, faulty, d / "cmp", lar)
                rows.append(row(name, const, f"{size:g}", rc, report, DumpFolder(test)))
                print(json.dumps(rows[-1]), flush=True)
    kind = "times 1 + size" if args.uniform else f"times 1 + size u, u ~ U[-1, 1] (seed {args.seed})"
    if args.stand_in:
        kind = "the stand-in's kernel with the constant times 1 + size u (seed 0), the model's own weights dumped"
    lines = [f"lar-prec compare, naive clean against default faulty ({kind}), cases {','.join(names)}, "
             f"{time.monotonic() - t0:.0f} s:", ""]
    table = Table("case", "fault constant", "size", "exit", "first root", "reads the constant", "roots",
                  "reader's local error / floor", "reader's distribution (units)", "root's tests", "local error")
    for r in rows:
        table.row(r["case"], r["const"], r["fault"], r["exit"], r["root"], {True: "yes", False: "no", None: "-"}[r["hit"]],
                  r["n_roots"], r["reader"], r["spread"], r["tests"], r["local"])
    lines += table.lines()
    print("\n" + "\n".join(lines))
    write(args.out, "# Faults in the cases' fault constants (bench/fault_consts.py)\n\n" + "\n".join(lines) + "\n", show=False)
    if args.keep:
        print(f"work folder: {work}")
    else:
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
