"""A zoo task whose result is wrong runs its failing side once more, on the worker that ran it:
is the wrong value the same bits (a deterministic bug), or does it differ from run to run, and
which operator starts it (:func:`lar_prec.workflows.common.nondeterminism.rerun_and_compare`)? The
answer goes on the cell it belongs to (``run_to_run``).

The failing side: ``naive-vs-default``'s default run; each option of a ``sweep`` that diverges
(its run under the option's flags). ``shake`` measures run-to-run differences itself; ``mixed``
and ``quant`` are not run again here. A task on a device is not run again here (its runs need
the device's sessions): its cells say so.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any, Dict, List, Mapping, Sequence, Tuple

from lar_prec.errors import AnalysisInterrupted, LarPrecError
from lar_prec.run.config import get_config
from lar_prec.run.once import run_once
from lar_prec.workflows.common.nondeterminism import compare_runs, rerun_and_compare
from lar_prec.workflows.sweep.options import OPTIONS

#: flags that name a file one run wrote and the next reads (kept: the rerun reads the same cache)
_PINS = ("--fast-run-algo-policy",)


def _pins(argv: Sequence[str]) -> Tuple[str, ...]:
    """The algorithm cache a run was pinned to (``--fast-run-algo-policy PATH``), to pin the rerun too."""
    out: List[str] = []
    args = list(argv)
    for i, a in enumerate(args):
        name = a.split("=", 1)[0]
        if name in _PINS:
            out += [a] if "=" in a else [a, args[i + 1]] if i + 1 < len(args) else []
    return tuple(out)


def _again(task: Any, rec: Any, flags: Sequence[str], watched: Sequence[int], under: str) -> Dict[str, Any]:
    """Run ``rec``'s setting once more (its model, inputs, the task's build) and compare."""
    inputs = ";".join(f"{i['name']}:{i['path']}" for i in rec.inputs)

    def rerun() -> Path:
        again = run_once(task.model_path, inputs, get_config(rec.config), Path(rec.dir).parent,
                         lar=task.lar or "bundled", timeout=task.timeout,
                         extra_flags=tuple(flags) + _pins(rec.argv), label=f"{rec.label}-again")
        return Path(str(again.dump_dir))

    try:
        return rerun_and_compare(Path(str(rec.dump_dir)), rerun, watched=watched, under=under).to_json()
    except AnalysisInterrupted:
        raise
    except LarPrecError as exc:
        return {"error": " ".join(str(exc).split())[:300]}


def _runs(result: Any) -> Dict[str, Any]:
    """The runs of a workflow's result by label (a sweep keeps them in its SweepResult)."""
    runs = getattr(result, "runs", None) or getattr(getattr(result, "result", None), "runs", ())
    return {r.label: r for r in runs if getattr(r, "dump_dir", None)}


def rerun_wrong(task: Any, result: Any, report: Mapping[str, Any], cells: Sequence[Dict[str, Any]]
                ) -> Tuple[Dict[str, Any], ...]:
    """``cells`` with ``run_to_run`` on each wrong one (``bad``) that can run again here."""
    out = [dict(c) for c in cells]
    if not any(c.get("bad") for c in out):
        return tuple(out)
    if task.remote is not None:
        for c in out:
            if c.get("bad"):
                c["run_to_run"] = {"error": "not run again: the task ran on a device"}
        return tuple(out)
    runs = _runs(result)
    if task.command == "naive-vs-default":
        rec = runs.get("default")
        if rec is not None:
            roots = [int(r["id"]) for r in report.get("roots") or () if r.get("id") is not None]
            flags = tuple(f for o in task.options for f in OPTIONS[o].flags) + tuple(task.flags)
            out[0]["run_to_run"] = _again(task, rec, flags, roots, " ".join(flags))
    elif task.command == "sweep":
        by_option = {str(o.get("option")): o for o in report.get("options") or () if isinstance(o, Mapping)}
        for c in out:
            o = by_option.get(str(c.get("option")))
            rec = runs.get(str(c.get("option")))
            if not c.get("bad") or o is None or rec is None or o.get("status") != "runs":
                continue
            root = o.get("root") or {}
            watched = [int(root["id"])] if root.get("id") is not None else []  # in the option's graph
            again = runs.get(f"{c['option']}-again")
            if again is not None:  # the sweep ran it again itself: its two runs answer, no third
                c["run_to_run"] = compare_runs(Path(str(rec.dump_dir)), Path(str(again.dump_dir)), watched=watched,
                                               under=str(c["option"])).to_json()
                continue
            opt = OPTIONS.get(str(c["option"]))
            flags = tuple(task.flags) + (opt.flags if opt is not None else ())
            c["run_to_run"] = _again(task, rec, flags, watched, str(c["option"]))
    return tuple(out)


__all__ = ["rerun_wrong"]
