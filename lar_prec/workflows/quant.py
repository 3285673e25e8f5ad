"""Per-layer quantization error (``lar-prec quant FLOAT.mge QUANT.mge``): the float model run with
the naive kernels, the quantized one with the default kernels, vars paired by name, the quantized
values dequantized with their scales, and every layer's accumulated and local error, worst first.
The measuring lives in :mod:`lar_prec.diagnosis.quantinfo`; this module only runs and composes."""
from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence, Tuple, Union

from lar_prec.diagnosis.graphinfo import describe_model
from lar_prec.diagnosis.quantinfo import (
    LayerError,
    QuantPairing,
    layer_errors,
    local_quant_errors,
    pair_quant,
    with_local,
    worst_first,
)
from lar_prec.dumps.folder import DumpFolder
from lar_prec.errors import LarPrecError
from lar_prec.inputspec import check_file
from lar_prec.outputs import atomic_write_text, json_text
from lar_prec.records import PathLike, json_number
from lar_prec.report.html import write_html
from lar_prec.run.once import run_once
from lar_prec.run.record import RunResult
from lar_prec.workflows.common import prepare_analysis

# A layer whose local SNR falls this far below the model's median local SNR is worth keeping in
# float: well-scaled int8 layers sit close together, a mis-scaled one 8x coarser loses ~18 dB.
KEEP_IN_FLOAT_MARGIN_DB = 6.0


@dataclass(frozen=True)
class QuantAnalysis:
    """Everything ``lar-prec quant`` found: layers worst first (by local SNR), what did not pair
    and why, the runs made, and the layers to keep in float (local SNR below ``snr_floor_db``: the median less a margin)."""

    analysis_dir: Path
    layers: Tuple[LayerError, ...]
    pairing: QuantPairing
    runs: Tuple[RunResult, ...]
    keep_in_float: Tuple[str, ...]
    snr_floor_db: float

    def to_json(self) -> Dict[str, Any]:
        """Strict JSON: infinite SNRs (equal values) and floors are null, said beside them."""
        def m(x: Any) -> Optional[Dict[str, Any]]:
            return None if x is None else x.to_json()
        return {
            "schema": "lar-prec.quant/1",
            "analysis_dir": str(self.analysis_dir),
            "keep_in_float": list(self.keep_in_float),
            "snr_floor_db": json_number(self.snr_floor_db),
            # inf: the median layer is exact; -inf: no layer's local SNR was measured
            "snr_floor_text": None if math.isfinite(self.snr_floor_db) else str(self.snr_floor_db),
            "layers": [{"id": l.quant_id, "name": l.quant_name, "opr_type": l.opr_type, "dtype": l.dtype,
                        "scale": l.scale, "float_name": l.float_name, "paired_by": l.how,
                        "accumulated": m(l.entire), "local": m(l.local), "local_note": l.local_note}
                       for l in self.layers],
            "unpaired": [{"side": u.side, "id": u.id, "name": u.name, "why": u.why} for u in self.pairing.unpaired],
            "runs": [r.to_json() for r in self.runs],
        }


def quant_analysis(float_model: PathLike, quant_model: PathLike, inputs: Union[str, Sequence[str]], *,
                   out: Optional[PathLike] = None, seed: int = 0, lar: Any = None,
                   timeout: Optional[float] = None, margin_db: float = KEEP_IN_FLOAT_MARGIN_DB) -> QuantAnalysis:
    """Run both models once, pair, dequantize, measure; see the module docstring.

    Raises:
        UsageError (exit 2): a model or input is missing or wrong; RunError (exit 3): a run failed.
    """
    quant_path = check_file(quant_model, "quantized model file")
    float_path, adir, prepared, lar_obj = prepare_analysis(float_model, inputs, out, "quant", seed, lar, timeout)
    fg = describe_model(float_path, adir / "float.graph.json")
    qg = describe_model(quant_path, adir / "quant.graph.json")
    f_run = run_once(float_path, prepared, "naive", adir, lar=lar_obj, timeout=timeout, label="float-naive")
    q_run = run_once(quant_path, prepared, "default", adir, lar=lar_obj, timeout=timeout, label="quant-default")
    fd, qd = DumpFolder(f_run.dump), DumpFolder(q_run.dump)
    pairing = pair_quant(fg, qg)
    local = local_quant_errors(quant_path, qg, fg, pairing, fd, qd, adir / "local", lar=lar_obj, timeout=timeout)
    layers = worst_first(with_local(layer_errors(fg, qg, fd, qd, pairing), local))
    snrs = sorted(l.local.snr_db for l in layers if l.local is not None and l.local.snr_db is not None)
    floor = snrs[len(snrs) // 2] - margin_db if snrs else float("-inf")
    keep: List[str] = [l.quant_name for l in layers
                       if l.local is not None and l.local.snr_db is not None and l.local.snr_db < floor]
    res = QuantAnalysis(adir, tuple(layers), pairing, (f_run, q_run), tuple(keep), floor)
    data = res.to_json()
    try:
        atomic_write_text(adir / "quant.json", json_text(data), what="quant result")
        write_html(data, adir / "quant.html")
    except LarPrecError as exc:  # a full disk at the very end: the verdict is shown first
        exc.report = data
        raise
    return res
