"""The terminal view of ``lar-prec zoo``: drawn from the zoo's JSON (``lar-prec.zoo/1``), one line
per cell (a sweep task has one per option it tried) with its own option's regressions and what
running a wrong cell again said, failures with why, and the counts."""
from __future__ import annotations

from typing import Any, List, Mapping


def _err(x: Any) -> str:
    return "-" if x is None else f"{x:.3g}"


def _again(c: Mapping[str, Any]) -> str:
    """What running the cell's failing side again said, and its nondeterministic operators."""
    nd = list(c.get("nondeterministic") or ())
    rr = c.get("run_to_run") or {}
    if rr.get("nondeterministic"):
        return f"  {rr.get('words')}"
    if nd:
        return f"  nondeterministic: {', '.join(nd[:2])} (its repeated runs differ)"
    return "  run again: same bits" if rr.get("same_bits") else ""


def _speed(c: Mapping[str, Any]) -> str:
    """The cell's speed: its time per iteration and its verdict against the store's history."""
    v = c.get("speed")
    if not v:
        return ""
    if v["verdict"] in ("regressed", "faster"):
        return f"  speed {v['verdict']}: {v['why']}"
    if v["verdict"] == "not_timed":
        return f"  speed: {v['why']}"
    return f"  {v['median_ms']:.3g} ms/iter ({v['verdict'].replace('_', ' ')})"


def zoo_lines(data: Mapping[str, Any], *, limit: int = 200) -> List[str]:
    """The lines to print: a header, one line per cell (worst first: failed, regressed, divergent), the counts."""
    rows = []
    for e in data["tasks"]:
        where = f"{e['build']} @ {e['device']}"
        if e["state"] == "failed":
            rows.append((0, f"FAILED     {e['model']:<14} {e['column']:<34} {where:<24} {e.get('why') or e.get('verdict')}"))
            continue
        for c in e["cells"] or [{"column": e["column"], "bad": e["exit_code"] == 1, "output_err": None, "root": None}]:
            # the cell's own regressions (its option's); a zoo.json from before cells carried them: the task's
            regressed = c["regressed"] if "regressed" in c else e["regressed"]
            reg = f"  regressed: {', '.join(regressed[:3])}" if regressed else ""
            slow = bool(c.get("speed_regressed"))
            state = "REGRESSED" if reg or slow else "divergent" if c.get("bad") else "ok"
            rank = 1 if reg or slow else 2 if c.get("bad") else 3
            root = f"  root {c['root']}" if c.get("root") else ""
            stored = "  (stored)" if e["state"] == "stored" else ""
            rows.append((rank, f"{state:<10} {e['model']:<14} {c['column']:<34} {where:<24} err {_err(c.get('output_err'))}"
                               f"{root}{reg}{_again(c)}{_speed(c)}{stored}"))
        shown = {o for c in e["cells"] for o in c.get("speed_regressed") or ()}
        for v in (e.get("speed") or {}).get("parts") or ():  # a sweep's default run has no cell of its own
            if v["verdict"] == "regressed" and (v["option"] or "default") not in shown:
                rows.append((1, f"{'REGRESSED':<10} {e['model']:<14} {e['column'] + ' default run':<34} {where:<24} "
                                f"speed regressed: {v['why']}"))
    rows.sort(key=lambda r: r[0])
    n = data["counts"]
    lines = [f"zoo {data['name']}: {n['tasks']} task(s): {n['ran']} ran, {n['stored']} already in the store, "
             f"{n['failed']} failed, {n['divergent']} with a divergence, {n['regressed']} regressed"
             + (f", {n['speed_regressed']} slower" if n.get("speed_regressed") else "")
             + (f", {n['not_run']} not run" if n["not_run"] else "")]
    lines += [r[1] for r in rows[:limit]]
    if len(rows) > limit:
        lines.append(f"... {len(rows) - limit} more in the JSON")
    return lines
