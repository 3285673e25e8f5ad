"""The terminal view of ``lar-prec quant``: drawn from the analysis's JSON (``QuantAnalysis.to_json``)."""
from __future__ import annotations

from typing import Any, Mapping, Optional, TextIO

from lar_prec.report.console import fit_names


def _f(x: Any, fmt: str) -> str:
    return "-" if x is None else format(x, fmt)


#: how an SNR that is not a number is shown, by its ``snr_note``
SNR_NOTES = {"exact": "exact", "zero signal": "no signal"}


def snr_text(m: Optional[Mapping[str, Any]]) -> str:
    """An SNR for a table: dB, ``exact`` (infinite: equal values), ``no signal`` (the float
    values are all zero), ``NaN/Inf`` (non-finite values), or ``-`` (not measured)."""
    if not m:
        return "-"
    if m.get("snr_db") is not None:
        return format(m["snr_db"], ".1f")
    note = m.get("snr_note") or ""
    return SNR_NOTES.get(note, "NaN/Inf" if note.startswith("non-finite") else "-")


def _share(x: Any, n: int) -> str:
    return "-" if x is None else f"{round(x * n)}/{n}"


def render_quant_terminal(data: Mapping[str, Any], out: TextIO, *, limit: int = 20) -> None:
    """The verdict, the outputs, layers worst first (local SNR), the layers to keep in float and
    the check of that list, what did not pair, and where the files are."""
    out.write(data["verdict"] + "\n")
    p = data["pairing"]
    fused = sum(1 for u in data["unpaired"] if u["fused"])
    out.write(f"pairing: {p['layers_paired']} of the int8 model's {p['layers_total']} layers paired with the float "
              f"model's; {fused} float intermediate value(s) fused away by quantization\n")
    if data["outputs"]:
        cut = fit_names([o["name"] for o in data["outputs"]], 32)
        w = max([32] + [len(c) for c in cut.values()])
        out.write(f"{'output':<{w}} {'SNR dB':>7} {'cosine':>9} {'top-1':>6} {'top-5':>6}\n")
        for o in data["outputs"]:
            out.write(f"{cut[o['name']]:<{w}} {snr_text(o['metrics']):>7} {_f(o['metrics']['cosine'], '.5f'):>9} "
                      f"{_share(o['top1'], o['samples']):>6} {_share(o['top5'], o['samples']):>6}\n")
    layers = data["layers"]
    kept = set(data["keep_in_float"])
    out.write(f"{len(layers)} var(s) compared, worst first (local SNR in dB: the int8 operator on the float "
              f"model's inputs; accumulated: against the float model's naive run)\n")
    cut = fit_names([l["name"] for l in layers[:limit]], 32)  # two names never cut to the same text
    w = max([32] + [len(c) for c in cut.values()])
    out.write(f"  {'layer':<{w}} {'type':<18} {'local SNR':>9} {'local cos':>10} {'acc SNR':>8} {'acc cos':>9}\n")
    for l in layers[:limit]:
        lo, acc = l["local"] or {}, l["accumulated"] or {}
        mark = "*" if l["name"] in kept else " "
        out.write(f"{mark} {cut[l['name']]:<{w}} {l['opr_type'][:18]:<18} {snr_text(lo):>9} "
                  f"{_f(lo.get('cosine'), '.5f'):>10} {snr_text(acc):>8} {_f(acc.get('cosine'), '.5f'):>9}"
                  f"{'  ' + l['local_note'] if l['local_note'] else ''}\n")
    if len(layers) > limit:
        out.write(f"  ... {len(layers) - limit} more in the JSON\n")
    lost = [u for u in data["unpaired"] if not u["fused"]]
    if lost:
        out.write(f"{len(lost)} var(s) not paired:\n")
        for u in lost[:limit]:
            out.write(f"  {u['side']}: {u['name']}: {u['why']}\n")
    for m in data["not_measured"]:
        out.write(f"not measured: {m['name']}: {m['why']}\n")
    v = data.get("verification")
    if v and v.get("model"):
        out.write(f"model with the kept layer(s) in float32: {v['model']}\n")
    out.write(f"analysis folder: {data['analysis_dir']} (quant.json, quant.html)\n")
