"""The store's commands in the terminal: ``history`` as tables of runs (date, run, build,
device, output error) and operators' small text trends with their min and max, ``history
--diff`` as the operators that changed with both values, ``check``'s checked run. Plain text
lines from the commands' JSON (``lar-prec.history/1``, ``lar-prec.check/1``), within 100
columns unless ``wide``."""
from __future__ import annotations

from typing import Any, Dict, List, Mapping, Optional, Sequence

#: eight heights of a text sparkline, lowest first
_BARS = "\u2581\u2582\u2583\u2584\u2585\u2586\u2587\u2588"
#: the points a trend draws (the newest); the JSON holds them all
TREND_POINTS = 40
#: runs and operators listed per series unless ``wide``
SHOWN = 10


def _num(v: Optional[float]) -> str:
    return "-" if v is None else f"{v:.3g}"


def _date(created: Optional[str]) -> str:
    """``2026-11-29T09:44:11+00:00`` -> ``2026-11-29 09:44`` (the store writes UTC)."""
    return (created or "?")[:16].replace("T", " ")


def _cut(s: Optional[str], width: Optional[int]) -> str:
    s = s or "-"
    return s if width is None or len(s) <= width else s[:width - 1] + "\u2026"


def trend(values: Sequence[Optional[float]]) -> str:
    """A text sparkline, linear from the smallest value to the largest (a missing value: ``·``;
    all equal: the lowest bar throughout)."""
    vals = list(values)[-TREND_POINTS:]
    known = [v for v in vals if v is not None]
    if not known:
        return "\u00b7" * len(vals)
    lo, hi = min(known), max(known)
    span = hi - lo
    return "".join("\u00b7" if v is None else _BARS[0 if span <= 0 else min(7, int((v - lo) / span * 7 + 0.5))]
                   for v in vals)


def _table(heads: Sequence[str], rows: Sequence[Sequence[str]], right: Sequence[bool], indent: str = "  ") -> List[str]:
    widths = [max([len(h)] + [len(r[i]) for r in rows]) for i, h in enumerate(heads)]

    def fmt(vals: Sequence[str]) -> str:
        return (indent + "  ".join(v.rjust(w) if r else v.ljust(w) for v, w, r in zip(vals, widths, right))).rstrip()

    return [fmt(heads)] + [fmt(r) for r in rows]


def _legend(values: Sequence[Optional[str]], width: Optional[int], tag: str) -> tuple:
    """Values that fit ``width`` as they are; else each distinct one as ``tag1``, ``tag2``... with
    a legend line per tag below the table (a build's name is 70 characters)."""
    names = list(dict.fromkeys(v or "-" for v in values))
    if width is None or all(len(n) <= width for n in names):
        return {n: n for n in names}, []
    short = {n: f"{tag}{i}" for i, n in enumerate(names, 1)}
    return short, [f"  {short[n]}: {n}" for n in names]


def _runs_table(runs: Sequence[Mapping[str, Any]], wide: bool, value: str = "output_err",
                devices: Optional[Mapping[str, Optional[str]]] = None) -> List[str]:
    """Date, run, build, device and value (``output_err``, or an operator's ``max_err``) per run."""
    width = None if wide else 24
    device = [(devices or {}).get(r["run"], r.get("device")) for r in runs]
    builds, blines = _legend([r.get("build") for r in runs], width, "b")
    devs, dlines = _legend(device, width, "d")
    if value == "output_err":
        heads, rows = ["output err", "result"], [[_num(r.get("output_err")), _result(r)] for r in runs]
    else:
        heads, rows = ["max error", "status"], [[_num(r.get("max_err")), r.get("status") or "-"] for r in runs]
    rows = [[_date(r["created"]), r["run"][:12], builds[r.get("build") or "-"], devs[d or "-"], *x]
            for r, d, x in zip(runs, device, rows)]
    return _table(["date (UTC)", "run", "build", "device", *heads], rows,
                  [False, False, False, False, True, False]) + blines + dlines


def _result(r: Mapping[str, Any]) -> str:
    code = r.get("exit_code")
    if code == 0:
        return "ok"
    if code == 1:
        roots = r.get("n_roots")
        return f"diverged ({roots} root{'s' if roots != 1 else ''})" if roots else "diverged"
    return "-" if code is None else f"exit {code}"


def _op_line(o: Mapping[str, Any], name_w: Optional[int]) -> str:
    vals = [p["max_err"] for p in o["points"]]
    known = [v for v in vals if v is not None]
    span = f"min {_num(min(known))}  max {_num(max(known))}" if known else "no value"
    return f"  {_cut(o['name'], name_w):<{name_w or 0}}  {trend(vals)}  {span}  ({len(vals)} run{'s' * (len(vals) != 1)})"


def _out_of_band(o: Mapping[str, Any]) -> Optional[str]:
    out = o.get("first_out_of_band")
    if not out:
        return None
    lo, hi = out["band"]
    return (f"    first out of its band: run {out['run'][:12]} ({_date(out['created'])}), {_num(out['value'])} not in "
            f"[{_num(lo)}, {_num(hi)}]")


def history_lines(res: Mapping[str, Any], *, op: Optional[str] = None, wide: bool = False) -> List[str]:
    """The ``history`` object as lines: per series its runs (the newest ``SHOWN`` unless
    ``wide``), then each operator asked for (``op``) with its trend, min, max and every point,
    or the operators whose error moved most, one trend line each; then ``--diff``."""
    lines: List[str] = []
    if not res["series"] and res.get("model") is None:
        return [f"store {res['store']} is empty: no run stored yet (an analysis with --store writes one)"]
    for s in res["series"]:
        runs = s["runs"]
        head = f"{s['model_name']} | {s['command']} {s['config']} {' '.join(s['options'])}".rstrip()
        lines.append(f"{head} | {s['device_kind']}: {len(runs)} run{'s' * (len(runs) != 1)}")
        shown = runs if wide else runs[-SHOWN:]
        if len(shown) < len(runs):
            lines.append(f"  (the newest {len(shown)}; --wide or --json for all {len(runs)})")
        lines += _runs_table(shown, wide)
        lines += _ops_lines(s, op, wide)
        lines += _speed_trends(s.get("speed") or ())
    if res.get("diff"):
        lines += diff_lines(res["diff"], wide=wide)
    return lines


def _ops_lines(s: Mapping[str, Any], op: Optional[str], wide: bool) -> List[str]:
    ops = s["ops"]
    name_w = None if wide else 28
    if op is not None:
        if not ops:
            return [f"  no operator {op!r} in the newest run of this series (a name or an op key, see --json)"]
        out: List[str] = []
        devices = {r["run"]: r.get("device") for r in s["runs"]}
        for o in ops:
            out.append(f"operator {o['name']} ({o['opr_type']}), max error per run (linear, oldest first):")
            out.append(_op_line(o, None))
            band = _out_of_band(o)
            if band:
                out.append(band)
            out += _runs_table(o["points"] if wide else o["points"][-SHOWN:], wide, "max_err", devices)
        return out
    moved = [o for o in ops if o["moved"] > 0]
    if not moved:
        return [f"  every operator ({len(ops)}) has the same max error in each of these runs"] if ops else []
    shown = moved if wide else moved[:SHOWN]
    out = [f"  operators whose max error moved most ({len(shown)} of {len(moved)} that moved; --op NAME for one):"]
    width = min(name_w or 10 ** 6, max(len(o["name"]) for o in shown))
    for o in shown:
        out.append(_op_line(o, width))
        band = _out_of_band(o)
        if band:
            out.append(band)
    return out


def diff_lines(d: Mapping[str, Any], *, wide: bool = False) -> List[str]:
    """``history --diff A --diff B``: the operators that changed, each with both values."""
    ops = d["ops"]
    lines = [f"{len(ops)} operator{'s' * (len(ops) != 1)} changed between run {d['a'][:12]} (A) and {d['b'][:12]} (B)"
             + (":" if ops else "")]
    for field, (a, b) in d.get("run_differences", {}).items():
        lines.append(f"  {field}: A {_cut(str(a), None if wide else 40)} | B {_cut(str(b), None if wide else 40)}")
    if not ops:
        return lines
    shown = ops if wide else ops[:50]

    def side(x: Optional[Dict[str, Any]]) -> List[str]:
        if x is None:
            return ["absent", ""]
        return [_num(x["max_err"]), x["status"] or "-"]

    rows = []
    for c in shown:
        a, b = c["a"], c["b"]
        algo = ""
        if a and b and a.get("algorithm") != b.get("algorithm"):
            algo = f"{_cut(a.get('algorithm'), None if wide else 14)} -> {_cut(b.get('algorithm'), None if wide else 14)}"
        rows.append([_cut(c["name"], None if wide else 28), *side(a), *side(b), algo])
    lines += _table(["operator", "A max error", "A status", "B max error", "B status", "algorithm"], rows,
                    [False, True, False, True, False, False])
    if len(shown) < len(ops):
        lines.append(f"  (+{len(ops) - len(shown)} more: --wide or --json)")
    return lines


def checked_line(run: Mapping[str, Any]) -> str:
    """The run ``check`` judged: its uid, what it was and when."""
    what = " ".join(x for x in (run.get("command"), run.get("model_name"), run.get("config")) if x)
    return f"checked run {run['uid'][:12]} ({what}, {_date(run.get('created'))} UTC, {run.get('device') or '?'})"


def _part_name(option: Optional[str]) -> str:
    return option or "default"


def speed_lines(speed: Optional[Mapping[str, Any]]) -> List[str]:
    """``check``'s speed per timed part: its verdict and why, the run last within its band."""
    lines = []
    for v in (speed or {}).get("parts") or ():
        good = v.get("last_good") or {}
        where = f"; last good {good.get('created')} ({good.get('build')})" if v["verdict"] == "regressed" and good else ""
        if v["verdict"] in ("not_judged", "not_timed"):
            lines.append(f"  speed of {_part_name(v['option'])}: {v['why']}")
        else:
            lines.append(f"  speed {v['verdict']} {_part_name(v['option'])}: {v['why']}{where}")
    return lines


def _speed_trends(groups: Sequence[Mapping[str, Any]]) -> List[str]:
    """``history``'s speed: per part and machine the median time per iteration over its runs."""
    out = []
    for g in groups:
        vals = [p["median_ms"] for p in g["points"]]
        out.append(f"  speed {_part_name(g['option'])} on {g['machine']}: {trend(vals)}  min {_num(min(vals))} max "
                   f"{_num(max(vals))} ms per iteration ({len(vals)} run{'s' * (len(vals) != 1)})")
        first = g.get("first_slower")
        if first:
            lo, hi = first["band"]
            out.append(f"    first slower than its band: run {first['run'][:12]} ({_date(first['created'])}), "
                       f"{_num(first['value'])} ms not in [{_num(lo)}, {_num(hi)}]")
    return out
