"""Build a layerwise model: every operator of a model fed with inputs of its own.

``python -m lar_prec.lar.layerwise_build MODEL REF_DUMP OUT_DIR [--only VAR_ID]`` loads MODEL's
graph with MegEngine, replaces every computed var that feeds another operator (and has a
reference value in REF_DUMP) by a new input of the same shape and dtype, keeps every
operator's output as a model output, and writes ``OUT_DIR/layerwise.mge`` plus
``OUT_DIR/layerwise.json`` (what was fed, what is measured, what could not be isolated).
With ``--only ID`` only the operator producing var ID is kept: a one-operator model.

This is the only lar-prec module besides ``lar.py`` and the case builder that imports
megengine, and it does so in :func:`build` only; ``lar_prec.diagnosis.local`` runs it in a child
process of the same Python (importing megengine takes ~1 s and a second of memory).
Facts it relies on are in ``shared/reference/layerwise.md``:

* one ``replace_vars`` call with all cuts fails ("opr output already replaced"): one call
  per cut, in reverse topological order;
* the var being cut stays an output: it is left out of the call's destination list, so it
  keeps being computed by its own operator while its consumers read the new input;
* ``dump_format="FBS"`` makes lite copy the weights at load time (aligned); the default
  format uses them in place, and x86 MatrixMul's last bits depend on the address modulo 16.
"""
from __future__ import annotations

import json
import math
import re
import sys
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

from lar_prec.lar import quickimport
from lar_prec.outputs import atomic_write_text, json_text
from lar_prec.dumps.folder import DumpFolder
from lar_prec.lar.graph_records import probe_softmax_axis as _probe_softmax_axis
from lar_prec.oprules import rule as _rule

#: schema of layerwise.json
SCHEMA = "lar-prec.layerwise/1"
#: operators that compute nothing from other vars: model inputs and stored values
SOURCE_OPRS = frozenset(
    {"Host2DeviceCopy", "ImmutableTensor", "SharedDeviceTensor", "VolatileSharedDeviceTensor",
     "MultipleDeviceTensorHolder", "MultipleDeviceTensorWithFormatHolder"}
)
#: (operator type, input index) pairs that are shapes, not data: kept computed
SHAPE_SLOTS = frozenset({("Reshape", 1), ("Broadcast", 1)})
#: dtypes lite can feed as they are (reference 4.2)
FEEDABLE = frozenset({"float32", "float16", "int32", "int16", "int8", "uint8", "uint16"})
#: suffix of every measured output's name in the layerwise model: ``<name>.lw<original id>``
OUT_SUFFIX = re.compile(r"\.lw(\d+)$")
#: suffix of the output holding a measured var's sum of |terms|: ``<name>.mag<original id>``
MAG_SUFFIX = ".mag"


def feed_name(var_id: int, name: str) -> str:
    """The input name of a cut var: plain characters only, so ``--input name:f.npy`` parses."""
    plain = re.sub(r"[^A-Za-z0-9_.]", "_", name).strip("_.")[:40]
    return f"in{var_id}_{plain}" if plain else f"in{var_id}"


def output_name(var_id: int, name: str) -> str:
    """The output name of a measured var: its own name and the original graph's id."""
    return f"{name}.lw{var_id}"


def _ref_ids(ref_dump: Optional[str]) -> Tuple[Dict[int, str], Dict[str, List[int]], Dict[int, str],
                                               Dict[int, Tuple[int, ...]]]:
    """Var id -> name, name -> ids, var id -> operator type and var id -> shape of the reference
    dump (empty without one)."""
    if not ref_dump:
        return {}, {}, {}, {}

    folder = DumpFolder(ref_dump)
    by_id = {d.id: d.var.name for d in folder}
    types = {d.id: d.var.opr_type for d in folder}
    shapes = {d.id: tuple(int(x) for x in d.shape) for d in folder}
    by_name: Dict[str, List[int]] = {}
    for vid, name in by_id.items():
        by_name.setdefault(name, []).append(vid)
    return by_id, by_name, types, shapes


def _static_shape(var: Any) -> Optional[Tuple[int, ...]]:
    """The var's shape when the graph knows it before running (None: known only at run time,
    as TopK's with a k fed at run time, NMS's outputs and what they index)."""
    try:
        shape = var.shape
        return tuple(int(d) for d in shape) if shape is not None else None
    except (TypeError, ValueError, RuntimeError):
        return None


def _match_ref(var: Any, by_id: Dict[int, str], by_name: Dict[str, List[int]],
               types: Optional[Dict[int, str]] = None) -> Optional[int]:
    """The reference dump's id of ``var``: the same id and name (same loader), else a unique
    name, else a name unique among the vars its operator type made (a float16 rewrite names
    the TypeCvt back to float32 after the operator it converts: two vars called "Softmax")."""
    if by_id.get(var.id) == var.name:
        return var.id
    ids = by_name.get(var.name, [])
    if len(ids) > 1 and types:
        ids = [i for i in ids if types.get(i) == var.owner.type]
    return ids[0] if len(ids) == 1 else None


def _dtype_info(var: Any) -> Dict[str, Any]:
    """How a var of this dtype is fed: as itself, Bool as int32, quantized as float32 (x scale)."""
    # numpy and megengine only in the build's own process
    import numpy as np
    from megengine.core.tensor.dtype import get_scale, is_quantize

    dt = var.dtype
    if is_quantize(dt):
        return {"dtype": dt.metadata["mgb_dtype"]["name"], "feed_dtype": "float32", "scale": float(get_scale(dt)), "convert": True}
    name = np.dtype(dt).name
    if name in FEEDABLE:
        return {"dtype": name, "feed_dtype": name, "scale": None, "convert": False}
    if name == "bool":
        return {"dtype": name, "feed_dtype": "int32", "scale": None, "convert": True}
    return {"dtype": name, "feed_dtype": None, "scale": None, "convert": False}


def _params(opr: Any) -> Dict[str, Any]:
    """MegEngine's parameter JSON of an operator (a dict; empty when it has none it shows)."""
    try:
        params = json.loads(opr.params)
    except (ValueError, TypeError, RuntimeError):
        return {}
    return params if isinstance(params, dict) else {}


def _mode(opr: Any) -> Optional[str]:
    """The operator's mode (Elemwise, Reduce, Pooling) or ConvBias's nonlinearity."""
    p = _params(opr)
    mode = p.get("mode", p.get("nonlineMode"))
    if opr.type == "PowC":  # x ** exp: MegEngine shows its exponent only in the operator's name
        exp = p.get("exp")
        if not isinstance(exp, (int, float)):
            hit = re.match(r"powc_(-?\d+(?:\.\d+)?(?:e-?\d+)?)\(", str(opr.name))
            exp = float(hit.group(1)) if hit else None
        return None if exp is None else f"POWC {float(exp)!r}"
    if opr.type.startswith("ConvBias"):
        mode = p.get("nonlineMode")
    elif "imode" in p:  # resize, warps, remap: the interpolation
        mode = p.get("imode")
    return mode if isinstance(mode, str) else None


def sums_terms(opr_type: str, mode: Optional[str]) -> bool:
    """Whether an operator of this type and mode gets a twin on the absolute values of its inputs
    (its sum of |terms|: :func:`lar_prec.oprules.rule`)."""
    return _rule(opr_type, mode).twin


def _magnitude(var: Any, cur: Any) -> Any:
    """The same operator as ``cur`` (var's operator, its inputs cut) on the absolute values of
    its float inputs: each element's sum of |terms|."""
    # megengine only in the build's own process
    import megengine.utils.comp_graph_tools as cgt
    from megengine.core.ops.builtin import Elemwise
    from megengine.core.tensor import megbrain_graph as G

    slots = _rule(var.owner.type, _mode(var.owner)).slots
    absolute = {u: G.apply_normal_varnode(Elemwise(Elemwise.Mode.ABS), u)[0]
                for k, u in enumerate(cur.owner.inputs)
                if (slots is None or k in slots) and _dtype_info(u)["dtype"] in ("float32", "float16")}
    mode = _mode(var.owner)
    if var.owner.type == "ConvBiasForward" and mode not in ("IDENTITY", "RELU"):
        # the sum before its nonlinearity: the same ConvBias without it, on the absolute values
        mag = G.apply_normal_varnode(_conv_bias_identity(var.owner), *[absolute.get(u, u) for u in cur.owner.inputs])[0]
    else:
        mag = cgt.replace_vars([cur], absolute)[0]
    mag.name = f"{var.name}{MAG_SUFFIX}{var.id}"
    return mag


def _conv_bias_identity(opr: Any) -> Any:
    """A ConvBias with ``opr``'s parameters and no nonlinearity."""
    # megengine only in the build's own process
    from megengine.core.ops.builtin import ConvBias

    p = _params(opr)
    enums = {"mode": ConvBias.Mode, "sparse": ConvBias.Sparse, "format": ConvBias.Format,
             "compute_mode": ConvBias.ComputeMode}
    kw = {k: getattr(enums[k], p[k]) if k in enums else p[k] for k in (
        "mode", "sparse", "format", "compute_mode", "pad_h", "pad_w", "stride_h", "stride_w", "dilate_h", "dilate_w")}
    return ConvBias(nonlineMode=ConvBias.NonlineMode.IDENTITY, **kw)


def _is_static(var: Any, static: set) -> bool:
    """A shape-chain var or a stored constant (get_oprs_seq leaves constants' operators out)."""
    return var.id in static or (var.owner.type in SOURCE_OPRS and var.owner.type != "Host2DeviceCopy")


def _plan(oprs: Sequence[Any], by_id: Dict[int, str], by_name: Dict[str, List[int]],
          types: Optional[Dict[int, str]] = None) -> Dict[str, Any]:
    """Which vars are cut (fed), measured (outputs) and why some operators are not isolated."""
    consumers: Dict[int, List[Tuple[Any, int]]] = {}
    for opr in oprs:
        for k, v in enumerate(opr.inputs):
            consumers.setdefault(v.id, []).append((opr, k))
    static: set = set()  # shape chains: values known from shapes and constants alone
    ref: Dict[int, Optional[int]] = {}
    cut: List[Any] = []
    measured: List[Any] = []
    kept: Dict[int, str] = {}  # var id -> why it stays computed
    for opr in oprs:
        if opr.type in SOURCE_OPRS:
            for v in opr.outputs:
                if opr.type == "Host2DeviceCopy":
                    ref[v.id] = _match_ref(v, by_id, by_name, types)
                    cut.append(v)  # re-created with its own name (lite names inputs by it)
                else:
                    static.add(v.id)
            continue
        if opr.type == "GetVarShape" or all(_is_static(v, static) for v in opr.inputs):
            static.update(v.id for v in opr.outputs)
        for v in opr.outputs:
            ref[v.id] = _match_ref(v, by_id, by_name, types)
            if ref[v.id] is None:
                kept[v.id] = "no reference value"
                continue
            measured.append(v)
            uses = consumers.get(v.id, [])
            if not uses:
                continue
            if v.id in static:
                kept[v.id] = "shape chain (computed from shapes and constants)"
            elif any((o.type, k) in SHAPE_SLOTS for o, k in uses):
                kept[v.id] = "shape input of Reshape/Broadcast"
            elif _dtype_info(v)["feed_dtype"] is None:
                kept[v.id] = f"dtype {_dtype_info(v)['dtype']} cannot be fed"
            else:
                cut.append(v)
    return {"cut": cut, "measured": measured, "kept": kept, "ref": ref, "static": static}


def _isolation_problems(oprs: Sequence[Any], plan: Dict[str, Any]) -> Tuple[Dict[int, str], Dict[int, List[int]]]:
    """Which operators still read computed data vars.

    Returns ``(problems, units)``: measured var id -> why its operator is not isolated, and
    measured var id -> the vars without a reference value computed with it from cut inputs
    (lite fuses small elemwise chains at load time, so those have no dump): their local
    error is the error of that unit.
    """
    cut_ids = {v.id for v in plan["cut"]}
    memo: Dict[int, Optional[List[int]]] = {}

    def unit(v: Any) -> Optional[List[int]]:
        """The no-reference vars behind ``v`` when all of them read only cut or static vars."""
        if v.id in cut_ids or _is_static(v, plan["static"]) or v.owner.type in SOURCE_OPRS:
            return []
        if plan["kept"].get(v.id) != "no reference value":
            return None
        if v.id not in memo:
            memo[v.id] = None  # a cycle is not a unit
            parts = [unit(u) for u in v.owner.inputs]
            memo[v.id] = None if any(p is None for p in parts) else [v.id] + [k for p in parts for k in p]
        return memo[v.id]

    problems: Dict[int, str] = {}
    units: Dict[int, List[int]] = {}
    for opr in oprs:
        if opr.type in SOURCE_OPRS:
            continue
        bad, members = [], []
        for v in opr.inputs:
            if v.id in cut_ids or _is_static(v, plan["static"]) or v.id not in plan["kept"]:
                continue
            u = unit(v)
            if u is None:
                bad.append(f"{v.name} (id {v.id}: {plan['kept'][v.id]})")
            else:
                members += u
        for v in opr.outputs:
            if bad:
                problems[v.id] = "reads computed " + ", ".join(bad)
            elif members:
                units[v.id] = sorted(set(members))
    return problems, units


def _unit_reductions(oprs: Sequence[Any], units: Dict[int, List[int]]) -> Dict[int, int]:
    """Measured var id -> the longest reduction inside its unit (a convolution or matrix
    product fused into it, e.g. a ConvBias behind a var named RELU or ADD): its noise floor is
    that operator's, not an elementwise one."""
    var = {v.id: v for opr in oprs for v in opr.outputs}
    out: Dict[int, int] = {}
    for vid, members in units.items():
        ks = []
        for m in members:
            v = var.get(m)
            if v is None:
                continue
            t, ins = v.owner.type, v.owner.inputs
            try:
                if t.startswith(("Convolution", "ConvBias")) and len(ins) > 1 and len(v.shape) > 1 and v.shape[1]:
                    ks.append(math.prod(int(d) for d in ins[1].shape) // int(v.shape[1]))
                elif t in ("MatrixMul", "BatchedMatrixMul") and ins and len(ins[0].shape):
                    ks.append(int(ins[0].shape[-1]))
            except (TypeError, ValueError):  # a shape not known statically: no reduction told
                continue
        if ks:
            out[vid] = max(ks)
    return out


def _axis(graph: Any, opr: Any) -> Optional[int]:
    """The axis a Softmax normalises over (its JSON has none in MegEngine 1.13: probed), or
    the first normalised axis of a LayerNorm (its mean output drops the normalised axes)."""
    if opr.type == "SoftmaxForward":
        axis = _params(opr).get("axis")
        if isinstance(axis, int):
            return axis
        try:
            return _probe_softmax_axis(graph, opr)
        except (RuntimeError, TypeError, ValueError):  # no static shape to probe with: no axis, not judged
            return None
    if opr.type == "LayerNormForward" and len(opr.outputs) > 1:
        try:
            return len(opr.outputs[1].shape)
        except TypeError:  # a shape not known statically
            return None
    return None


def build(model: str, ref_dump: "Optional[str] | Callable[[], Optional[str]]", out_dir: str,
          only: Optional[int] = None) -> Dict[str, Any]:
    """Write ``layerwise.mge`` and ``layerwise.json`` into ``out_dir``; returns the JSON object.
    ``ref_dump`` may be a function giving the folder once the model is loaded (None from it:
    nothing is built, nothing written, ``{}`` returned).

    Long because it is one sequence of graph edits whose order matters (see the module doc).
    """
    # numpy and megengine only in the build's own process
    import numpy as np
    import megengine.utils.comp_graph_tools as cgt
    from megengine.core._imperative_rt import make_h2d
    from megengine.core.ops.builtin import TypeCvt
    from megengine.core.tensor import megbrain_graph as G

    loaded = G.load_graph(model)
    oprs = cgt.get_oprs_seq(loaded.output_vars_list, prune_reshape=False)
    beside = callable(ref_dump)  # started before the reference run ended (EarlyBuild)
    if callable(ref_dump):
        ref_dump = ref_dump()
        if ref_dump is None:
            return {}
    by_id, by_name, types, ref_shapes = _ref_ids(ref_dump)
    plan = _plan(oprs, by_id, by_name, types)
    problems, units = _isolation_problems(oprs, plan)
    plan["units"] = units
    unit_k = _unit_reductions(oprs, units)

    def shape_of(v: Any) -> Optional[Tuple[int, ...]]:
        """The static shape, else (known only at run time) the reference dump's."""
        got = _static_shape(v)
        rid = plan["ref"].get(v.id)
        return got if got is not None else ref_shapes.get(rid) if rid is not None else None

    measured = plan["measured"]
    if only is not None:
        owner = next((v.owner for v in measured if v.id == only), None)
        if owner is None:
            raise SystemExit(f"var {only} is not a measured var of {model}")
        ids = {m.id for m in measured}
        measured = [v for v in owner.outputs if v.id in ids]
        needed = {v.id for v in owner.inputs}
        plan["cut"] = [v for v in plan["cut"] if v.id in needed]
    cur = {v.id: v for v in measured}
    feeds: List[Dict[str, Any]] = []
    not_fed: Dict[int, str] = {}  # var id -> why it stayed computed although it was to be fed
    for v in reversed(plan["cut"]):
        info = _dtype_info(v)
        is_input = v.owner.type == "Host2DeviceCopy"
        fname = v.name if is_input else feed_name(v.id, v.name)
        shape = shape_of(v)
        if shape is None:
            not_fed[v.id] = "its shape is known only at run time and the reference dump has no value of it"
            continue
        try:  # var by var: one var MegEngine cannot feed leaves the others measured
            h = make_h2d(v.graph, v.comp_node, np.dtype(info["feed_dtype"]), shape, fname)
            if info["convert"]:
                h = G.apply_normal_varnode(TypeCvt(dtype=v.dtype), h)[0]
            others = [k for k in cur if k != v.id]
            if others:
                # v itself is not in the destination list: it stays computed by its operator
                new = cgt.replace_vars([cur[k] for k in others], {v: h})
                cur.update(zip(others, new))
        except (RuntimeError, TypeError, ValueError) as exc:
            not_fed[v.id] = f"MegEngine could not feed it: {_first_line(exc)}"
            continue
        feeds.append({"name": fname, "id": v.id, "var_name": v.name, "ref_id": plan["ref"].get(v.id),
                      "shape": list(shape), "model_input": is_input, **info})
    for opr in oprs:  # an operator reading a var that could not be fed is not isolated
        bad = [f"{u.name} (id {u.id}: {not_fed[u.id]})" for u in opr.inputs if u.id in not_fed]
        for v in opr.outputs:
            if bad and v.id in cur and not problems.get(v.id):
                problems[v.id] = "reads computed " + ", ".join(bad)
    outputs = []
    magnitudes: Dict[int, str] = {}
    unmeasured: Dict[int, str] = {}
    if only is None:  # a repro model has no use for them
        for v in measured:
            if (sums_terms(v.owner.type, _mode(v.owner)) and v.id not in plan["static"] and not problems.get(v.id)
                    and _dtype_info(v)["dtype"] in ("float32", "float16")):
                try:
                    outputs.append(_magnitude(v, cur[v.id]))
                    magnitudes[v.id] = outputs[-1].name
                except (RuntimeError, TypeError, ValueError) as exc:
                    unmeasured[v.id] = f"its twin on absolute values could not be built: {_first_line(exc)}"
    for k, var in cur.items():
        try:
            var.name = output_name(k, var.name)
            info = _dtype_info(var)
            if info["convert"] or info["feed_dtype"] is None:
                # lite refuses Bool and quantized outputs: output a float32 copy, read var from the dump
                var = G.apply_normal_varnode(TypeCvt(dtype=np.dtype("float32")), var)[0]
                var.name = output_name(k, "") + ".out"
        except (RuntimeError, TypeError, ValueError) as exc:
            unmeasured[k] = f"MegEngine could not make it an output: {_first_line(exc)}"
            continue
        outputs.append(var)
    # a cut var whose every consumer stayed unmeasured feeds nothing: the dump prunes its
    # input, so the record must not list it (a run would be given an input the model lacks)
    used = {v.name for v in cgt.get_dep_vars(outputs, "Host2DeviceCopy")}
    feeds = [f for f in feeds if f["name"] in used]
    buf, _ = G.dump_graph(outputs, dump_format="FBS", keep_var_name=2)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    (out / "layerwise.mge").write_bytes(buf)
    meas = []
    for v in measured:
        shape = shape_of(v)
        in_shapes = [shape_of(u) for u in v.owner.inputs]
        if v.id in unmeasured or shape is None:
            plan["kept"][v.id] = "not measured: " + unmeasured.get(v.id, "its shape is known only at run time")
            continue
        meas.append({"id": v.id, "name": v.name, "ref_id": plan["ref"][v.id], "opr": v.owner.name,
                     "opr_type": v.owner.type, "output": output_name(v.id, v.name),
                     "inputs": [u.id for u in v.owner.inputs],
                     "input_shapes": [list(s) if s is not None else [] for s in in_shapes],
                     "shape": list(shape), "dtype": _dtype_info(v)["dtype"],
                     "static": v.id in plan["static"], "problem": problems.get(v.id), "unit": units.get(v.id, []),
                     "unit_reduction": unit_k.get(v.id, 1), "mode": _mode(v.owner), "magnitude": magnitudes.get(v.id),
                     "axis": _axis(loaded.graph, v.owner), "output_index": list(v.owner.outputs).index(v),
                     "steps": _steps(v, units.get(v.id, []), oprs)})
    constants = _save_constants(measured, oprs, plan, out) if only is None else {"files": {}, "names": {}}
    record = {"schema": SCHEMA, "model": str(model), "ref_dump": ref_dump, "only": only, "built_beside_runs": beside,
              "feeds": list(reversed(feeds)), "measured": meas, "constants": constants,
              "kept": [{"id": k, "reason": r} for k, r in sorted({**plan["kept"], **not_fed}.items())]}
    atomic_write_text(out / "layerwise.json", json_text(record), what="layerwise model record")
    return record


#: the largest constant whose values the build writes beside the model (elements)
CONSTANT_LIMIT = 1 << 18
#: the folder of those values: ``constants/<var id>.npy``
CONSTANTS_DIR = "constants"


def _save_constants(measured: Sequence[Any], oprs: Sequence[Any], plan: Dict[str, Any],
                    out: Path) -> Dict[str, Dict[str, str]]:
    """The values of the constants (stored, or computed from constants alone) that a measured
    operator or its unit reads, as this model holds them: written as ``constants/<id>.npy`` for
    the bounds of elementwise operators, which need every input's value (the reference dump
    may lack one: lite folds some at load, and a folded one is never dumped; and its ids are
    another graph's when the model was rewritten). ``files``: var id -> file name; ``names``:
    var id -> name, of those whose value the build cannot read."""
    # numpy only in the build's own process
    import numpy as np

    owners = {v.id: v for opr in oprs for v in opr.outputs}
    wanted: Dict[int, Any] = {}
    for v in measured:
        for u in v.owner.inputs:
            wanted.setdefault(u.id, u)
        for k in plan.get("units", {}).get(v.id, ()):
            for u in owners[k].owner.inputs if k in owners else ():
                wanted.setdefault(u.id, u)
    saved: Dict[str, str] = {}
    names: Dict[str, str] = {}
    for vid, u in wanted.items():
        if not _is_static(u, plan["static"]):
            continue
        try:
            value = np.asarray(u.value)
        except (RuntimeError, TypeError, ValueError, AttributeError):  # not inferable before running
            value = np.asarray(None)
        if value.dtype.kind not in "fiub" or value.size > CONSTANT_LIMIT:
            # (a merged MultipleDeviceTensorHolder reads as None here): the reference dump's
            # value of that name, if it has one, stands for it
            names[str(vid)] = u.name
            continue
        (out / CONSTANTS_DIR).mkdir(exist_ok=True)
        np.save(out / CONSTANTS_DIR / f"{vid}.npy", value, allow_pickle=False)
        saved[str(vid)] = f"{vid}.npy"
    return {"files": saved, "names": names}


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0][:300] if text else type(exc).__name__


def _steps(var: Any, unit: Sequence[int], oprs: Sequence[Any]) -> List[Dict[str, Any]]:
    """The operators of a measured var's unit (fused at load: no reference value of their own),
    then its own, in execution order: what the elementwise bound evaluates step by step."""
    if not unit:
        return []
    owners = {v.id: opr for opr in oprs for v in opr.outputs}
    ids = [k for k in unit if k in owners] + [var.id]
    order = {v.id: i for i, opr in enumerate(oprs) for v in opr.outputs}
    return [{"id": k, "opr_type": owners[k].type, "mode": _mode(owners[k]), "inputs": [u.id for u in owners[k].inputs]}
            for k in sorted(ids, key=lambda k: order.get(k, 0))]


def _path_from_stdin() -> Optional[str]:
    """The dump folder's path, one line on stdin from the parent lar-prec (EOF: not needed)."""
    line = sys.stdin.readline()
    return line[:-1] if line.endswith("\n") and len(line) > 1 else None


def main(argv: Optional[Sequence[str]] = None) -> int:
    """``python -m lar_prec.lar.layerwise_build MODEL REF_DUMP OUT_DIR [--only ID]``; REF_DUMP
    ``-``: the model is loaded first, then the folder's path read from stdin (one line; none:
    nothing built), so MegEngine's import and the load overlap the run that writes that dump."""
    quickimport.import_megengine()  # this child runs MegEngine: import it without megfile and pkg_resources
    args = list(sys.argv[1:] if argv is None else argv)
    only = None
    if "--only" in args:
        i = args.index("--only")
        only = int(args[i + 1])
        del args[i:i + 2]
    if len(args) != 3:
        sys.stderr.write("usage: python -m lar_prec.lar.layerwise_build MODEL REF_DUMP OUT_DIR [--only VAR_ID]\n")
        return 2
    try:
        build(args[0], _path_from_stdin if args[1] == "-" else (args[1] or None), args[2], only)
    except RuntimeError as exc:  # MegEngine's errors: its first line is the message
        sys.stderr.write(f"layerwise_build: error: {str(exc).splitlines()[0] if str(exc) else exc!r}\n")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
