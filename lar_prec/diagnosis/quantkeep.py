"""Which int8 layers to keep in float, how close the model's outputs stay, and a model that keeps them.

* :func:`choose_keep`: an int8 layer is worth keeping in float when its **local** SNR (the
  layer alone, on the float model's inputs: :mod:`lar_prec.diagnosis.quantinfo`) falls more than
  ``margin_db`` below the median local SNR of the model's int8 layers. Calibrated int8 layers
  sit close together (each adds rounding of its input, weights and output, each a fraction of
  an int8 step); 6 dB is four times the median layer's noise power. A layer with weights on an
  8x coarser grid makes up to 64x the weight-rounding noise (18 dB). Conversions and float
  layers left in the int8 model are not candidates, nor layers that are exact;
* :func:`explain`: what each kept layer's scales say (how much of the int8 range its weights use,
  what rounding its output alone allows), so a mis-scaled layer reads as one;
* :func:`output_agreement`: an output of the int8 model against the float model's: SNR and
  cosine, and for a classifier output (``N x C`` scores, ``C >= 2``) top-1 agreement (the same
  best class) and top-5 agreement (the float model's best class among the int8 model's five
  best; ``C > 5``), over the ``N`` samples;
* :func:`write_kept_model`: the int8 model with the kept layers computed in float32
  (:mod:`lar_prec.lar.quant_rewrite` in a child process), with the float model's weights read
  from the float run's dump (:func:`float_weights`: times the scale of a batch norm the float
  model left after the convolution, per output channel).
"""
from __future__ import annotations

import math
import sys
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence, Tuple

from lar_prec._lazy import numpy as np
from lar_prec.diagnosis.graphinfo import GraphInfo
from lar_prec.diagnosis.local import child_env, run_child
from lar_prec.diagnosis.quantinfo import LayerError, Metrics, QuantPair, metrics, real_values, reference_values
from lar_prec.errors import RunError, UsageError
from lar_prec.lar.quant_rewrite import KEEP_SCHEMA, KEEPABLE, USAGE_EXIT
from lar_prec.outputs import atomic_write_text, json_text
from lar_prec.records import PathLike, json_number

#: how far below the median int8 layer's local SNR a layer must fall to be kept in float
KEEP_IN_FLOAT_MARGIN_DB = 6.0


@dataclass(frozen=True)
class KeptLayer:
    """An int8 layer to keep in float: its local SNR and why it is listed."""

    name: str
    opr_type: str
    local_snr_db: float
    why: str

    def to_json(self) -> Dict[str, Any]:
        return {"name": self.name, "opr_type": self.opr_type, "local_snr_db": self.local_snr_db, "why": self.why}


@dataclass(frozen=True)
class KeepChoice:
    """The layers to keep, the median local SNR of the ``candidates`` int8 layers, and the floor
    (median less the margin) below which a layer is kept; None without a candidate."""

    layers: Tuple[KeptLayer, ...]
    median_db: Optional[float]
    floor_db: Optional[float]
    candidates: int


def choose_keep(layers: Sequence[LayerError], margin_db: float = KEEP_IN_FLOAT_MARGIN_DB) -> KeepChoice:
    """The int8 layers whose local SNR is below the median int8 layer's less ``margin_db``,
    worst first."""
    cands = [l for l in layers if l.int8 and l.local is not None and l.local.snr_db is not None
             and l.local.snr_note is None]
    if not cands:
        return KeepChoice((), None, None, 0)
    snrs = sorted(l.local.snr_db for l in cands)  # type: ignore[union-attr]
    median = snrs[len(snrs) // 2] if len(snrs) % 2 else (snrs[len(snrs) // 2 - 1] + snrs[len(snrs) // 2]) / 2
    floor = median - margin_db
    kept = [KeptLayer(l.quant_name, l.opr_type, l.local.snr_db,  # type: ignore[union-attr]
                      f"local SNR {l.local.snr_db:.1f} dB: {median - l.local.snr_db:.1f} dB below the median "  # type: ignore[union-attr]
                      f"{median:.1f} dB of the model's {len(cands)} int8 layers, floor {floor:.1f} dB")
            for l in sorted(cands, key=lambda l: l.local.snr_db) if l.local.snr_db < floor]  # type: ignore[union-attr]
    return KeepChoice(tuple(kept), median, floor, len(cands))


def explain(choice: KeepChoice, pairs: Sequence[QuantPair], float_g: GraphInfo, quant_g: GraphInfo, float_dump: Any,
            quant_dump: Any) -> KeepChoice:
    """``choice`` with each kept layer's why completed from the arithmetic of its scales: how
    many of the 127 int8 steps its weights use (all of them when calibrated; 16 when the weight
    scale is 8x too large), and the SNR that rounding its output to its scale alone allows
    (``10 log10(12 mean(f^2) / scale^2)``: uniform rounding noise of ``scale^2 / 12``)."""
    by_name = {p.quant_name: p for p in pairs}
    out = []
    for k in choice.layers:
        p = by_name.get(k.name)
        if p is None:
            out.append(k)
            continue
        q, opr = quant_g.vars[p.quant_id], quant_g.producer(p.quant_id)
        notes = []
        w = quant_g.vars[opr.inputs[1]] if opr is not None and opr.type == "ConvBiasForward" else None
        raw = quant_dump[w.id].array() if w is not None and w.is_quantized and w.id in quant_dump else None
        if raw is not None and np.asarray(raw).size:
            notes.append(f"its weights use up to {int(np.abs(np.asarray(raw).astype(np.int64)).max())} of the 127 "
                         "int8 steps")
        f = reference_values(p, float_g, quant_g, float_dump, quant_dump) if q.scale else None
        if f is not None and f.size and np.isfinite(f).all() and float(np.mean(f * f)) > 0:
            bound = 10 * math.log10(12 * float(np.mean(f * f)) / (q.scale * q.scale))  # type: ignore[operator]
            notes.append(f"rounding its output to its scale alone would allow {bound:.1f} dB")
        out.append(replace(k, why=k.why + "".join(f"; {n}" for n in notes)))
    return replace(choice, layers=tuple(out))


# ============================================================================ outputs


@dataclass(frozen=True)
class OutputAgreement:
    """One output of the int8 model against the float model's: metrics, and for a classifier
    output (``samples x classes``) the share of samples whose best class agrees (``top1``) and
    whose float best class is among the int8 model's five best (``top5``; None for 5 classes
    or fewer). Not a classifier: ``classes`` is 0 and top-k are None."""

    name: str
    float_name: str
    metrics: Metrics
    samples: int
    classes: int
    top1: Optional[float]
    top5: Optional[float]

    def to_json(self) -> Dict[str, Any]:
        return {"name": self.name, "float_name": self.float_name, "metrics": self.metrics.to_json(),
                "classifier": self.classes >= 2, "samples": self.samples, "classes": self.classes,
                "top1": json_number(self.top1), "top5": json_number(self.top5)}


def output_agreement(reference: "np.ndarray", values: "np.ndarray", name: str, float_name: str) -> OutputAgreement:
    """``values`` (an int8 model's output, real) against the float model's ``reference``."""
    f = np.asarray(reference, np.float64)
    x = np.asarray(values, np.float64).reshape(f.shape)
    m = metrics(f, x)
    if f.ndim != 2 or f.shape[1] < 2 or not (np.isfinite(f).all() and np.isfinite(x).all()):
        return OutputAgreement(name, float_name, m, 0, 0, None, None)
    best = f.argmax(axis=1)
    top1 = float(np.mean(best == x.argmax(axis=1)))
    top5 = None
    if f.shape[1] > 5:
        five = np.argsort(-x, axis=1, kind="stable")[:, :5]
        top5 = float(np.mean([b in row for b, row in zip(best, five)]))
    return OutputAgreement(name, float_name, m, int(f.shape[0]), int(f.shape[1]), top1, top5)


def output_agreements(pairs: Sequence[Tuple[int, Optional[int]]], float_g: GraphInfo, quant_g: GraphInfo,
                      float_dump: Any, quant_dump: Any) -> List[OutputAgreement]:
    """Every paired output of the int8 model (``pairs``: quantized id, float id) in ``quant_dump``
    against the float model's in ``float_dump``; outputs missing from a dump are left out."""
    out = []
    for q, f in pairs:
        if f is None:
            continue
        fv, qv = real_values(float_dump, float_g.vars[f]), real_values(quant_dump, quant_g.vars[q])
        if fv is not None and qv is not None:
            out.append(output_agreement(fv, qv, quant_g.vars[q].name, float_g.vars[f].name))
    return out


# ============================================================================ the kept model


def _per_channel(k: "np.ndarray", out_shape: Sequence[int]) -> Optional["np.ndarray"]:
    """A constant that scales an NCHW output (``out_shape``) as one factor per channel: the
    ``C`` factors, else None (it varies along another axis, or does not broadcast)."""
    if len(out_shape) != 4 or k.ndim > 4:
        return None
    kk = k.reshape((1,) * (4 - k.ndim) + k.shape)
    if kk.shape[0] != 1 or kk.shape[2] != 1 or kk.shape[3] != 1 or kk.shape[1] not in (1, out_shape[1]):
        return None
    return np.broadcast_to(kk.reshape(-1), (out_shape[1],))


def float_weights(p: QuantPair, float_g: GraphInfo, float_dump: Any) -> Tuple[Optional["np.ndarray"], str]:
    """The weights of ``p``'s float convolution as the int8 ConvBias holds them, from the float
    run's dump: the convolution's own, times each scale the float layer applies after it (a
    BatchNorm left after the convolution: ``conv(x, w) * k = conv(x, w * k)`` for ``k`` one
    factor per output channel); None and why when they cannot be had."""
    opr = float_g.producer(p.float_anchor) if p.float_anchor is not None else None
    if opr is None or opr.type not in ("ConvolutionForward", "ConvBiasForward") or len(opr.inputs) < 2:
        return None, "its float layer is not a convolution"
    w = real_values(float_dump, float_g.vars[opr.inputs[1]])
    if w is None:
        return None, "the float run's dump has no weights of its float layer"
    if p.scales_problem:
        return None, f"its float layer's scale cannot be folded into the weights: {p.scales_problem}"
    out_shape = float_g.vars[p.float_anchor].shape or ()
    for cid, exponent in p.float_scales:
        name = float_g.vars[cid].name
        k = real_values(float_dump, float_g.vars[cid])
        if k is None:
            return None, f"the float run's dump has no {name} (the scale its float layer applies after the convolution)"
        per = _per_channel(np.asarray(k, np.float64), out_shape)
        if per is None or w.ndim < 4 or int(np.prod(w.shape[:-3])) != per.size:
            return None, (f"its float layer scales the convolution by {name} of shape {list(np.shape(k))}, not one "
                          f"factor per output channel of {list(out_shape)}")
        w = np.asarray(w, np.float64) * (per ** exponent).reshape(w.shape[:-3] + (1, 1, 1))
    return w, ""


def keep_spec(kept: Sequence[KeptLayer], pairs: Sequence[QuantPair], float_g: GraphInfo, float_dump: Any,
              out_dir: PathLike) -> Tuple[List[Dict[str, Any]], List[str]]:
    """The keep file's layers (each ConvBias with its float weights written as ``.npy`` from the
    float run's dump) and, for layers that cannot be kept by the rewrite, why."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    by_name = {p.quant_name: p for p in pairs}
    spec, skipped = [], []
    for k in kept:
        if k.opr_type not in KEEPABLE:
            skipped.append(f"{k.name}: a {k.opr_type} cannot be rewritten in float (only {', '.join(sorted(KEEPABLE))})")
            continue
        weight = None
        if k.opr_type == "ConvBiasForward":
            p = by_name.get(k.name)
            w, why = float_weights(p, float_g, float_dump) if p is not None else (None, "it has no float partner")
            if w is None:
                skipped.append(f"{k.name}: {why}")
                continue
            weight = out / f"weight-{len(spec)}.npy"
            np.save(weight, np.ascontiguousarray(w.astype(np.float32)))
        spec.append({"name": k.name, "weight": str(weight) if weight else None})
    return spec, skipped


def write_kept_model(quant_model: PathLike, out: PathLike, spec: Sequence[Dict[str, Any]], *,
                     timeout: Optional[float] = 600.0) -> Path:
    """The int8 model with the layers of ``spec`` computed in float32, written to ``out`` by a
    child process; the keep file and the record go beside it (``<out>.keep.json``, ``<out>.json``).

    Raises:
        UsageError (exit 2): a layer the rewrite refuses; RunError (exit 3): MegEngine failed.
    """
    dst = Path(out)
    keep_file, record = dst.with_name(dst.name + ".keep.json"), dst.with_name(dst.name + ".json")
    atomic_write_text(keep_file, json_text({"schema": KEEP_SCHEMA, "layers": list(spec)}), what="keep file")
    argv = [sys.executable, "-m", "lar_prec.lar.quant_rewrite", str(quant_model), str(dst), "--keep", str(keep_file),
            "--record", str(record)]
    try:
        run_child(argv, child_env(), timeout, f"keeping layers of {quant_model} in float", dst.with_name(dst.name + ".log"))
    except RunError as exc:
        if exc.returncode == USAGE_EXIT:
            lines = [ln for ln in exc.stderr_tail.splitlines() if ln.startswith("quant_rewrite: error: ")]
            raise UsageError(lines[-1][len("quant_rewrite: error: "):] if lines else str(exc)) from None
        raise
    return dst
