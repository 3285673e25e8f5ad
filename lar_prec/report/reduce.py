"""The terminal view of ``lar-prec reduce``: drawn from its JSON (``reduce.json``)."""
from __future__ import annotations

from typing import Any, Mapping, TextIO

from lar_prec.report.console import shown


def render_reduce_terminal(data: Mapping[str, Any], out: TextIO) -> None:
    """The verdict, the operators kept and why, the parts rejected, the files."""
    f = data["finding"]
    out.write(shown(f"{data['verdict']}") + "\n")
    root = f["root"]
    what = f"root {root['id']} {root['name']}" if root else f["signature"] or f["class"]
    out.write(shown(f"finding: {what} ({f['class']}, {f['source']}), error {_e(f['err'])}, floor {_e(f['floor'])}, "
                    f"bar {_e(f['bar'])}; test: {f['test']['name']} {' '.join(f['test']['flags'])}") + "\n")
    out.write(f"operators: {data['operators_before']} -> {data['operators_after']}; runs: {data['runs']} "
              f"(target <= {data['target_runs']}); parts tried: {data['parts_tried']}, rejected as another failure: "
              f"{data['rejected']}, passed: {data['passed']}\n")
    out.write("kept (each one needed):\n")
    for k in data["kept"]:
        out.write(shown(f"  {k['id']:>5}  {k['name'][:40]:<40} {k['type'][:20]:<20} {k['why']}") + "\n")
    for line in data["rejected_why"]:
        out.write(shown(f"rejected: {line}") + "\n")
    for note in data["notes"]:
        out.write(shown(f"note: {note}") + "\n")
    out.write(shown(f"reduced model: {data['model']}; replay: {data['replay']}") + "\n")


def _e(x: Any) -> str:
    return "-" if x is None else format(x, ".3g")
