"""The terminal view of ``lar-prec mixed``: drawn from the analysis's JSON (``MixedAnalysis.to_json``)."""
from __future__ import annotations

from typing import Any, Mapping, TextIO


def _e(x: Any) -> str:
    return "-" if x is None else x if isinstance(x, str) else format(x, ".3g")


def _pct(x: Any) -> str:
    return "-" if x is None else f"{100 * x:.1f}%"


def render_mixed_terminal(data: Mapping[str, Any], out: TextIO) -> None:
    """The verdict, the keep-list with why each operator errs, each verification and the files."""
    opt, tol = data["option"], data["tolerance"]
    plain = data["plain"]["output_err"] if not data["plain"]["nonfinite"] else "inf (NaN or Inf in an output)"
    verdict = data["verdict"]
    if data["plain"].get("failed"):
        out.write(f"--enable-{opt} alone does not run here ({data['plain']['failed']}); the rewritten model with "
                  f"{len(data['kept'])} operator(s) in float32 runs with output error {_e(data['output_err'])} "
                  f"({'within' if data['verified'] else 'out of'} {_e(tol)})\n")
    elif verdict == "within":
        out.write(f"--enable-{opt} alone keeps every output within {_e(tol)} of the naive float32 reference "
                  f"(output error {_e(plain)}): nothing needs float32\n")
    elif verdict == "fixed":
        out.write(f"--enable-{opt} alone: output error {_e(plain)} > {_e(tol)}; keeping {len(data['kept'])} "
                  f"operator(s) in float32 brings it to {_e(data['output_err'])} (verified)\n")
    else:
        out.write(f"--enable-{opt} alone: output error {_e(plain)} > {_e(tol)}; no keep-list tried brings it within "
                  f"(best: {_e(data['output_err'])}): the default kernels differ from the naive ones in float32 too\n")
    if data.get("note") and not data["plain"].get("failed"):
        out.write(f"note: {data['note']}\n")
    kept = data["kept"]
    if kept:
        out.write(f"{'keep in float32':<28} {'type':<18} {'local err':>9} {'floor':>9}  why it errs in float16\n")
        for k in kept:
            cause = k["cause"] or ((k.get("cause_detail") or {}).get("why") or "-")
            out.write(f"{k['name'][:28]:<28} {k['opr_type'][:18]:<18} {_e(k['local_err']):>9} {_e(k['floor']):>9}  "
                      f"{cause}\n")
            out.write(f"{'':<28} listed: {k['listed']}\n")
    for a in data["attempts"]:
        err = "inf (NaN or Inf)" if a["nonfinite"] else _e(a["output_err"])
        out.write(f"verification {a['step']}: {len(a['keep'])} in float32, output error {err} "
                  f"({'within' if a['within'] else 'out of'} tolerance)\n")
    f = data["fp16_fraction"]
    out.write(f"left in float16: {_pct(f['macs_fraction'])} of MACs, {f['oprs_float16']}/{f['oprs_total']} "
              f"float operators\n")
    mm = data.get("mixed_model")
    if mm:
        out.write(f"mixed model: {mm['path']}\n")
    out.write(f"keep-list: {data['keep_file']}\n")
