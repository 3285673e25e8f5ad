"""Per-layer error of a quantized model against its float counterpart (numpy only).

A float model and the model MegEngine's quantization made from it (``quantize_qat``,
calibration, ``quantize``) compute the same layers; this module says how far each quantized
layer is from the float one:

* **scales** come from the quantized model's graph (:mod:`lar_prec.lar.graph_records`): dump
  titles name ``QuantizedS8``/``QuantizedS32`` but carry no scale, so a dumped tensor is
  ``raw x scale`` (``(raw - zero_point) x scale`` when asymmetric) only with the graph;
* **pairing** (:func:`pair_quant`): by the graph (:mod:`lar_prec.diagnosis.graphpair`), not by
  names: each quantized layer (``ConvBias`` with its fused bias and ReLU, ``QADD``, ``Pooling``,
  the float classifier left in the int8 model, the ``TypeCvt`` conversions at the model's input
  and output) pairs with the float layer of the same operator and position from the inputs.
  Where the float model's ``optimize_for_inference`` moved a layer's bias into a later operator
  (a conv + batch norm without activation: MobileNetV2's projections), the float var lacks that
  bias and the reference is the float var plus the quantized model's bias (its int32 rounding,
  below a thousandth of an int8 step, is the one error left out). A batch norm the float model
  keeps after its convolution (``optimize_for_inference`` leaves ``conv + 0`` as a ``Broadcast``
  when the conv's bias equals the batch norm's mean, then ``FUSE_MUL_ADD3``) is the same layer
  as the int8 ``ConvBias``, whose weights hold its scale: the pair records that scale
  (``float_scales``), so the float layer's weights are the convolution's times it; a weight
  computed from constants (a batch norm folded at run time) is a weight. Float vars inside a fused
  layer have no quantized counterpart; every unpaired var says why, and
  :meth:`QuantPairing.mismatch` says when the two models are not a float model and its
  quantization (an output of the quantized model unpaired, or most of its layers);
* **accumulated error** (:func:`layer_errors`): each pair's dequantized values against the
  float ones, cosine, relative error and SNR in dB, and MegEngine's metric;
* **local error** (:func:`local_quant_errors`): the quantized model's layerwise model
  (:mod:`lar_prec.diagnosis.local`) fed with the float reference of each layer's inputs, quantized
  to the input's own scale by the layerwise model's ``TypeCvt``: each quantized operator on the
  float model's inputs, against the float reference of its output. A deliberately mis-scaled
  layer is the worst here wherever it is (:func:`worst_first`).

Metrics that are not finite numbers (an exact match has an infinite SNR) are null in JSON with a
``snr_note`` saying why.

:func:`step_differences` counts differences of exactly one quantization step between two
runs of a quantized var apart from larger ones (optimised int8 kernels may round differently).
"""
from __future__ import annotations

import math
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple

from lar_prec._lazy import numpy as np
from lar_prec.diagnosis.graphinfo import GraphInfo, GraphVar
from lar_prec.diagnosis.graphpair import Layer, pair_graphs
from lar_prec.diagnosis.oracle import dequantize
from lar_prec.errors import UsageError
from lar_prec.compare.metrics import cosine_from_sums, max_megengine_err
from lar_prec.records import PathLike, json_number
from lar_prec.run.inputs import PreparedInput, PreparedInputs
from lar_prec.outputs import atomic_write_text, json_text, sha256_file
from lar_prec.diagnosis.local import build_layerwise, output_ids, run_layerwise

# ============================================================================ pairing


@dataclass(frozen=True)
class QuantPair:
    """Quantized var ``quant_id`` holds (a quantization of) float var ``float_id``; ``how`` its
    layers paired (:mod:`lar_prec.diagnosis.graphpair`). ``bias_id``: a quantized model's bias
    var whose values complete the float var (the float model's ``optimize_for_inference`` moved
    that layer's bias into a later operator, so no float var holds the layer's own output).
    ``float_anchor``: the var of the float layer's main operator (its convolution, say).
    ``float_scales``: the constants (var id, exponent 1 to multiply, -1 to divide) by which the
    float layer scales its anchor's output on the way to ``float_id`` (a BatchNorm left after
    its convolution): the layer's weights are the anchor's times these, per output channel;
    ``scales_problem`` says why they cannot be folded so (a scale after a nonlinearity)."""

    quant_id: int
    quant_name: str
    float_id: int
    float_name: str
    how: str
    bias_id: Optional[int] = None
    float_anchor: Optional[int] = None
    float_scales: Tuple[Tuple[int, int], ...] = ()
    scales_problem: str = ""

    @property
    def reference(self) -> str:
        """What the quantized var is compared with, in words."""
        return self.float_name + (" + the quantized model's bias (the float model applies it later)"
                                  if self.bias_id is not None else "")


@dataclass(frozen=True)
class QuantUnpaired:
    """A computed var of one side (``float`` | ``quant``) without a partner, and why;
    ``fused``: an intermediate value the other side computes inside one operator."""

    side: str
    id: int
    name: str
    why: str
    fused: bool = False

    def to_json(self) -> Dict[str, Any]:
        return {"side": self.side, "id": self.id, "name": self.name, "why": self.why, "fused": self.fused}


@dataclass(frozen=True)
class QuantPairing:
    """The pairs, what did not pair, how many of the quantized model's layers paired, and each
    output of the quantized model with its float partner (None: not paired, ``outputs_why``)."""

    pairs: Tuple[QuantPair, ...]
    unpaired: Tuple[QuantUnpaired, ...]
    layers_total: int
    layers_paired: int
    outputs: Tuple[Tuple[int, Optional[int]], ...] = ()
    outputs_why: Tuple[str, ...] = ()

    def by_quant(self) -> Dict[int, QuantPair]:
        return {p.quant_id: p for p in self.pairs}

    def mismatch(self, float_model: Any, quant_model: Any) -> Optional[str]:
        """Why these two models cannot be compared layer by layer (None when they can): an
        output of the quantized model without a float partner, or fewer than half its layers
        paired."""
        lost = [why for (_q, f), why in zip(self.outputs, self.outputs_why) if f is None]
        if lost:
            return (f"{quant_model} is not the quantized model of {float_model}: {lost[0]}"
                    f"{f' (and {len(lost) - 1} more output(s))' if len(lost) > 1 else ''}; "
                    f"{self.layers_paired} of its {self.layers_total} layers pair")
        if 2 * self.layers_paired < self.layers_total:
            first = next((u for u in self.unpaired if u.side == "quant" and not u.fused), None)
            return (f"{quant_model} is not the quantized model of {float_model}: only {self.layers_paired} of its "
                    f"{self.layers_total} layers pair" + (f" (first: {first.name}: {first.why})" if first else ""))
        return None


def _bias_of(quant_g: GraphInfo, layer: Layer, var_id: int, static: frozenset) -> Optional[int]:
    """The constant var that applied the bias on the way from ``layer``'s anchor to ``var_id``:
    a ConvBias's bias input or the constant of a bias add."""
    for v in layer.vars[:layer.vars.index(var_id) + 1]:
        o = quant_g.producer(v)
        if o is None or "bias" not in layer.effects[v]:
            continue
        if o.type == "ConvBiasForward" and len(o.inputs) > 2:
            return o.inputs[2]
        consts = [i for i in o.inputs if i in static]
        if o.type == "Elemwise" and len(consts) == 1:
            return consts[0]
    return None


#: float elementwise modes that are affine in their one computed input (a scale or a shift)
_AFFINE = frozenset({"ADD", "SUB", "MUL", "TRUE_DIV", "FUSE_MUL_ADD3"})
#: operators that pass their input's values on unchanged (as glue: graphpair's TypeCvt, Broadcast, Reshape)
_PASS = frozenset({"TypeCvt", "Broadcast", "Reshape"})


def _scales_of(g: GraphInfo, layer: Layer, var_id: int, static: frozenset) -> Tuple[Tuple[Tuple[int, int], ...], str]:
    """The constants that scale ``layer``'s anchor output on the way to ``var_id`` (var id,
    exponent), and why they cannot be folded into the anchor's weights ("" when they can)."""
    path = []
    v = var_id
    while v != layer.anchor:
        o = g.producer(v)
        data = [i for i in o.inputs if i not in static] if o is not None else []
        if o is None or len(set(data)) != 1:
            return (), f"{g.vars[v].name} is not computed from the layer's anchor alone"
        path.append((o, data[0]))
        v = data[0]
    nonlinear = next((e for e in layer.effects[layer.anchor] if e != "bias"), "")
    scales: List[Tuple[int, int]] = []
    for o, x in reversed(path):
        if o.type in _PASS:
            continue
        mode = str(o.param("mode", "") or "") if o.type == "Elemwise" else ""
        k = next((i for i in o.inputs[:2] if i != x), -1)
        if mode == "MUL" or (mode == "FUSE_MUL_ADD3" and x in o.inputs[:2]):
            exponent = 1
        elif mode == "TRUE_DIV" and o.inputs[0] == x:
            exponent = -1
        elif mode in ("ADD", "FUSE_MUL_ADD3") or (mode == "SUB" and o.inputs[0] == x):
            continue  # a shift: the int8 model's bias holds it
        elif mode not in _AFFINE:
            nonlinear = nonlinear or (mode.lower() or o.type)
            continue
        else:
            k = -1
        if k not in static:  # x * x, k - x, k / x: not a scale by a constant
            return (), f"{g.vars[o.outputs[0]].name} ({mode}) is not a scale or a shift of the layer's value"
        if nonlinear:
            return (), f"{g.vars[o.outputs[0]].name} scales the layer's value after its {nonlinear}"
        scales.append((k, exponent))
    return tuple(scales), ""


def pair_quant(float_g: GraphInfo, quant_g: GraphInfo) -> QuantPairing:
    """Pair the quantized model's computed vars with the float model's by the graph
    (:func:`~lar_prec.diagnosis.graphpair.pair_graphs`)."""
    gp = pair_graphs(float_g, quant_g, "float", "quantized")
    pairs: Dict[int, QuantPair] = {}
    unpaired: List[QuantUnpaired] = []
    for p in gp.pairs:
        q, f = quant_g.vars[p.b_id], float_g.vars[p.a_id]
        opr = quant_g.producer(q.id)
        if opr is None or opr.is_source:
            continue  # a model input: computed by neither model
        if f.shape != q.shape:
            unpaired.append(QuantUnpaired("quant", q.id, q.name, f"its float partner {f.name} has shape "
                                          f"{list(f.shape or ())}, this var {list(q.shape or ())}"))
            continue
        bias = None
        if "bias" in p.b_effects and "bias" not in p.a_effects:
            bias = _bias_of(quant_g, gp.b.layer_of(q.id), q.id, gp.b.static)
            if bias is None:
                unpaired.append(QuantUnpaired("quant", q.id, q.name, f"its float partner {f.name} lacks the layer's "
                                              "bias (the float model applies it later) and no quantized bias "
                                              "constant was found to add"))
                continue
        f_layer = gp.a.layer_of(f.id)
        scales, problem = _scales_of(float_g, f_layer, f.id, gp.a.static) if f_layer is not None else ((), "")
        pairs[q.id] = QuantPair(q.id, q.name, f.id, f.name, p.how, bias, gp.a.by_var.get(f.id), scales, problem)
    for u in gp.unpaired:
        g = float_g if u.side == "a" else quant_g
        unpaired.append(QuantUnpaired("float" if u.side == "a" else "quant", u.id, g.vars[u.id].name, u.why,
                                      u.intermediate))
    q_layers = [l for l in gp.b.layers.values() if l.kind != "input"]
    paired_layers = {b for _a, b in gp.layers}
    outputs, whys = [], []
    for o in quant_g.outputs:
        p = pairs.get(o)
        if p is not None and p.float_id in float_g.outputs:
            outputs.append((o, p.float_id))
            whys.append("")
            continue
        outputs.append((o, None))
        why = next((u.why for u in unpaired if u.side == "quant" and u.id == o), "")
        whys.append(f"its output {quant_g.vars[o].name} " + (
            f"pairs with {p.float_name}, which is not an output of the float model" if p is not None
            else f"has no float partner ({why})"))
    return QuantPairing(tuple(sorted(pairs.values(), key=lambda p: quant_g.producer(p.quant_id).index)),
                        tuple(unpaired),
                        len(q_layers), sum(1 for l in q_layers if l.anchor in paired_layers), tuple(outputs),
                        tuple(whys))


# ============================================================================ metrics


@dataclass(frozen=True)
class Metrics:
    """A quantized layer's dequantized values ``x`` against the float ones ``f``: cosine,
    relative error ``|x - f| / |f|`` (2-norms), SNR ``10 log10(|f|^2 / |x - f|^2)`` dB, MegEngine's
    ``max_err``. ``snr_note`` says why ``snr_db`` is not a finite number: ``exact`` (equal
    values: infinite), ``zero signal`` (``f`` is all zeros), ``non-finite values``."""

    cosine: Optional[float]
    rel_err: Optional[float]
    snr_db: Optional[float]
    max_err: Optional[float]
    snr_note: Optional[str] = None

    def to_json(self) -> Dict[str, Any]:
        """Strict JSON: a number that is not finite is null, ``snr_note`` says why."""
        d: Dict[str, Any] = {k: json_number(getattr(self, k)) for k in ("cosine", "rel_err", "snr_db", "max_err")}
        d["snr_note"] = self.snr_note
        return d


def metrics(reference: "np.ndarray", values: "np.ndarray") -> Metrics:
    f = np.asarray(reference, np.float64).ravel()
    x = np.asarray(values, np.float64).ravel()
    if f.shape != x.shape:
        raise UsageError(f"cannot compare a var of {f.size} values with one of {x.size}")
    bad = int(np.count_nonzero(~np.isfinite(f)) + np.count_nonzero(~np.isfinite(x)))
    if bad:
        return Metrics(None, None, None, max_megengine_err(f.astype(np.float32), x.astype(np.float32)),
                       f"non-finite values ({bad})")
    ff, xx, fx = float(np.einsum("i,i->", f, f)), float(np.einsum("i,i->", x, x)), float(np.einsum("i,i->", f, x))
    d = x - f
    dd = float(np.einsum("i,i->", d, d))
    note = "exact" if dd == 0 else "zero signal" if ff == 0 else None
    rel = math.sqrt(dd / ff) if ff > 0 else None
    snr = (math.inf if dd == 0 else 10.0 * math.log10(ff / dd)) if ff > 0 else None
    return Metrics(cosine_from_sums(ff, fx, xx), rel, snr, max_megengine_err(f.astype(np.float32), x.astype(np.float32)),
                   note)


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


def reference_values(p: QuantPair, float_g: GraphInfo, quant_g: GraphInfo, float_dump: Any,
                     quant_dump: Any) -> Optional["np.ndarray"]:
    """What quantized var ``p.quant_id`` should hold, from the float run: its partner's values,
    plus the layer's (dequantized) bias where the float model applies that bias later; None
    when a dump lacks what it takes."""
    f = real_values(float_dump, float_g.vars[p.float_id])
    if f is None or p.bias_id is None:
        return f
    b = real_values(quant_dump, quant_g.vars[p.bias_id])
    if b is None:
        return None
    if b.ndim > f.ndim or any(n not in (1, m) for n, m in zip(b.shape[::-1], f.shape[::-1])):
        raise UsageError(f"bias {quant_g.vars[p.bias_id].name} of shape {list(b.shape)} does not broadcast to "
                         f"{p.float_name} {list(f.shape)}")
    return f + b


# ============================================================================ per layer


@dataclass(frozen=True)
class LayerError:
    """One quantized var against its float reference: ``entire`` (accumulated, the two runs'
    dumps) and ``local`` (the quantized operator on the float reference's inputs; None with
    ``local_note`` when not measured). ``output``: an output of the model."""

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
    reference: str = ""
    output: bool = False

    @property
    def int8(self) -> bool:
        """Computed by a quantized operator (not a conversion, not a float layer left in the model)."""
        return self.dtype.startswith("Quantized") and self.opr_type != "TypeCvt"

    def to_json(self) -> Dict[str, Any]:
        """The layer in ``quant.json`` (``layers[]``; ``docs/mixed-precision.md``)."""
        return {"id": self.quant_id, "name": self.quant_name, "opr_type": self.opr_type, "dtype": self.dtype,
                "scale": self.scale, "float_name": self.float_name, "reference": self.reference, "paired_by": self.how,
                "output": self.output, "int8": self.int8, "accumulated": self.entire.to_json(),
                "local": self.local.to_json() if self.local else None, "local_note": self.local_note}


def layer_errors(float_g: GraphInfo, quant_g: GraphInfo, float_dump: Any, quant_dump: Any,
                 pairing: QuantPairing) -> Tuple[LayerError, ...]:
    """Accumulated error of every pair present in both dumps, in the quantized execution order."""
    out: List[LayerError] = []
    outputs = {q for q, f in pairing.outputs if f is not None}
    for p in pairing.pairs:
        q = quant_g.vars[p.quant_id]
        fv = reference_values(p, float_g, quant_g, float_dump, quant_dump)
        qv = real_values(quant_dump, q)
        if fv is None or qv is None:
            continue
        opr = quant_g.producer(q.id)
        out.append(LayerError(q.id, q.name, opr.type if opr else "", q.dtype, q.scale, p.float_name, p.how,
                              metrics(fv, qv.reshape(fv.shape)), reference=p.reference, output=q.id in outputs))
    return tuple(out)


def not_in_dumps(pairing: QuantPairing, layers: Sequence[LayerError], float_g: GraphInfo, quant_g: GraphInfo,
                 float_dump: Any, quant_dump: Any) -> List[Tuple[str, str]]:
    """(quantized var name, why) of every pair :func:`layer_errors` could not measure: a var
    one of the runs did not dump (a load_and_run that dumps no constants has no bias to add)."""
    done = {l.quant_id for l in layers}
    out = []
    for p in pairing.pairs:
        if p.quant_id in done:
            continue
        need = [(float_dump, float_g.vars[p.float_id], "float"), (quant_dump, quant_g.vars[p.quant_id], "quantized")]
        if p.bias_id is not None:
            need.append((quant_dump, quant_g.vars[p.bias_id], "quantized"))
        lost = [f"{v.name} is not in the {side} run's dump" for d, v, side in need if _dump_of(d, v) is None]
        out.append((p.quant_name, "; ".join(lost) or "not measured"))
    return out


def worst_first(layers: Sequence[LayerError], by: str = "local") -> List[LayerError]:
    """Layers by SNR of ``by`` (``local`` or ``entire``), lowest first; exact ones (infinite SNR)
    after every finite one, unmeasured ones last."""
    def key(l: LayerError):
        m = l.local if by == "local" else l.entire
        snr = m.snr_db if m is not None else None
        return (snr is None, snr if snr is not None else 0.0, l.quant_id)
    return sorted(layers, key=key)


# ============================================================================ local error


def write_float_feeds(lw: Any, quant_g: GraphInfo, float_g: GraphInfo, pairing: QuantPairing, float_dump: Any,
                      quant_dump: Any, out_dir: PathLike) -> Tuple[Any, Dict[int, str]]:
    """One ``.npy`` per feed of the quantized model's layerwise model: the float reference of
    the var (real float32; the layerwise model's TypeCvt quantizes it with the var's own scale),
    else the quantized run's own values (dequantized). Returns the runner's inputs and, per fed
    var id, where its values came from."""

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
        if p is not None:
            arr, src = reference_values(p, float_g, quant_g, float_dump, quant_dump), f"float {p.reference}"
        elif feed.model_input and q.name in f_inputs:
            arr, src = real_values(float_dump, f_inputs[q.name]), f"float {q.name}"
        else:
            arr = None
        if arr is None:
            arr, src = real_values(quant_dump, q), "quantized run (no float partner)"
            if arr is None:
                raise UsageError(f"no value to feed {q.name}: neither the float nor the quantized dump has it")
        source[q.id] = src
        arr = np.ascontiguousarray(np.asarray(arr, np.float64).astype(feed.feed_dtype).reshape(feed.shape))
        path = out / f"{feed.name}.npy"
        np.save(path, arr)
        items.append(PreparedInput(feed.name, path, sha256_file(path), src, str(arr.dtype), tuple(arr.shape)))
    return PreparedInputs(tuple(items), out), source


def local_quant_errors(quant_model: PathLike, quant_g: GraphInfo, float_g: GraphInfo, pairing: QuantPairing,
                       float_dump: Any, quant_dump: Any, out_dir: PathLike, *, config: Any = "default",
                       lar: Any = None, timeout: Optional[float] = 600.0) -> Dict[int, Tuple[Optional[Metrics], str]]:
    """Local error of every paired quantized operator: its layerwise model (cut where the
    quantized run has values) run once under ``config`` on the float reference of each input
    (quantized with that input's own scale); quantized var id -> (metrics against the float
    reference of its output, note). ``quant_dump`` is a dump of the quantized model (it decides
    what is cut, and feeds what has no float partner).

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
        ref = reference_values(p, float_g, quant_g, float_dump, quant_dump)
        if ref is None:
            result[m.id] = (None, f"{p.reference} is not in the dumps")
            continue
        got = dequantize(np.asarray(dump[outs[m.id]].array()), quant_g.vars[m.id])
        from_quant = [quant_g.vars[i].name for i in m.inputs if source.get(i, "").startswith("quantized")]
        note = f"input(s) {', '.join(from_quant)} fed from the quantized run (no float partner)" if from_quant else ""
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
