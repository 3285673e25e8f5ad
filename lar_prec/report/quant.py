"""The terminal view of ``lar-prec quant``: drawn from the analysis's JSON (``QuantAnalysis.to_json``)."""
from __future__ import annotations

from typing import Any, Mapping, TextIO


def _f(x: Any, fmt: str) -> str:
    return "-" if x is None else format(x, fmt)


def _snr(m: Mapping[str, Any]) -> str:
    return "inf" if m.get("snr_infinite") else _f(m.get("snr_db"), ".1f")


def render_quant_terminal(data: Mapping[str, Any], out: TextIO, *, limit: int = 20) -> None:
    """Layers worst first (local SNR), the layers to keep in float, and what did not pair."""
    layers = data["layers"]
    out.write(f"{len(layers)} layer(s) compared, worst first (local SNR in dB; accumulated = against the "
              f"float model's naive run)\n")
    out.write(f"{'layer':<32} {'type':<14} {'local SNR':>9} {'local cos':>10} {'acc SNR':>8} {'acc cos':>9} "
              f"{'acc rel':>9}\n")
    for l in layers[:limit]:
        lo, acc = l["local"] or {}, l["accumulated"] or {}
        out.write(f"{l['name'][:32]:<32} {l['opr_type'][:14]:<14} {_snr(lo):>9} "
                  f"{_f(lo.get('cosine'), '.5f'):>10} {_snr(acc):>8} "
                  f"{_f(acc.get('cosine'), '.5f'):>9} {_f(acc.get('rel_err'), '.2e'):>9}\n")
    if len(layers) > limit:
        out.write(f"... {len(layers) - limit} more in the JSON\n")
    unpaired = data["unpaired"]
    if unpaired:
        out.write(f"{len(unpaired)} var(s) not paired:\n")
        for u in unpaired[:limit]:
            out.write(f"  {u['side']}: {u['name']}: {u['why']}\n")
    keep = data["keep_in_float"]
    floor = data["snr_floor_text"] or f"{data['snr_floor_db']:.1f}"
    if keep:
        out.write(f"keep in float ({len(keep)}; local SNR below {floor} dB): {', '.join(keep)}\n")
    else:
        out.write(f"no layer to keep in float (every local SNR at or above {floor} dB)\n")
