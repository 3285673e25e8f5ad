"""Per-layer error of a quantized model against its float counterpart (numpy only).

A float model and the model MegEngine's quantization made from it (``quantize_qat``,
calibration, ``quantize``) compute the same layers; this module says how far each quantized
layer is from the float one:

* **scales** come from the quantized model's graph (:mod:`lar_prec.lar.graph_records`): dump
  titles name ``QuantizedS8``/``QuantizedS32`` but carry no scale, so a dumped tensor is
  ``raw x scale`` (``(raw - zero_point) x scale`` when asymmetric) only with the graph;
* **pairing** (:func:`pair_quant`): module names survive quantization, operators do not. A
  quantized var pairs with the float var of the same name (``pool.Pooling``,
  ``fc.MatrixMul``); else, as the last var of its module (``c1.ConvBias``: conv, bias and
  ReLU fused into one int8 operator), with the last var of that module in the float model
  (``c1.RELU``); else, as a ``TypeCvt`` (quantize, requantize, dequantize), with what its
  input pairs with (``q.TypeCvt`` with the float input ``data``). Float vars inside a fused
  module have no quantized counterpart: each unpaired var says why;
* **accumulated error** (:func:`layer_errors`): each pair's dequantized values against the
  float ones, cosine, relative error and SNR in dB, and MegEngine's metric;
* **local error** (:func:`local_quant_errors`): the quantized model's layerwise model
  (:mod:`lar_prec.local`) fed with the float run's values of each layer's inputs, quantized to
  the input's own scale by the layerwise model's ``TypeCvt``: each quantized operator on the
  float reference's inputs, against the float reference's output. A deliberately mis-scaled
  layer is the worst here, and only it (:func:`worst_first`).

:func:`step_differences` counts differences of exactly one quantization step between two
runs of a quantized var apart from larger ones (optimised int8 kernels may round differently).
"""
from __future__ import annotations

import math
import re
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple

from lar_prec._lazy import numpy as np
from lar_prec.diagnosis.graphinfo import GraphInfo, GraphVar
from lar_prec.diagnosis.oracle import dequantize
from lar_prec.errors import UsageError
from lar_prec.compare.metrics import cosine_from_sums, max_megengine_err
from lar_prec.records import PathLike, json_number
from lar_prec.run.inputs import PreparedInput, PreparedInputs
from lar_prec.outputs import atomic_write_text, json_text, sha256_file
from lar_prec.diagnosis.local import build_layerwise, output_ids, run_layerwise

#: a var named ``<module path>.<Operator>[<k>]``: the module path is every dotted part but the last
_MODULE_VAR = re.compile(r"\A([A-Za-z_]\w*(?:\.\w+)*)\.[A-Za-z_]\w*(?:\[\d+\])?\Z")


def module_of(name: str) -> Optional[str]:
    """``blocks.0`` for ``blocks.0.RELU[1]``, ``c1`` for ``c1.ConvBias``; None for names that
    are not ``module.Operator`` (auto names such as ``conv(data,w)[12]``)."""
    m = _MODULE_VAR.match(name)
    return m.group(1) if m else None


# ============================================================================ pairing


@dataclass(frozen=True)
class QuantPair:
    """Quantized var ``quant_id`` holds (a quantization of) float var ``float_id``.
    ``how``: ``name`` | ``module output`` | ``conversion``."""

    quant_id: int
    quant_name: str
    float_id: int
    float_name: str
    how: str


@dataclass(frozen=True)
class QuantUnpaired:
    """A computed var of one side (``float`` | ``quant``) without a partner, and why."""

    side: str
    id: int
    name: str
    why: str


@dataclass(frozen=True)
class QuantPairing:
    pairs: Tuple[QuantPair, ...]
    unpaired: Tuple[QuantUnpaired, ...]

    def by_quant(self) -> Dict[int, QuantPair]:
        return {p.quant_id: p for p in self.pairs}

    def to_json(self) -> Dict[str, Any]:
        return {"pairs": [p.__dict__ for p in self.pairs], "unpaired": [u.__dict__ for u in self.unpaired]}


def _computed(g: GraphInfo, want) -> List[GraphVar]:
    """Computed vars of ``g`` in execution order whose dtype ``want`` accepts (the last
    producer of a repeated name wins, as the dump pairing does)."""
    out: Dict[str, GraphVar] = {}
    for opr in g.computing():
        for vid in opr.outputs:
            v = g.vars[vid]
            if want(v) and v.shape:
                out.pop(v.name, None)
                out[v.name] = v
    return list(out.values())


def pair_quant(float_g: GraphInfo, quant_g: GraphInfo) -> QuantPairing:
    """Pair the quantized model's vars with the float model's (the rules of the module doc)."""
    fvars = _computed(float_g, lambda v: v.is_float)
    qvars = _computed(quant_g, lambda v: v.is_quantized or v.is_float)
    f_by_name = {v.name: v for v in fvars}
    f_inputs = {float_g.vars[o.outputs[0]].name: float_g.vars[o.outputs[0]]
                for o in float_g.operators if o.type == "Host2DeviceCopy"}
    f_last: Dict[str, GraphVar] = {}
    for v in fvars:
        mod = module_of(v.name)
        if mod:
            f_last[mod] = v  # in execution order: the module's output is the last
    q_last: Dict[str, int] = {}
    for v in qvars:
        mod = module_of(v.name)
        if mod:
            q_last[mod] = v.id
    pairs: Dict[int, QuantPair] = {}
    why: Dict[int, str] = {}
    for q in qvars:
        f = f_by_name.get(q.name)
        mod = module_of(q.name)
        if f is None and mod and q_last.get(mod) == q.id:
            f, how = f_last.get(mod), "module output"
        else:
            how = "name"
        if f is not None:
            if f.shape == q.shape:
                pairs[q.id] = QuantPair(q.id, q.name, f.id, f.name, how)
                continue
            why[q.id] = f"float var {f.name} has shape {list(f.shape or ())}, this one {list(q.shape)}"
    for q in qvars:  # conversions, in execution order: a chain follows its first paired var
        opr = quant_g.producer(q.id)
        if q.id in pairs or opr is None or opr.type != "TypeCvt":
            continue
        src = quant_g.vars[opr.inputs[0]]
        f = (float_g.vars[pairs[src.id].float_id] if src.id in pairs
             else f_inputs.get(src.name) if quant_g.producer(src.id).type == "Host2DeviceCopy" else None)
        if f is not None and f.shape == q.shape:
            pairs[q.id] = QuantPair(q.id, q.name, f.id, f.name, "conversion")
            why.pop(q.id, None)
    unpaired = [QuantUnpaired("quant", q.id, q.name, why.get(q.id) or
                              f"no float var named {q.name}" + (f", no module {module_of(q.name)} in the float model"
                                                                if module_of(q.name) else "")
                              + ", not a conversion of a paired var")
                for q in qvars if q.id not in pairs]
    paired_f = {p.float_id: p for p in pairs.values()}
    consumers: Dict[int, List[int]] = {}
    for opr in float_g.computing():
        for i in opr.inputs:
            consumers.setdefault(i, []).extend(opr.outputs)
    for f in fvars:
        if f.id in paired_f:
            continue
        down = _first_paired_downstream(f.id, consumers, paired_f)
        if down is not None:
            reason = (f"an intermediate of {down.float_name}, which quantized {down.quant_name} computes in one "
                      f"operator ({down.how}): the quantization fused it away")
        else:
            reason = "no quantized var computes it (no var of that name, module or conversion)"
        unpaired.append(QuantUnpaired("float", f.id, f.name, reason))
    return QuantPairing(tuple(pairs[q.id] for q in qvars if q.id in pairs), tuple(unpaired))


def _first_paired_downstream(vid: int, consumers: Mapping[int, List[int]],
                             paired: Mapping[int, QuantPair]) -> Optional[QuantPair]:
    seen, frontier = {vid}, list(consumers.get(vid, []))
    while frontier:
        nxt: List[int] = []
        for k in frontier:
            if k in paired:
                return paired[k]
            if k not in seen:
                seen.add(k)
                nxt.extend(consumers.get(k, []))
        frontier = nxt
    return None


# ============================================================================ metrics


@dataclass(frozen=True)
class Metrics:
    """A quantized layer's dequantized values ``x`` against the float ones ``f``: cosine,
    relative error ``|x - f| / |f|`` (2-norms), SNR ``10 log10(|f|^2 / |x - f|^2)`` dB (inf when
    equal), MegEngine's ``max_err``."""

    cosine: Optional[float]
    rel_err: Optional[float]
    snr_db: Optional[float]
    max_err: Optional[float]

    def to_json(self) -> Dict[str, Any]:
        """Strict JSON: an infinite SNR (the values are equal) is null with ``snr_infinite``."""
        d: Dict[str, Any] = {k: json_number(getattr(self, k)) for k in ("cosine", "rel_err", "snr_db", "max_err")}
        d["snr_infinite"] = self.snr_db == math.inf
        return d


def metrics(reference: "np.ndarray", values: "np.ndarray") -> Metrics:
    f = np.asarray(reference, np.float64).ravel()
    x = np.asarray(values, np.float64).ravel()
    if f.shape != x.shape:
        raise UsageError(f"cannot compare a var of {f.size} values with one of {x.size}")
    ff, xx, fx = float(np.einsum("i,i->", f, f)), float(np.einsum("i,i->", x, x)), float(np.einsum("i,i->", f, x))
    d = x - f
    dd = float(np.einsum("i,i->", d, d))
    rel = math.sqrt(dd / ff) if ff > 0 else None
    snr = (math.inf if dd == 0 else 10.0 * math.log10(ff / dd)) if ff > 0 else None
    return Metrics(cosine_from_sums(ff, fx, xx), rel, snr,
                   max_megengine_err(f.astype(np.float32), x.astype(np.float32)))


def _dump_of(folder: Any, var: GraphVar) -> Optional[Any]:
    """The dump of ``var`` in a folder of its model: same id and name, else the one var of
    that name (the last dump of it)."""
    if var.id in folder and folder[var.id].var.name == var.name:
        return folder[var.id]
    hits = [d for d in folder if d.var.name == var.name]
    return hits[-1] if hits and len({d.id for d in hits}) == 1 else None


def real_values(folder: Any, var: GraphVar) -> Optional["np.ndarray"]:
    """``var``'s dumped values as real numbers (quantized ones dequantized with the graph's
    scale); None when the dump has no such var."""
    d = _dump_of(folder, var)
    if d is None:
        return None
    dtype = d.var.dtype
    if dtype != var.dtype:
        raise UsageError(f"{getattr(folder, 'path', folder)}: var {var.name} is dumped as {dtype}, the model "
                         f"says {var.dtype}: the dump is not of this model")
    return dequantize(np.asarray(d.array()), var)


# ============================================================================ per layer


@dataclass(frozen=True)
class LayerError:
    """One quantized var against its float partner: ``entire`` (accumulated, the two runs'
    dumps) and ``local`` (the quantized operator on the float reference's inputs; None with
    ``local_note`` when not measured)."""

    quant_id: int
    quant_name: str
    opr_type: str
    dtype: str
    scale: Optional[float]
    float_name: str
    how: str
    entire: Metrics
    local: Optional[Metrics] = None
    local_note: str = ""

    def to_json(self) -> Dict[str, Any]:
        return {"quant_id": self.quant_id, "quant_name": self.quant_name, "opr_type": self.opr_type,
                "dtype": self.dtype, "scale": self.scale, "float_name": self.float_name, "how": self.how,
                "entire": self.entire.to_json(), "local": self.local.to_json() if self.local else None,
                "local_note": self.local_note or None}


def layer_errors(float_g: GraphInfo, quant_g: GraphInfo, float_dump: Any, quant_dump: Any,
                 pairing: QuantPairing) -> Tuple[LayerError, ...]:
    """Accumulated error of every pair present in both dumps, in the quantized execution order."""
    out: List[LayerError] = []
    for p in pairing.pairs:
        q, f = quant_g.vars[p.quant_id], float_g.vars[p.float_id]
        fv, qv = real_values(float_dump, f), real_values(quant_dump, q)
        if fv is None or qv is None:
            continue
        opr = quant_g.producer(q.id)
        out.append(LayerError(q.id, q.name, opr.type if opr else "", q.dtype, q.scale, f.name, p.how,
                              metrics(fv, qv.reshape(fv.shape))))
    return tuple(out)


def worst_first(layers: Sequence[LayerError], by: str = "local") -> List[LayerError]:
    """Layers by SNR of ``by`` (``local`` or ``entire``), lowest first; unmeasured ones last."""
    def key(l: LayerError):
        m = l.local if by == "local" else l.entire
        snr = m.snr_db if m is not None else None
        return (snr is None, snr if snr is not None else 0.0, l.quant_id)
    return sorted(layers, key=key)


# ============================================================================ local error


def write_float_feeds(lw: Any, quant_g: GraphInfo, float_g: GraphInfo, pairing: QuantPairing, float_dump: Any,
                      quant_dump: Any, out_dir: PathLike) -> Tuple[Any, Dict[int, str]]:
    """One ``.npy`` per feed of the quantized model's layerwise model: the float run's values
    of the paired float var (real float32; the layerwise model's TypeCvt quantizes them to the
    var's scale), else the quantized run's own (dequantized). Returns the runner's inputs and,
    per fed var id, where its values came from."""

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    by_quant = pairing.by_quant()
    f_inputs = {float_g.vars[o.outputs[0]].name: float_g.vars[o.outputs[0]]
                for o in float_g.operators if o.type == "Host2DeviceCopy"}
    items, source = [], {}
    for feed in lw.feeds:
        q = quant_g.vars.get(feed.id)
        if q is None:
            raise UsageError(f"{lw.path}: fed var {feed.var_name} (id {feed.id}) is not in the quantized model's graph")
        p = by_quant.get(q.id)
        f = float_g.vars[p.float_id] if p else (f_inputs.get(q.name) if feed.model_input else None)
        arr = real_values(float_dump, f) if f is not None else None
        if arr is not None:
            source[q.id] = f"float {f.name}"
        else:
            arr = real_values(quant_dump, q)
            if arr is None:
                raise UsageError(f"no value to feed {q.name}: neither the float nor the quantized dump has it")
            source[q.id] = "quantized run (no float partner)"
        arr = np.ascontiguousarray(np.asarray(arr, np.float64).astype(feed.feed_dtype).reshape(feed.shape))
        path = out / f"{feed.name}.npy"
        np.save(path, arr)
        items.append(PreparedInput(feed.name, path, sha256_file(path), source[q.id], str(arr.dtype), tuple(arr.shape)))
    return PreparedInputs(tuple(items), out), source


def local_quant_errors(quant_model: PathLike, quant_g: GraphInfo, float_g: GraphInfo, pairing: QuantPairing,
                       float_dump: Any, quant_dump: Any, out_dir: PathLike, *, config: Any = "default",
                       lar: Any = None, timeout: Optional[float] = 600.0) -> Dict[int, Tuple[Optional[Metrics], str]]:
    """Local error of every paired quantized operator: its layerwise model (cut where the
    quantized run has values) run once under ``config`` on the float run's inputs; quantized
    var id -> (metrics against the float reference, note). ``quant_dump`` is a dump of the
    quantized model (it decides what is cut, and feeds what has no float partner).

    Raises:
        UsageError: missing files; RunError: the layerwise build or run failed.
    """

    out = Path(out_dir)
    lw = build_layerwise(quant_model, quant_dump.path, out / "layerwise", timeout=timeout)
    inputs, source = write_float_feeds(lw, quant_g, float_g, pairing, float_dump, quant_dump, out / "feeds")
    dump = run_layerwise(lw, inputs, out / "run" / "dump", config, lar=lar, timeout=timeout)
    outs = output_ids(dump)
    by_quant = pairing.by_quant()
    result: Dict[int, Tuple[Optional[Metrics], str]] = {}
    for m in lw.measured:
        p = by_quant.get(m.id)
        if p is None:
            continue
        if m.problem:
            result[m.id] = (None, f"not isolated: {m.problem}")
            continue
        if m.id not in outs:
            result[m.id] = (None, "its output is not in the layerwise run's dump")
            continue
        q = quant_g.vars[m.id]
        got = dequantize(np.asarray(dump[outs[m.id]].array()), q)
        ref = real_values(float_dump, float_g.vars[p.float_id])
        if ref is None:
            result[m.id] = (None, f"float var {p.float_name} is not in the float dump")
            continue
        fed = sorted({source[i] for i in m.inputs if i in source})
        note = "" if all(s.startswith("float ") for s in fed) else "some inputs fed from the quantized run"
        result[m.id] = (metrics(ref, got.reshape(ref.shape)), note)
    record = {"schema": "lar-prec.quant-local/1", "layerwise_model": str(lw.path), "dump": str(dump.path),
              "fed_from": {str(k): v for k, v in source.items()},
              "layers": {str(k): {"metrics": m.to_json() if m else None, "note": n} for k, (m, n) in result.items()}}
    atomic_write_text(out / "quant_local.json", json_text(record), what="quantized local error record")
    return result


def with_local(layers: Sequence[LayerError], local: Mapping[int, Tuple[Optional[Metrics], str]]) -> List[LayerError]:
    """``layers`` with their local error filled in (unmeasured ones say why)."""
    return [replace(l, local=local[l.quant_id][0], local_note=local[l.quant_id][1]) if l.quant_id in local
            else replace(l, local_note="not measured (no layerwise output: a model input or not cut)")
            for l in layers]


# ============================================================================ one-step differences


@dataclass(frozen=True)
class StepDiff:
    """Two runs of one quantized var, in raw integer steps: how many elements differ by
    exactly one step, by more, and the largest difference."""

    n_one_step: int
    n_larger: int
    max_steps: int


def step_differences(raw_a: "np.ndarray", raw_b: "np.ndarray") -> StepDiff:
    a = np.asarray(raw_a).astype(np.int64)
    b = np.asarray(raw_b).astype(np.int64)
    if a.shape != b.shape:
        raise UsageError(f"cannot compare quantized vars of shapes {a.shape} and {b.shape}")
    d = np.abs(a - b)
    return StepDiff(int(np.count_nonzero(d == 1)), int(np.count_nonzero(d > 1)), int(d.max()) if d.size else 0)
