"""Pair the vars of two graphs of one network by structure, not by name (standard library only).

Two models of the same network (a float model and the int8 model MegEngine's quantization made
from it, or one model before and after a graph rewrite) compute the same *layers*, but their
operators and var names differ: quantization fuses conv, bias and ReLU into one ``ConvBias``,
``optimize_for_inference`` gives a fused conv + batch norm an automatic name and moves its bias
into the next operator, a residual ``ADD`` becomes ``QADD``. This module pairs them from the
graph alone:

* **layers** (:func:`layers_of`): every operator that is not *glue* starts a layer (its
  *anchor*: a convolution, a matrix product, a pooling, an elementwise operator of two computed
  inputs such as a residual add, a reshape, ...); glue (``TypeCvt``, a ``Broadcast`` or
  ``Reshape`` to its input's own shape, and an elementwise operator whose other inputs are
  constants: bias add, a BatchNorm's scale and shift, ReLU, requantization) extends the layer of
  its input. Constants and shape chains (``GetVarShape`` and what is computed only from shapes
  and constants: a weight that is a ``MUL`` of constants, a BatchNorm folded at run time) belong
  to no layer, so a convolution reads its weight by shape whether or not it was folded;
* **structural key**: a layer's anchor kind (``ConvolutionForward`` and ``ConvBiasForward`` are
  both ``conv``; ``QADD``, ``FUSE_ADD_RELU`` and ``ADD`` of two computed inputs are all an
  ``add``), its geometry (strides, paddings, filter shape, pooling window), its output shape and
  the keys of the layers it reads (in order; sorted for commutative operators), from the model
  inputs (by name) down: the operator and its position from the inputs;
* **layers pair** when their keys are equal; several layers of one key (three projections of
  the same input) pair by module name where both sides have one, else in execution order;
* **vars inside paired layers** pair from the end of the layer: a var pairs with the var of the
  other layer that has as many *effects* (bias add, scale, nonlinearity; a ``TypeCvt`` has
  none) still to come before the layer ends. A ``ConvBias`` with ReLU pairs with the ReLU after
  the float convolution, the int8 ``MatrixMul`` with the float ``MatrixMul`` and its int32
  bias add with the float bias add. Each pair carries the effects from the anchor to each var
  (``a_effects``/``b_effects``): a caller sees where one side applied a bias the other moved
  elsewhere (:mod:`lar_prec.diagnosis.quantinfo` adds it back).

Every var left unpaired gets a true reason: the first input that did not pair, what the other
model computes from the same inputs instead, or the paired layer it is an intermediate of.
The keys depend only on the graph record (:mod:`lar_prec.diagnosis.graphinfo`), so they can
later serve as (part of) a stable operator key across builds.
"""
from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Dict, List, Mapping, Optional, Sequence, Tuple

from lar_prec.diagnosis.graphinfo import GraphInfo, GraphOpr

#: a var named ``<module path>.<Operator>[<k>]``: the module path is every dotted part but the last
_MODULE_VAR = re.compile(r"\A([A-Za-z_]\w*(?:\.\w+)*)\.[A-Za-z_]\w*(?:\[\d+\])?\Z")
#: the geometry that identifies a convolution or pooling (the same keys on float and int8 operators)
_GEOMETRY = ("sparse", "mode", "stride_h", "stride_w", "pad_h", "pad_w", "dilate_h", "dilate_w",
             "window_h", "window_w", "transposeA", "transposeB")
#: anchor kinds of several operator types
_KINDS = {"ConvolutionForward": "conv", "ConvBiasForward": "conv", "MatrixMul": "matmul",
          "BatchedMatrixMul": "batched_matmul", "PoolingForward": "pool"}
#: parameters that say how, not what, an operator computes (left out of the key)
_HOW = frozenset({"compute_mode", "format", "strategy", "workspace_limit", "dtype", "nonlineMode"})
#: operators that change nothing when their output has their input's shape (``optimize_for_inference``
#: leaves ``x + 0`` as a Broadcast of ``x`` to the sum's shape: a conv's zero bias less a BatchNorm's zero mean)
_SAME_SHAPE = frozenset({"Broadcast", "Reshape"})
#: elementwise modes whose operands commute
_COMMUTATIVE = frozenset({"ADD", "MUL", "MAX", "MIN"})
#: elementwise modes that are one effect on their computed input (the rest: one effect, lower-cased)
_EFFECTS = {"ADD": ("bias",), "SUB": ("bias",), "MUL": ("scale",), "TRUE_DIV": ("scale",),
            "FUSE_MUL_ADD3": ("scale", "bias"), "FUSE_ADD_RELU": ("bias", "relu"),
            "FUSE_ADD_SIGMOID": ("bias", "sigmoid"), "FUSE_ADD_TANH": ("bias", "tanh"),
            "FUSE_ADD_H_SWISH": ("bias", "h_swish")}


def module_of(name: str) -> Optional[str]:
    """``blocks.0`` for ``blocks.0.RELU[1]``, ``c1`` for ``c1.ConvBias`` or ``c1.weight``; None
    for names that are not ``module.Operator`` (auto names such as ``conv(data,w)[12]``)."""
    m = _MODULE_VAR.match(name)
    return m.group(1) if m else None


# ============================================================================ layers


@dataclass(frozen=True)
class Layer:
    """An anchor operator's output and the glue after it. ``vars``: anchor output first, then
    the glue's outputs in execution order; ``effects``: per var, the effects from the anchor's
    inputs to it; ``remaining``: per var, the effects still to come before the layer ends;
    ``inputs``: the var ids of the layers the anchor reads."""

    anchor: int
    kind: str
    key: int
    order: int
    vars: Tuple[int, ...]
    effects: Mapping[int, Tuple[str, ...]]
    remaining: Mapping[int, int]
    inputs: Tuple[int, ...]
    module: Optional[str]

    @property
    def exit(self) -> int:
        """The layer's last var (what the next layer reads)."""
        return self.vars[-1]


@dataclass(frozen=True)
class GraphLayers:
    """One graph cut into layers: ``by_var`` (a computed var or model input -> its layer's
    anchor), ``layers`` (anchor -> layer), ``static`` (constants and shape chains)."""

    graph: GraphInfo
    layers: Mapping[int, Layer]
    by_var: Mapping[int, int]
    static: frozenset

    def layer_of(self, var_id: int) -> Optional[Layer]:
        a = self.by_var.get(var_id)
        return self.layers[a] if a is not None else None

    def readers(self) -> Dict[int, List[int]]:
        """Layer anchor -> the anchors of the layers that read it (built once)."""
        cache = self.__dict__.get("_readers")
        if cache is None:
            cache = {}
            for lay in self.layers.values():
                for i in lay.inputs:
                    cache.setdefault(i, []).append(lay.anchor)
            object.__setattr__(self, "_readers", cache)
        return cache


def _static_vars(g: GraphInfo) -> set:
    """Constants and what is computed from shapes and constants alone."""
    made = {v for o in g.operators for v in o.outputs}
    static = {v for o in g.operators for v in o.inputs if v not in made}  # constants the record leaves out
    for o in g.operators:
        if o.is_source:
            if o.type != "Host2DeviceCopy":
                static.update(o.outputs)
        elif o.type == "GetVarShape" or all(i in static for i in o.inputs):
            static.update(o.outputs)
    return static


def _base_mode(o: GraphOpr) -> str:
    """An elementwise operator's mode, the int8 ``Q`` prefix dropped (``QADD`` -> ``ADD``)."""
    mode = str(o.param("mode", "") or "")
    return mode[1:] if o.type == "ElemwiseMultiType" and mode.startswith("Q") else mode


def _glue_effects(g: GraphInfo, o: GraphOpr, data: Sequence[int]) -> Optional[Tuple[str, ...]]:
    """The effects of ``o`` when it is glue (one computed input), else None."""
    if len(set(data)) != 1 or len(o.outputs) != 1:
        return None
    if o.type == "TypeCvt":
        return ()
    if o.type in _SAME_SHAPE and g.vars[o.outputs[0]].shape is not None and \
            g.vars[o.outputs[0]].shape == g.vars[data[0]].shape:
        return ()  # to the input's own shape: the values pass unchanged
    if o.type in ("Elemwise", "ElemwiseMultiType"):
        mode = _base_mode(o)
        return _EFFECTS.get(mode, (mode.lower(),))
    return None


def _anchor_effects(o: GraphOpr, data: Sequence[int]) -> Tuple[str, ...]:
    """What an anchor applies after its main computation: a ConvBias's bias and nonlinearity,
    the ReLU of a fused add (``FUSE_ADD_RELU``, ``QFUSE_ADD_RELU``)."""
    out: List[str] = []
    if o.type == "ConvBiasForward":
        if len(o.inputs) > 2:
            out.append("bias")
        nl = str(o.param("nonlineMode", "IDENTITY") or "IDENTITY")
        if nl != "IDENTITY":
            out.append(nl.lower())
    elif o.type in ("Elemwise", "ElemwiseMultiType") and _base_mode(o).startswith("FUSE_ADD_"):
        out.append(_base_mode(o)[len("FUSE_ADD_"):].lower())
    return tuple(out)


def _anchor_kind(g: GraphInfo, o: GraphOpr, static: set) -> Tuple[str, Tuple]:
    """The kind of an anchor and the parameters that identify what it computes."""
    if o.type in _KINDS:
        geo = tuple((k, o.param(k)) for k in _GEOMETRY if o.param(k) is not None)
        consts = tuple(g.vars[i].shape for i in o.inputs[1:2] if i in static)  # the filter / weight
        return _KINDS[o.type], geo + consts
    if o.type in ("Elemwise", "ElemwiseMultiType"):
        base = _base_mode(o)
        return ("add" if base.startswith("FUSE_ADD_") else base.lower()), ()
    params = o.params if isinstance(o.params, dict) else {"params": o.params}
    kept = {k: v for k, v in params.items() if k not in _HOW}
    return o.type, (json.dumps(kept, sort_keys=True, default=str, allow_nan=False),)


def layers_of(g: GraphInfo, intern: Dict[tuple, int]) -> GraphLayers:
    """Cut ``g`` into layers; ``intern`` numbers the structural keys (share it between the two
    graphs being paired, so equal structures get equal numbers)."""
    static = _static_vars(g)
    by_var: Dict[int, int] = {}
    layers: Dict[int, dict] = {}
    for o in g.operators:
        if o.type == "Host2DeviceCopy":
            v = o.outputs[0]
            key = intern.setdefault(("input", g.vars[v].name, g.vars[v].shape), len(intern))
            layers[v] = {"anchor": v, "kind": "input", "key": key, "order": o.index, "vars": [v],
                         "effects": {v: ()}, "inputs": ()}
            by_var[v] = v
            continue
        if o.is_source or all(v in static for v in o.outputs):
            continue
        data = [i for i in o.inputs if i not in static and i in by_var]
        glue = _glue_effects(g, o, data)
        if glue is not None:
            lay = layers[by_var[data[0]]]
            v = o.outputs[0]
            lay["vars"].append(v)
            lay["effects"][v] = lay["effects"][data[0]] + glue
            by_var[v] = lay["anchor"]
            continue
        kind, params = _anchor_kind(g, o, static)
        ins = [layers[by_var[i]]["key"] for i in data]
        if kind in ("add", "mul", "max", "min"):
            ins.sort()
        own = _anchor_effects(o, data)
        for k, v in enumerate(o.outputs):
            if v in static:
                continue
            key = intern.setdefault((kind, params, k, g.vars[v].shape, tuple(ins)), len(intern))
            layers[v] = {"anchor": v, "kind": kind, "key": key, "order": o.index, "vars": [v],
                         "effects": {v: own}, "inputs": tuple(by_var[i] for i in data)}
            by_var[v] = v
    out = {a: _finish(g, lay, by_var) for a, lay in layers.items()}
    return GraphLayers(g, out, by_var, frozenset(static))


def _finish(g: GraphInfo, lay: dict, by_var: Mapping[int, int]) -> Layer:
    """A layer's remaining effects per var (along its longest continuation) and its module."""
    vars_ = lay["vars"]
    total = {v: len(lay["effects"][v]) for v in vars_}
    end = max(total.values())
    remaining = {v: end - total[v] for v in vars_}
    names = [g.vars[v].name for v in vars_]
    o = g.producer(vars_[0])
    if o is not None:
        names += [g.vars[i].name for i in o.inputs[1:2]]  # a weight keeps its module's name
    module = next((m for m in map(module_of, names) if m), None)
    return Layer(lay["anchor"], lay["kind"], lay["key"], lay["order"], tuple(vars_), dict(lay["effects"]),
                 remaining, lay["inputs"], module)


# ============================================================================ pairing


@dataclass(frozen=True)
class VarPair:
    """Var ``a_id`` of graph A goes with ``b_id`` of graph B. ``how``: how their layers paired
    (``structure``, ``structure and module name``, ``structure and position``); ``kind``: the
    layer's anchor kind; ``a_effects``/``b_effects``: the effects from the anchor to each var."""

    a_id: int
    b_id: int
    how: str
    kind: str
    a_effects: Tuple[str, ...]
    b_effects: Tuple[str, ...]


@dataclass(frozen=True)
class Unpaired:
    """A computed var of graph ``side`` (``a`` | ``b``) without a partner, and why."""

    side: str
    id: int
    why: str
    intermediate: bool = False


@dataclass(frozen=True)
class GraphPairing:
    """Every computed var of A and B either in ``pairs`` or in ``unpaired`` (with its reason);
    ``layers``: (A's layer anchor, B's) of every pair of layers; ``a``/``b``: the layers."""

    pairs: Tuple[VarPair, ...]
    unpaired: Tuple[Unpaired, ...]
    layers: Tuple[Tuple[int, int], ...]
    a: GraphLayers
    b: GraphLayers

    def by_b(self) -> Dict[int, VarPair]:
        return {p.b_id: p for p in self.pairs}

    def by_a(self) -> Dict[int, List[VarPair]]:
        out: Dict[int, List[VarPair]] = {}
        for p in self.pairs:
            out.setdefault(p.a_id, []).append(p)
        return out


def _match_layers(a: GraphLayers, b: GraphLayers) -> Dict[int, Tuple[int, str]]:
    """B's anchor -> (A's anchor, how), for layers of equal keys."""
    groups: Dict[int, Tuple[List[Layer], List[Layer]]] = {}
    for side, gl in ((0, a), (1, b)):
        for lay in sorted(gl.layers.values(), key=lambda l: l.order):
            groups.setdefault(lay.key, ([], []))[side].append(lay)
    out: Dict[int, Tuple[int, str]] = {}
    for la, lb in groups.values():
        if len(la) == 1 and len(lb) == 1:
            out[lb[0].anchor] = (la[0].anchor, "structure")
            continue
        free_a = list(la)
        for y in lb:  # module names first, where both sides have one
            x = next((x for x in free_a if x.module and x.module == y.module), None)
            if x is not None:
                out[y.anchor] = (x.anchor, "structure and module name")
                free_a.remove(x)
        for y, x in zip([y for y in lb if y.anchor not in out], free_a):
            out[y.anchor] = (x.anchor, f"structure and position (one of {len(lb)} alike)")
    return out


def pair_graphs(a_graph: GraphInfo, b_graph: GraphInfo, a_name: str = "A", b_name: str = "B") -> GraphPairing:
    """Pair the computed vars (and model inputs) of two graphs of one network: see the module
    doc. ``a_name``/``b_name`` name the models in the reasons (``float``, ``quantized``)."""
    intern: Dict[tuple, int] = {}
    a, b = layers_of(a_graph, intern), layers_of(b_graph, intern)
    matched = _match_layers(a, b)
    pairs: List[VarPair] = []
    layer_pairs: List[Tuple[int, int]] = []
    paired_a, paired_b = set(), set()
    for yb, (xa, how) in sorted(matched.items(), key=lambda kv: b.layers[kv[0]].order):
        x, y = a.layers[xa], b.layers[yb]
        layer_pairs.append((xa, yb))
        for v in y.vars:
            r = y.remaining[v]
            same = [u for u in x.vars if x.remaining[u] == r]
            if same:
                u = same[-1]
                pairs.append(VarPair(u, v, how, y.kind, x.effects[u], y.effects[v]))
                paired_a.add(u)
                paired_b.add(v)
    unpaired = _reasons(a, b, a_name, b_name, matched, paired_a, paired_b)
    return GraphPairing(tuple(pairs), tuple(unpaired), tuple(layer_pairs), a, b)


# ============================================================================ reasons


def _describe(gl: GraphLayers, lay: Layer) -> str:
    g = gl.graph
    return f"{lay.kind} {g.vars[lay.exit].name} {list(g.vars[lay.anchor].shape or ())}"


def _reasons(a: GraphLayers, b: GraphLayers, a_name: str, b_name: str, matched: Mapping[int, Tuple[int, str]],
             paired_a: set, paired_b: set) -> List[Unpaired]:
    """Why each computed var of either side stayed unpaired (in execution order, B first)."""
    partner_of = {yb: xa for yb, (xa, _h) in matched.items()}
    partner_of_a = {xa: yb for yb, xa in partner_of.items()}
    out: List[Unpaired] = []
    for side, gl, other, name, oname, partners, paired in (("b", b, a, b_name, a_name, partner_of, paired_b),
                                                           ("a", a, b, a_name, b_name, partner_of_a, paired_a)):
        roots: Dict[int, str] = {}  # unpaired layer -> the first unpaired layer upstream and its reason
        for lay in sorted(gl.layers.values(), key=lambda l: l.order):
            for v in lay.vars:
                if v in paired:
                    continue
                if lay.anchor in partners:
                    out.append(Unpaired(side, v, _inside_reason(gl, other, lay, v, partners[lay.anchor], oname), True))
                else:
                    out.append(Unpaired(side, v, _layer_reason(gl, other, lay, partners, oname, roots)))
    return out


def _inside_reason(gl: GraphLayers, other: GraphLayers, lay: Layer, v: int, partner: int, oname: str) -> str:
    """A var of a paired layer that has no var at the same place in the partner layer."""
    og = other.graph
    olay = other.layers[partner]
    to_come = lay.remaining[v]
    after = "+".join(lay.effects[lay.exit][len(lay.effects[lay.exit]) - to_come:]) if to_come else ""
    o = og.producer(olay.anchor)
    effects = "+".join(olay.effects[olay.exit])
    return (f"an intermediate value{' (before ' + after + ')' if after else ''}: the {oname} model's "
            f"{o.type if o else olay.kind} {og.vars[olay.anchor].name} computes this layer"
            f"{' with its ' + effects if effects else ''} without holding it (fused away)")


def _layer_reason(gl: GraphLayers, other: GraphLayers, lay: Layer, partners: Mapping[int, int], oname: str,
                  roots: Dict[int, str]) -> str:
    """Why a whole layer has no partner: an input that did not pair (named with the first layer
    upstream that did not, and its reason), or what the other model computes from the same
    inputs instead. ``roots`` collects the first kind, in execution order."""
    g, og = gl.graph, other.graph
    if lay.anchor in roots:
        return roots[lay.anchor]
    name = g.vars[lay.anchor].name
    lost = [i for i in lay.inputs if i not in partners]
    if lay.kind == "input":
        same = [v for v in other.layers.values() if v.kind == "input" and og.vars[v.anchor].name == name]
        why = (f"model input {name} has shape {list(g.vars[lay.anchor].shape or ())} here and "
               f"{list(og.vars[same[0].anchor].shape or ())} in the {oname} model" if same
               else f"model input {name}: the {oname} model has no input of that name")
    elif lost:
        first = roots[lost[0]]
        roots[lay.anchor] = first if first.startswith("its input ") else (
            f"its input {g.vars[gl.layers[lost[0]].exit].name} did not pair: {first}")
        return roots[lay.anchor]
    else:
        want = {partners[i] for i in lay.inputs}
        first = other.readers().get(next(iter(want)), ()) if want else ()
        readers = sorted((other.layers[r] for r in first if want <= set(other.layers[r].inputs)), key=lambda l: l.order)
        if not readers:
            why = (f"the {oname} model reads its inputs ({', '.join(og.vars[other.layers[i].exit].name for i in want)}) "
                   f"in no layer that reads them all together")
        else:
            why = (f"no {oname} layer computes a {lay.kind} of shape {list(g.vars[lay.anchor].shape or ())} from the "
                   f"same inputs; it computes {'; '.join(_describe(other, ol) for ol in readers[:3])}")
    roots[lay.anchor] = f"{name}: {why}"
    return why
