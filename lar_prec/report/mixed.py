"""The terminal view of ``lar-prec mixed``: drawn from the analysis's JSON (``MixedAnalysis.to_json``)."""
from __future__ import annotations

from typing import Any, List, Mapping, Optional, TextIO

from lar_prec.report.console import fit_names, shown

#: width the operator column starts from (widened where two names would read alike)
NAME_WIDTH = 32


def _e(x: Any) -> str:
    return "-" if x is None else x if isinstance(x, str) else format(x, ".3g")


def _pct(x: Any) -> str:
    return "-" if x is None else f"{100 * x:.1f}%"


def _top(p: Mapping[str, Any], key: str) -> str:
    """``8/8`` per classifier output (joined by spaces), ``-`` when no output is one."""
    agree = p.get("agreement") or []
    return " ".join(f"{a[key]}/{a['samples']}" for a in agree) or "-"


def curve_rows(data: Mapping[str, Any]) -> List[Mapping[str, Any]]:
    """The points the terminal and the page list: the option alone, correct float16, then each
    verification (the curve is the part from the kernel bugs fixed on)."""
    plain = dict(data["plain"], label=data["plain"].get("label") or "the option alone", step="0", kept=0)
    rows: List[Mapping[str, Any]] = [plain]
    if data.get("level"):
        rows.append(dict(data["level"], step="-", kept="-"))
    rows.extend(dict(a, step=str(a["step"]), kept=len(a["keep"])) for a in data["attempts"])
    return rows


def speed_cell(p: Mapping[str, Any]) -> str:
    """A point's speed against float32 for the table: ``1.90x faster``, ``no measurable
    difference``, ``timing crashed`` (its reason is printed under the table), ``-`` untimed."""
    sp = p.get("speed")
    if not sp:
        return "-"
    if sp.get("status") != "timed":
        return "timing " + str(sp["status"]).replace("_", " ")
    iv, x = sp.get("speedup_interval"), sp.get("speedup")
    if not (sp.get("measurable") and iv and x):
        return sp["words"]
    lo, hi = (iv[0], iv[1]) if x >= 1 else (1 / iv[1], 1 / iv[0])  # in the words' own sense: x faster or x slower
    return f"{sp['words']} ({_times(lo)}-{_times(hi)})"


def _times(v: float) -> str:
    return f"{v:.2f}x" if v < 1.995 else f"{v:.1f}x" if v < 99.5 else f"{v:.0f}x"


def _err(p: Mapping[str, Any]) -> str:
    if p.get("failed"):
        return "did not run"
    return "inf (NaN or Inf)" if p.get("nonfinite") else _e(p.get("output_err"))


def render_mixed_terminal(data: Mapping[str, Any], out: TextIO) -> None:
    """What to do (the advice), the keep-list with why each operator errs, every point of the
    curve and the files."""
    for line in data.get("advice") or ():
        out.write(shown(line) + "\n")
    said = data.get("input_summary") or {}
    for line in [said.get("line"), *(said.get("warnings") or ())]:  # seeded random or constant inputs
        if line:
            out.write(shown(line) + "\n")
    if data.get("note") and not data["plain"].get("failed"):
        out.write(f"note: {shown(data['note'])}\n")
    kept = data["kept"]
    if kept:
        cut = fit_names([k["name"] for k in kept], NAME_WIDTH)
        w = max(len(v) for v in cut.values())
        out.write(f"{'keep in float32':<{w}} {'type':<18} {'local err':>9} {'floor':>9}  why it errs in float16\n")
        for k in kept:
            cause = k["cause"] or ((k.get("cause_detail") or {}).get("why") or "-")
            out.write(f"{shown(cut[k['name']]):<{w}} {k['opr_type'][:18]:<18} {_e(k['local_err']):>9} "
                      f"{_e(k['floor']):>9}  {cause}\n")
            out.write(f"{'':<{w}} listed: {shown(k['listed'])}\n")
    rows = curve_rows(data)
    tol = data["tolerance"]
    out.write(f"points (output error against the share left in float16; tolerance {_e(tol)}):\n")
    width = max(len(str(r["label"])) for r in rows)
    timing = data.get("speed") or {}
    timed = not timing.get("off")
    sw = max([len(speed_cell(r)) for r in rows] + [len("vs float32")]) if timed else 0
    speed_head = f" {'vs float32':<{sw}}" if timed else ""
    out.write(f"  {'model':<{width}} {'output err':>10}  {'':<6} {'MACs f16':>8} {'oprs f16':>9}{speed_head} "
              f"{'top-1':>6} {'top-5':>6}\n")
    knee: Optional[Mapping[str, Any]] = data.get("knee")
    for r in rows:
        err = _err(r)
        verdict = "" if r.get("failed") or r["step"] == "-" else (
            "within" if r.get("output_err") is not None and r["output_err"] <= tol and not r.get("nonfinite")
            else "out")
        mark = " <- knee" if knee and r.get("label") == knee.get("label") else ""
        oprs = f"{r.get('oprs_float16', '-')}/{r.get('oprs_total', '-')}"
        speed = f" {speed_cell(r):<{sw}}" if timed else ""
        out.write(f"  {shown(str(r['label'])):<{width}} {err:>10}  {verdict:<6} {_pct(r.get('macs_fraction')):>8} "
                  f"{oprs:>9}{speed} {_top(r, 'top1'):>6} {_top(r, 'top5'):>6}{mark}\n")
    if timed:
        base = timing.get("float32") or {}
        out.write(f"speed: {timing.get('rounds')} interleaved rounds of --warmup-iter {timing.get('warmup_iter')} "
                  f"--iter {timing.get('iter')} without dumps, {timing.get('threads')} thread(s) on "
                  f"{shown(str(timing.get('device')))}; float32 (the plain model): {shown(base.get('words') or '-')}\n")
        for r in rows:
            sp = r.get("speed") or {}
            if sp.get("status") not in (None, "timed"):
                out.write(f"  {shown(str(r['label']))}: {shown(sp['words'])}\n")
    f = data["fp16_fraction"]
    out.write(f"left in float16: {_pct(f['macs_fraction'])} of MACs, {f['oprs_float16']}/{f['oprs_total']} "
              f"float operators\n")
    mm = data.get("mixed_model")
    if mm:
        out.write(f"mixed model: {mm['path']}\n")
    out.write(f"keep-list: {data['keep_file']}\n")
