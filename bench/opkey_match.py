#!/usr/bin/env python
"""Stable operator key benchmark (issue 36 #3): on every case of cases/ under each x86 option of
a sweep, the share of the plain model's float operators that the key matches in the option's
graph, and every operator left unmatched with its reason.

Each case runs once plain and once under each option (`python -m lar_prec.lar MODEL --input
... --bin-io-dump DIR FLAGS`, each in its own process with a timeout: some options hang or crash
at load on some CPUs, which is reported, not counted). Keys come from each dump alone
(:func:`lar_prec.opkey.operator_keys`, constants hashed from their dumped bytes).

What "exists on both sides" means is decided without the key: the computed float vars of the
plain graph that the name rule of reference/graph-options.md pairs with a computed var of the
option's graph (exact name, no false pair on every case measured). The share is matched by
key / paired by that rule (target >= 95%). Also counted: key matches the name rule does not
make (reported, a false pair would show there), and vars of the plain graph with no partner
(fused away or removed: not in the denominator, listed with the reason). A second column keys
both sides with every name hidden (the structure alone), to show what the stable names buy.

Usage:
    .venv/bin/python bench/opkey_match.py [--cases cnn,resnet] [--options LIST] [-j 2]
        [--dumps DIR (kept, reused)] [--out bench/RESULTS-opkey.md]
"""
from __future__ import annotations

import argparse
import dataclasses
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Dict, List, Tuple

from harness import PY, Table, cases as built_cases, timed, write  # (first: this checkout's lar_prec on the path)
from lar_prec.compare.namepair import pair_by_name  # noqa: E402
from lar_prec.dumps.folder import DumpFolder  # noqa: E402
from lar_prec.opkey import match_keys, operator_keys, value_hash, var_role  # noqa: E402
from lar_prec.workflows.sweep.options import DEFAULT_OPTIONS, OPTIONS  # noqa: E402

TARGET = 0.95
FLOATS = ("Float32", "Float16", "BFloat16")


@dataclasses.dataclass(frozen=True)
class Node:
    id: int
    name: str
    opr: str
    opr_type: str
    dtype: str
    shape: Tuple[int, ...]
    inputs: Tuple[int, ...]
    slot: int
    value_infer: int


def run_dump(case, option: str, dumps: Path, timeout: float) -> Tuple[str, Path]:
    """(status, dump folder) of one run: ``ok``, ``failed: <last line>`` or ``hung``."""
    out = dumps / case.name / option
    mark = out.with_suffix(".status")
    if mark.exists():
        return mark.read_text(), out
    out.mkdir(parents=True, exist_ok=True)
    flags = () if option == "plain" else OPTIONS[option].flags
    argv = [PY, "-m", "lar_prec.lar", str(case.model), "--input", ";".join(case.input_specs()), "--iter", "1",
            "--warmup-iter", "0", "--bin-io-dump", str(out), *flags]
    try:
        p = timed(argv, timeout=timeout)
        status = "ok" if p.returncode == 0 else "failed: " + p.last_line(160)
    except subprocess.TimeoutExpired:
        status = f"hung (killed after {timeout:g} s)"
    mark.write_text(status)
    return status, out


def nodes_of(folder: DumpFolder, hide_names: bool = False) -> Tuple[List[Node], Dict[int, str]]:
    """The vars of a dump in execution order, and their constants' value hashes."""
    nodes, hashes = [], {}
    for d in folder:
        v = d.var
        n = Node(v.id, "" if hide_names and var_role(v) != "input" else v.name, "" if hide_names else v.owner,
                 v.opr_type, v.dtype, tuple(v.shape), tuple(u.id for u in d.inputs), v.slot, v.value_infer)
        nodes.append(n)
        if var_role(n) == "const":
            with open(d.file, "rb") as fh:
                fh.seek(d.data_offset)
                hashes[n.id] = value_hash(fh.read(d.nbytes))
    return nodes, hashes


def measure(plain: Path, other: Path, hide_names: bool) -> dict:
    a_nodes, a_hash = nodes_of(DumpFolder(plain), hide_names)
    b_nodes, b_hash = nodes_of(DumpFolder(other), hide_names)
    # ground truth from the names as dumped, whatever the key sees
    truth_pairs = pair_by_name(nodes_of(DumpFolder(plain))[0], nodes_of(DumpFolder(other))[0])
    float_a = {n.id for n in a_nodes if var_role(n) == "computed" and n.dtype in FLOATS}
    truth = {p.a: p.b for p in truth_pairs.pairs if p.a in float_a}
    ka, kb = operator_keys(a_nodes, a_hash), operator_keys(b_nodes, b_hash)
    m = match_keys(ka, kb, only=[n.id for n in a_nodes if n.id in float_a])
    got = m.a_to_b()
    names = {n.id: n.name for n in nodes_of(DumpFolder(plain))[0]}
    matched = sum(1 for a, b in truth.items() if got.get(a) == b)
    wrong = [(a, names[a], got[a], b) for a, b in truth.items() if a in got and got[a] != b]
    extra = [(a, names[a]) for a in got if a not in truth]
    reasons = dict(m.unmatched_a)
    missed = [(a, names[a], reasons.get(a, "matched another var")) for a in truth if got.get(a) != truth[a]]
    gone = [(u.id, u.name, u.reason) for u in truth_pairs.unpaired_a if u.id in float_a]
    return {"both": len(truth), "matched": matched, "wrong": wrong, "extra": extra, "missed": missed, "gone": gone}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--cases", default=None, help="comma-separated case names [default: every case]")
    ap.add_argument("--options", default=",".join(DEFAULT_OPTIONS["x86"]))
    ap.add_argument("-j", "--jobs", type=int, default=2)
    ap.add_argument("--timeout", type=float, default=60.0)
    ap.add_argument("--dumps", type=Path, default=None, help="folder for the dumps (kept and reused)")
    ap.add_argument("--out", type=Path, default=None)
    args = ap.parse_args(argv)
    cases = list(built_cases().values())
    if args.cases:
        cases = [c for c in cases if c.name in args.cases.split(",")]
    options = [o for o in args.options.split(",") if o]
    dumps = args.dumps or Path(tempfile.mkdtemp(prefix="lar-prec-opkey-"))
    t0 = time.monotonic()
    todo = [(c, o) for c in cases for o in ["plain"] + options]
    with ThreadPoolExecutor(max(1, args.jobs)) as ex:
        status = dict(zip([(c.name, o) for c, o in todo],
                          ex.map(lambda co: run_dump(co[0], co[1], dumps, args.timeout), todo)))
    lines = ["# Stable operator key: float operators matched against the plain model (issue 36 #3)", "",
             f"`bench/opkey_match.py`, {time.strftime('%Y-%m-%d')}, {len(cases)} cases x {len(options)} x86 options, "
             f"runs {time.monotonic() - t0:.0f} s. Denominator: the plain model's computed float vars that the name "
             "rule pairs in the option's graph (exist on both sides). `key`: as stored; `structure only`: every "
             "name hidden from the key (what the names buy).", ""]
    table = Table("case", "option", "on both sides", "matched by key", "share", "structure only",
                  "key pairs outside the name rule", "fused/removed (not counted)")
    total = [0, 0, 0]
    notes: List[str] = []
    for c in cases:
        st, plain = status[(c.name, "plain")]
        if st != "ok":
            notes.append(f"- {c.name}: the plain run {st}: case left out")
            continue
        for o in options:
            st, other = status[(c.name, o)]
            if st != "ok":
                notes.append(f"- {c.name} / {o}: {st}")
                continue
            r, s = measure(plain, other, False), measure(plain, other, True)
            total[0] += r["both"]
            total[1] += r["matched"]
            total[2] += s["matched"]
            share = r["matched"] / r["both"] if r["both"] else 1.0
            sshare = s["matched"] / s["both"] if s["both"] else 1.0
            table.row(c.name, o, r["both"], r["matched"], f"{share:.1%}", f"{sshare:.1%}", len(r["extra"]), len(r["gone"]))
            for a, name, why in r["missed"]:
                notes.append(f"- {c.name} / {o}: unmatched var {a} `{name}`: {why}")
            for a, name, got, want in r["wrong"]:
                notes.append(f"- {c.name} / {o}: WRONG pair var {a} `{name}` -> {got} (name rule: {want})")
            for a, name in r["extra"]:
                notes.append(f"- {c.name} / {o}: key pair outside the name rule: var {a} `{name}`")
    share = total[1] / total[0] if total[0] else 1.0
    lines += table.lines()
    lines += ["", f"**All: {total[1]} of {total[0]} float operators on both sides matched by key = {share:.2%}** "
              f"(structure only: {total[2] / max(1, total[0]):.2%}); target >= {TARGET:.0%}: "
              f"{'PASS' if share >= TARGET else 'FAIL'}", "", "Not matched, not run, or outside the rule:", ""]
    lines += notes or ["- none"]
    write(args.out, "\n".join(lines) + "\n")
    return 0 if share >= TARGET else 1


if __name__ == "__main__":
    sys.exit(main())
