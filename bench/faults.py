"""Fault-finding benchmark of roots by local error (issue 14): anyone can run it.

    PYTHONPATH=. .venv/bin/python bench/faults.py                  # all sites, all sizes
    PYTHONPATH=. .venv/bin/python bench/faults.py --trials 1       # one weight per case (~5 min)

For each case (cnn, resnet, mlp, attention) and each of up to ``--trials`` weight constants
(a case whose manifest entry names ``fault_consts``: those constants; ``--cases fault_consts``
runs every such case), a copy of the model gets that constant times (1 + size), so the error
really propagates through MegEngine (``lar_prec.local.scale_constant``, or
lar-prec's rewrite also handles a constant merged into a holder); the faulty model runs under the default
kernels and its local errors are measured against the naive run of the unchanged model. A
trial is *found* when the first local root is the operator reading the faulted constant.
Sizes: 1e-3, 1e-4, 1e-5, 3e-6, and "3x floor": the size that should give that operator a
local error of 3x its clean floor (3 floor / min(1, max |output|)).
False alarms: local roots on clean pairs, naive against default, fast-run (pinned by the test
run's --fast-run-algo-policy cache, as naive-vs-default does) and reproducible.
``--winograd`` adds fast-run with Winograd forced: the test run's cache reordered so that
every convolution runs its Winograd F(2,3), F(4,3) or F(6,3) candidate where it has one
(``lar_prec.algocache.prefer_algorithms``), clean (false alarms) and with faults of 1e-3,
1e-4, 1e-5, 3x its floor and 3x its own clean noise in each convolution that runs Winograd
(found/trials).
Prints one line per trial and the tables at the end; nothing is asserted.
"""
from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path
from typing import Dict, List, Optional, Sequence, Tuple

from harness import BUILD, Table, cases as built_cases, write  # (first: this checkout's lar_prec on the path)
from lar_prec.dumps.folder import DumpFolder
from lar_prec.dumps.algocache import prefer_algorithms, winograd_tile  # noqa: E402
from lar_prec.diagnosis.local_records import LocalResult
from lar_prec.diagnosis.local import build_layerwise, local_errors, output_ids, scale_constant
from lar_prec.diagnosis.floors import local_roots
from lar_prec.errors import RunError
from lar_prec.run.config import get_config
from procs import dump_run  # noqa: E402  (bench/ is sys.path[0] when run as a script)

CASES = ("cnn", "resnet", "mlp", "attention")
#: constants a fault can be made in (the outputs of these operators)
CONST_TYPES = ("ImmutableTensor", "MultipleDeviceTensorHolder")
SIZES = (1e-3, 1e-4, 1e-5, 3e-6)


def run(model: Path, inputs: List[str], out: Path, cfg, cwd: Path) -> Path:
    """One bundled load_and_run run with a binary dump (a fresh process, watched for stalls)."""
    return dump_run(model, inputs, out, cfg, cwd)


def weights(ref: DumpFolder, names: Sequence[str] = ()) -> List[Tuple[str, int]]:
    """(constant name, id of the operator reading it) for every dumped weight constant, or for
    the constants ``names`` (a case's ``fault_consts``; optimize_for_inference may have merged
    one into a MultipleDeviceTensorHolder)."""
    if names:
        consts = {d.id: d.var.name for d in ref if d.var.opr_type in CONST_TYPES and d.var.name in names}
    else:
        consts = {d.id: d.var.name for d in ref if d.var.opr_type == "ImmutableTensor" and d.var.name.endswith(".weight")}
    out: Dict[str, int] = {}
    for d in ref:  # one site per constant: a multi-output operator reads it once per output
        for i in ref.inputs_of(d.id):
            if i in consts and consts[i] not in out:
                out[consts[i]] = d.id
    return list(out.items())


def found(result: LocalResult, const: str) -> Tuple[bool, str]:
    """Whether the first local root is an operator reading the faulted constant ``const`` (any
    of them: a recurrent cell's weight is read at every step), as the layerwise run's own dump
    names its inputs (the faulty model's var ids need not be the reference's)."""
    v = local_roots(result)
    if not v.roots:
        return False, "no root"
    r = v.roots[0]
    local = DumpFolder(result.local_dump)
    out = output_ids(local).get(r.id)
    # its inputs, and the inputs of what it computed with them (a unit fused at load time)
    near = set(local.inputs_of(out)) if out is not None else set()
    near |= {w for u in near if local.var_info(u).opr_type != "Host2DeviceCopy" for w in local.inputs_of(u)}
    hit = any(local.var_info(u).name == const for u in near)
    return hit, f"root {r.name} local {r.local_err:.3g} floor {r.floor:.3g} x{r.margin:.3g}"


def trials(name: str, case, build: Path, base: Path, max_trials: int, hits: Dict[str, List[bool]],
           alarms: Dict[str, List[int]]) -> None:
    """One case: its clean pairs (false alarms) and a fault in each of its sites at each size."""
    model, inputs = case.model, case.input_specs()
    ref = run(model, inputs, base / "naive", get_config("naive"), build)
    # clean pairs: false alarms
    for cfg_name in ("default", "fast-run", "reproducible"):
        cfg = get_config(cfg_name)
        if cfg_name == "fast-run":
            cfg = cfg.with_extra(["--fast-run-algo-policy", str(base / "algo.cache")])
        test = run(model, inputs, base / f"clean-{cfg_name}", cfg, build)
        res = local_errors(model, ref, cfg, out_dir=base / f"local-clean-{cfg_name}", test_dump=test, checks=False)
        n = len(local_roots(res).roots)
        alarms.setdefault(cfg_name, []).append(n)
        print(f"{name:10s} clean {cfg_name:12s} local roots: {n}", flush=True)
        if cfg_name == "default":
            clean = res
    named = case.fault_consts
    sites = weights(DumpFolder(ref), named)
    if max_trials:
        sites = sites[:max_trials]
    floors = local_roots(clean).floors
    by_id = clean.by_id()
    for const, target in sites:
        tv = by_id.get(target)
        mag = min(1.0, tv.ref_max_abs or 1.0) if tv is not None else 1.0
        three = 3 * floors.get(target, 0.0) / mag
        for label, size in [(f"{s:g}", s) for s in SIZES] + [("3x floor", three)]:
            if size <= 0 or 1 + size == 1:  # a floor of 0 (a constant-only operator): no fault to make
                continue
            d = base / f"{const}-{size:g}"
            faulty = scale_constant(model, const, 1 + size, d / "faulty.mge")
            test = run(faulty, inputs, d / "test", get_config("default"), build)
            res = local_errors(faulty, ref, "default", out_dir=d / "local", test_dump=test, checks=False)
            ok, why = found(res, const)
            hits.setdefault(label, []).append(ok)
            print(f"{name:10s} {const:22s} {label:9s} (x{1 + size:.7g}) {'FOUND' if ok else 'missed'}: {why}",
                  flush=True)


def main(argv: Optional[List[str]] = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--trials", type=int, default=0, help="weights per case (0: all)")
    ap.add_argument("--cases", default=",".join(CASES),
                    help="comma-separated; 'fault_consts': every case whose manifest entry names fault constants "
                         "(a case that does is faulted in those, not in every weight)")
    ap.add_argument("--keep", action="store_true", help="keep the work folder")
    ap.add_argument("--out", type=Path, default=None, help="also write the tables (markdown) here")
    ap.add_argument("--winograd", default="",
                    help="cases to run with Winograd forced under fast-run (e.g. fastrun_shake,resnet)")
    args = ap.parse_args(argv)
    cases = built_cases()
    build = BUILD
    work = Path(tempfile.mkdtemp(prefix="lar-prec-faults-"))
    t0 = time.monotonic()
    hits: Dict[str, List[bool]] = {}
    alarms: Dict[str, List[int]] = {}
    if args.cases == "fault_consts":
        args.cases = ",".join(n for n, c in cases.items() if c.fault_consts)
    skipped = []
    for name in args.cases.split(","):
        try:
            trials(name, cases[name], build, work / name, args.trials, hits, alarms)
        except RunError as e:  # local error not measurable (dethead: TopK's output has no static shape)
            print(f"{name:10s} skipped: {e}", flush=True)
            skipped.append(name)
    for name in filter(None, args.winograd.split(",")):
        winograd(cases[name], build, work / f"winograd-{name}", hits, alarms)
    found = Table("fault size", "found")
    for label, hs in hits.items():
        found.row(label, f"{sum(hs)}/{len(hs)}")
    false = Table("configuration", "pairs with a root")
    for cfg_name, ns in alarms.items():
        false.row(cfg_name, f"{sum(1 for n in ns if n)}/{len(ns)}")
    lines = [f"faults found (first local root reads the faulted constant), cases {args.cases}, "
             f"{time.monotonic() - t0:.0f} s{', skipped ' + ','.join(skipped) if skipped else ''}:", "", *found.lines(),
             "", "false alarms (clean pairs with a local root), per configuration:", "", *false.lines()]
    print("\n" + "\n".join(lines))
    write(args.out, "# Weight faults rooted by local error (bench/faults.py)\n\n" + "\n".join(lines) + "\n", show=False)
    if not args.keep:
        import shutil

        shutil.rmtree(work, ignore_errors=True)
    else:
        print(f"work folder: {work}")
    return 0


WINOGRAD_TILES = (":4:2:", ":4:4:", ":4:6:")  # F(2,3), F(4,3), F(6,3) of MegEngine's MK4 names


def winograd(case, build: Path, base: Path, hits: Dict[str, List[bool]], alarms: Dict[str, List[int]]) -> None:
    """Fast-run with each Winograd tile forced: false alarms on the clean model, and faults in
    every convolution that runs Winograd."""
    model, inputs, name = case.model, case.input_specs(), case.name
    ref = run(model, inputs, base / "naive", get_config("naive"), build)
    cache = base / "algo.cache"
    run(model, inputs, base / "profile", get_config("fast-run").with_extra(["--fast-run-algo-policy", str(cache)]), build)
    lw = build_layerwise(model, ref, base / "lw")
    for tile in WINOGRAD_TILES:
        forced = prefer_algorithms(cache, base / f"forced{tile.strip(':').replace(':', '-')}.cache", tile)
        cfg = get_config("fast-run").with_extra(["--fast-run-algo-policy", str(forced)])
        label = f"fast-run F({tile.split(':')[2]},3)"
        clean = local_errors(model, ref, cfg, out_dir=base / f"clean{tile}", layerwise=lw, checks=False)
        wino = [k for k, v in clean.algorithms.items() if any(winograd_tile(a) for a in v)]
        n = len(local_roots(clean).roots)
        alarms.setdefault(label, []).append(n)
        print(f"{name:10s} clean {label:16s} {len(wino)} Winograd convolution(s), local roots: {n}", flush=True)
        by_id = clean.by_id()
        for target in wino:
            const = lw.var(target).name.rsplit(".", 1)[0] + ".weight"
            # 3x noise: a weight fault of 3x the relative error this Winograd convolution makes
            # on its own (its clean local error over its output's size, as the metric divides)
            # 3x floor: as for the default kernels (the floor includes the Winograd factor)
            tv = by_id[target]
            mag = min(1.0, tv.ref_max_abs or 1.0)
            noise = (tv.local_err or 0.0) / mag
            three = 3 * local_roots(clean).floors.get(target, 0.0) / mag
            for size_label, size in [(f"{s:g}", s) for s in (1e-3, 1e-4, 1e-5)] + [("3x floor", three),
                                                                                 ("3x noise", 3 * noise)]:
                if size <= 0:
                    continue
                d = base / f"{const}-{tile.strip(':')}-{size:g}"
                faulty = scale_constant(model, const, 1 + size, d / "faulty.mge")
                res = local_errors(faulty, ref, cfg, out_dir=d / "local", checks=False)
                ok, why = found(res, const)
                hits.setdefault(f"{size_label} {label}", []).append(ok)
                print(f"{name:10s} {const:22s} {size_label} ({size:.3g}) {label}: {'FOUND' if ok else 'missed'}: {why}",
                      flush=True)


if __name__ == "__main__":
    sys.exit(main())
