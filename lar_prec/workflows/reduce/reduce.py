"""``lar-prec reduce``: the smallest model that still fails the way an analysis found.

From a finding of an analysis folder (:mod:`.finding`: a root of naive-vs-default, a sweep
option's root, crash or hang, a shake's jitter root, a diff's first var outside jitter), it
checks the whole model still fails that way, searches the smallest part that does
(:mod:`.search`, each part built and judged by :mod:`.candidate`), and writes into ``--out``:

``model.mge`` (the part), ``inputs/*.npy`` (the reference's values where it was cut, and the
model inputs it reads), ``expected/*.npy`` (its outputs under the reference configuration, from a
run: the naive kernels; a shake's own configuration, a diff's side A),
``reference.npy``/``observed.npy``/``repro.json``/``README.md`` (the folder is a repro folder:
``lar-prec replay OUT``), ``reduce.json`` (the finding, every part tried and what it did, the
operators before and after, the runs spent, why each operator left is needed) and ``work/``
(each part's build record and run.json).

Example::

    from lar_prec.workflows.reduce import reduce
    r = reduce("lar-prec-out/sweep", option="ioc16", out="reduced")
    print(r.data["operators_before"], r.data["operators_after"], r.data["runs"])
"""
from __future__ import annotations

import math
import errno
import re
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional, Tuple

from lar_prec._lazy import numpy as np
from lar_prec.compare.metrics import max_megengine_err
from lar_prec.compare.relayout import to_plain
from lar_prec.diagnosis.local import DEFAULT_TIMEOUT
from lar_prec.diagnosis.repro_check import SCHEMA as REPRO_SCHEMA
from lar_prec.diagnosis.replay import run_commands
from lar_prec.dumps.folder import DumpFolder
from lar_prec.errors import LarPrecError, UsageError
from lar_prec.outputs import atomic_write_text, json_text
from lar_prec.records import PathLike, json_number
from lar_prec.run.config import LoadAndRun, resolve_load_and_run
from lar_prec.run.dirs import finish_analysis_dir, new_analysis_dir
from lar_prec.workflows.reduce.candidate import DiskFull, Graph, Part, Tester, describe, no_space
from lar_prec.workflows.reduce.finding import Finding, read_finding
from lar_prec.workflows.reduce.search import NotReproduced, Reduction, search

SCHEMA = "lar-prec.reduce/1"


@dataclass(frozen=True)
class ReduceResult:
    """A finished reduction: its folder and ``reduce.json``'s content."""

    dir: Path
    data: Dict[str, Any]

    @property
    def exit_code(self) -> int:
        return int(self.data["exit_code"])


def target_runs(n: int) -> float:
    """The runs a reduction of ``n`` operators should stay within (the issue's target)."""
    return 3 * math.log2(max(n, 1)) + 10


def reduce(analysis_dir: PathLike, *, option: Optional[str] = None, root: Optional[str] = None,
           out: Optional[PathLike] = None, lar: "LoadAndRun | str | None" = None, model: Optional[PathLike] = None,
           timeout: float = DEFAULT_TIMEOUT, max_runs: int = 100,
           progress: Optional[Callable[[str], None]] = None) -> ReduceResult:
    """Reduce the finding of ``analysis_dir`` (see the module docstring). ``lar``: the
    load_and_run to run the parts with (the one the analysis ran; default as every command:
    ``$LAR_PREC_LOAD_AND_RUN``, PATH, bundled). ``max_runs``: the search stops there and hands
    over the smallest part that failed the same way so far. Returns exit code 1 (the reduced
    model fails the same way).

    Raises:
        UsageError (exit 2): not an analysis with this finding, or the whole model does not
            fail that way here (:class:`~.search.NotReproduced`, with what it did instead);
        RunError (exit 3): a build or a run failed otherwise than a part may.
    """
    finding = read_finding(analysis_dir, option=option, root=root, model=model)
    lar_obj = resolve_load_and_run(lar)
    odir = new_analysis_dir(out, "reduce", needed=[analysis_dir, finding.model]).resolve()
    try:
        return _reduce(finding, odir, lar_obj, timeout, max_runs, progress)
    except DiskFull:
        raise
    except OSError as exc:
        if exc.errno != errno.ENOSPC:
            raise
        raise DiskFull(odir, f"writing {exc.filename} failed" if exc.filename else "a write of lar-prec's failed") from None
    except LarPrecError as exc:  # a write of lar-prec's or a child's that the disk refused
        if not no_space(str(exc) + str(getattr(exc, "stderr_tail", ""))):
            raise
        raise DiskFull(odir, " ".join(str(exc).split())[:300]) from None


def _reduce(finding: Finding, odir: Path, lar_obj: LoadAndRun, timeout: float, max_runs: int,
            progress: Optional[Callable[[str], None]]) -> ReduceResult:
    work = odir / "work"
    graph = describe(finding.model, finding.ref_dump, work, timeout)
    anchor = None
    if finding.root_id is not None:
        op = graph.op_of_ref(finding.root_id)
        if op is None:
            raise UsageError(f"{finding.model}: no operator of the model computes var {finding.root_id} "
                             f"({finding.root_name}) of the analysis; expected the model it ran (--model)")
        anchor = op.id
    tester = Tester(finding, graph, lar_obj, work, timeout)
    try:
        red = search(tester, graph, anchor, progress=progress, max_runs=max_runs)
    except NotReproduced as exc:
        raise UsageError(f"{finding.analysis_dir}: its finding ({_finding_text(finding)}) does not reproduce here, "
                         f"nothing was reduced: {exc}; the analysis ran {finding.ran_with or 'its load_and_run'}, "
                         f"reduce ran {lar_obj.describe()} (--lar)") from None
    data = _hand_over(finding, graph, red, tester, odir)
    atomic_write_text(odir / "reduce.json", json_text(data), what="reduce record")
    finish_analysis_dir(odir)
    return ReduceResult(odir, data)


def _finding_text(f: Finding) -> str:
    what = f"root {f.root_id} {f.root_name}" if f.root_id is not None else (f.signature or f.klass)
    return f"{what}, {f.klass.replace('_', ' ')}" + (f" under {f.option}" if f.option else "")


def _plain(arr: "np.ndarray", shape: Tuple[int, ...], fmt: Optional[str]) -> "np.ndarray":
    """``arr`` in the reference's shape (a packed layout brought back), as replay compares it."""
    if tuple(arr.shape) == tuple(shape):
        return np.ascontiguousarray(arr)
    plain, _how = to_plain(np.asarray(arr), tuple(shape), fmt=fmt)
    return np.ascontiguousarray(arr if plain is None else plain)


def _file_name(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.]", "_", name).strip("_.")[:60] or "output"


def _hand_over(f: Finding, g: Graph, red: Reduction, tester: Tester, odir: Path) -> Dict[str, Any]:
    """Write the part, its inputs, expected outputs and the repro files; the record."""
    part, notes = red.part, []
    assert part is not None
    shutil.copyfile(part.model, odir / "model.mge")
    run_inputs = part.dir.parent / "inputs"
    (odir / "inputs").mkdir()
    for feed in part.feeds:
        shutil.copyfile(run_inputs / f"{feed.name}.npy", odir / "inputs" / f"{feed.name}.npy")
    inputs = ";".join(f"{x.name}:inputs/{x.name}.npy" for x in part.feeds)
    expected = _expected(f, part, tester, odir, notes)
    names = {o.id: o for o in g.ops}
    repro = _repro_files(f, red, expected, odir, inputs, notes)
    kept = [{"id": k, "name": names[k].name, "type": names[k].type, "mode": names[k].mode, "why": w}
            for k, w in red.needed]
    n = len(g.ops)
    same = red.outcome.verdict == "same"
    verdict = (f"{n} -> {len(red.kept)} operator(s) still fail the same way ({_finding_text(f)}) in "
               f"{tester.runs} run(s)" if same else f"the smallest part found does not fail the same way: "
               f"{red.outcome.why}")
    return {
        "schema": SCHEMA, "command": "reduce", "verdict": verdict, "finding": f.to_json(), "dir": str(odir),
        "operators_before": n, "operators_after": len(red.kept), "static_operators_before": g.static_ops,
        "operators_in_model": part.operators,
        "runs": tester.runs, "builds": tester.builds, "target_runs": round(target_runs(n), 1),
        "parts_tried": len(red.steps) - 1, "rejected": sum(s.verdict == "different" for s in red.steps),
        "passed": sum(s.verdict == "passes" for s in red.steps),
        "invalid": sum(s.verdict == "invalid" for s in red.steps),
        "rejected_why": [f"{s.phase} ({len(s.ops)} operator(s)): {s.why}" for s in red.steps if s.verdict == "different"],
        "kept": kept, "outcome": {"verdict": red.outcome.verdict, "class": red.outcome.klass, "why": red.outcome.why,
                                  "root_err": json_number(red.outcome.root_err)},
        "steps": [s.to_json() for s in red.steps], "model": str(odir / "model.mge"), "inputs": inputs,
        "expected": expected, "repro": repro, "replay": f"lar-prec replay {odir}", "stopped": red.stopped,
        "notes": notes + ([red.stopped] if red.stopped else []),
        "exit_code": 1 if same else 0,
    }


def _expected(f: Finding, part: Part, tester: Tester, odir: Path, notes: List[str]) -> Dict[str, str]:
    """The part's outputs under the reference configuration (one run): output name -> file."""
    try:
        rec = tester.run(part.model, part.feeds, odir / "work" / "expected", f.reference, "naive")
    except LarPrecError as exc:
        notes.append(f"the naive run of the reduced model failed, no expected outputs: {exc}")
        return {}
    dump = DumpFolder(rec.dump_dir)  # type: ignore[arg-type]
    ref = DumpFolder(f.ref_dump)
    ref_by_name = {d.var.name: d for d in ref}
    out_dir = odir / "expected"
    out_dir.mkdir()
    written: Dict[str, str] = {}
    for d in dump:
        name = d.var.name
        if name not in part.outputs:
            continue
        arr = np.asarray(d.array())
        path = out_dir / f"{_file_name(name)}.npy"
        np.save(path, arr)
        written[name] = str(path.relative_to(odir))
        want = ref_by_name.get(name)
        if want is not None and want.shape == arr.shape and want.array().tobytes() != arr.tobytes():
            notes.append(f"expected output {name}: the naive kernels on the reduced model differ from the whole "
                         f"model's reference by {max_megengine_err(np.asarray(want.array()), arr):.3g}")
    shutil.rmtree(rec.dump_dir, ignore_errors=True)  # type: ignore[arg-type]
    return written


def _repro_files(f: Finding, red: Reduction, expected: Dict[str, str], odir: Path, inputs: str,
                 notes: List[str]) -> Optional[str]:
    """reference.npy, observed.npy, repro.json and README.md: ``lar-prec replay`` runs the part
    and compares its root's output (a crash or stall: it fails as the part did)."""
    out = red.outcome
    if f.root_id is not None:
        want = np.asarray(DumpFolder(f.ref_dump)[f.root_id].array())
        if out.dump is None or out.root_dump_id is None:
            notes.append("no repro files: the reduced model's run kept no dump of the root")
            return None
        seen = _plain(np.asarray(DumpFolder(out.dump)[out.root_dump_id].array()), want.shape, f.fmt)
        output, vid = f.root_name or "", f.root_id
    else:  # nothing observed: the test side ends as the finding did; its first output stands for the part
        if not expected:
            notes.append("no repro files: the naive run of the reduced model gave no output")
            return None
        output, file = next(iter(expected.items()))
        want = seen = np.load(odir / file, allow_pickle=False)
        vid = 0
    if seen.shape != want.shape:
        notes.append(f"no repro files: the root's output has shape {seen.shape}, the reference's {want.shape}")
        return None
    np.save(odir / "reference.npy", want)
    np.save(odir / "observed.npy", seen)
    err = max_megengine_err(seen, want) if f.root_id is not None else None
    record = {
        "schema": REPRO_SCHEMA, "var": {"id": vid, "name": output, "opr": "", "opr_type": "", "output": output,
                                        "shape": list(want.shape), "dtype": str(want.dtype)},
        "local_err": json_number(err), "local_err_text": None if json_number(err) is not None or err is None else str(err),
        "entire_err": json_number(f.err), "inputs": inputs, "source_model": str(f.model), "ref_dump": str(f.ref_dump),
        "observed_with": None, "reduced_from": str(f.analysis_dir), "class": f.klass,
        "test": {"name": f.test.name, "flags": list(f.test.flags), "env": [list(e) for e in f.test.env],
                 "commands": run_commands(inputs, f.test, "dump-test")},
        "reference": {"name": f.reference.name, "flags": list(f.reference.flags),
                      "env": [list(e) for e in f.reference.env],
                      "commands": run_commands(inputs, f.reference, "dump-reference")},
    }
    atomic_write_text(odir / "repro.json", json_text(record), what="repro record")
    atomic_write_text(odir / "README.md", _readme(f, red, record), what="README of the reduced model")
    return str(odir)


def _readme(f: Finding, red: Reduction, r: Dict[str, Any]) -> str:
    ops = "\n".join(f"- var {k}: {w}" for k, w in red.needed)
    ending = ("`lar-prec replay .` runs it under both configurations and compares `" + r["var"]["output"] +
              "` with `reference.npy`: exit 1 when the divergence is reproduced.") if f.root_id is not None else (
        f"The test configuration {f.signature or f.klass}s on it (the finding's failure): `lar-prec replay .` "
        "then fails with exit 3 and the run's message.")
    return f"""# Reduced model: {_finding_text(f)}

Reduced by `lar-prec reduce` from the analysis `{f.analysis_dir}` (model `{f.model}`): {len(red.kept)}
operator(s) of the model, fed with the reference run's values where it was cut (`inputs/`). Under
`{f.test.name}` with flags `{' '.join(f.test.flags) or 'none'}` it still fails the way the analysis found.
`expected/` holds its outputs under `{f.reference.name}`. Each operator left is needed:

{ops}

Run inside this folder:

    # test configuration, bundled load_and_run (lar-prec on PYTHONPATH)
    {r['test']['commands']['bundled']}
    # the same with a real MegEngine load_and_run build
    {r['test']['commands']['load_and_run']}
    # reference configuration
    {r['reference']['commands']['bundled']}

{ending}
"""
