"""Cut a model down to some of its operators, fed with the reference's values where it is cut.

``lar-prec reduce`` (:mod:`lar_prec.workflows.reduce`) searches for the smallest part of a model
that still fails the same way; this child process makes each part it tries. Two commands:

``python -m lar_prec.lar.reduce_build describe MODEL REF_DUMP OUT_JSON``
    the model's data operators in execution order (constants and shape chains are not
    operators here: they follow their consumers), what each reads, and which of its inputs
    cannot be fed (no reference value, a shape input, a dtype lite cannot feed): their
    producers must stay with it.

``python -m lar_prec.lar.reduce_build build MODEL REF_DUMP OUT_DIR --keep ID,ID,...``
    ``OUT_DIR/reduced.mge`` keeping the operators whose first output has a listed id: every
    computed var they read from an operator left out becomes an input of the same shape and
    dtype (``in<id>_<name>``, fed from REF_DUMP), model inputs keep their names, and the vars
    nothing kept reads become the outputs. Every var keeps its name, so the dump of a run pairs
    with the reference's by name, as a sweep pairs a rewritten graph; no var that the whole
    model computes only inside is made an output (an output more would stop the fusions and
    rewrites a bug may need). ``OUT_DIR/reduced.json`` says what is fed and kept.

The cuts follow the layerwise build (:mod:`lar_prec.lar.layerwise_build`: its plan of what can
be fed, one ``replace_vars`` call per cut in reverse execution order); a part is written in the
model's own format (:func:`_format_of`).
"""
from __future__ import annotations

import sys
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence, Set

from lar_prec.lar import quickimport
from lar_prec.lar.graphopts import load_output_vars
# the layerwise build's plan of what can be fed, shared so both cut a graph the same way
from lar_prec.lar.layerwise_build import SOURCE_OPRS, _dtype_info, _is_static, _mode, _plan, _ref_ids, feed_name
from lar_prec.outputs import atomic_write_text, json_text

#: schemas of the two records
DESCRIBE_SCHEMA = "lar-prec.reduce-graph/1"
BUILD_SCHEMA = "lar-prec.reduced/1"


def _load(model: str, ref_dump: str) -> Dict[str, Any]:
    """The graph, its operators in execution order and the layerwise plan on the reference dump."""
    # megengine only in this child
    import megengine.utils.comp_graph_tools as cgt

    outs = load_output_vars(Path(model))
    oprs = cgt.get_oprs_seq(outs, prune_reshape=False)
    by_id, by_name, types, _shapes = _ref_ids(ref_dump)
    plan = _plan(oprs, by_id, by_name, types)
    static = plan["static"]
    data = [o for o in oprs if o.type not in SOURCE_OPRS and not all(v.id in static for v in o.outputs)]
    producer = {v.id: o.outputs[0].id for o in data for v in o.outputs}
    return {"outs": outs, "oprs": oprs, "plan": plan, "data": data, "producer": producer,
            "cuttable": {v.id for v in plan["cut"]}}


def _is_source(v: Any, g: Dict[str, Any]) -> bool:
    return v.owner.type in SOURCE_OPRS or v.id in g["plan"]["static"]


def _data_inputs(opr: Any, g: Dict[str, Any]) -> List[Any]:
    """The computed data vars ``opr`` reads: its inputs, and those a shape chain of its
    inputs reads (``GetVarShape(x)``: x must exist in the part too, cut or computed)."""
    found: List[Any] = []
    seen: Set[int] = set()
    todo = list(opr.inputs)
    while todo:
        v = todo.pop()
        if v.id in seen:
            continue
        seen.add(v.id)
        if v.id in g["producer"]:
            found.append(v)
        elif v.id in g["plan"]["static"] and v.owner.type not in SOURCE_OPRS:
            todo.extend(v.owner.inputs)  # a shape chain: what it is computed from
    return sorted(found, key=lambda v: v.id)


def _data_oprs(oprs: Sequence[Any]) -> List[Any]:
    """The operators of a graph that compute data: not inputs, constants or shape chains."""
    static: Set[int] = set()
    out = []
    for o in oprs:
        if o.type in SOURCE_OPRS:
            continue
        if o.type == "GetVarShape" or all(_is_static(v, static) for v in o.inputs):
            static.update(v.id for v in o.outputs)
        else:
            out.append(o)
    return out


def _format_of(model: str) -> str:
    """The model file's format, which its parts are written in too: a load-time failure goes
    through the same loader (FBS v2 starts with its size and ``mgv2``). Either format gives the
    whole model's own bits (the cases' default runs, all vars compared)."""
    with open(model, "rb") as fh:
        return "FBS_V2" if fh.read(12)[8:12] == b"mgv2" else "FBS"


def _feed(v: Any, g: Dict[str, Any]) -> Dict[str, Any]:
    """The feed record of cut var ``v`` (the layerwise build's fields): model inputs keep their
    names (lite names inputs by them), other vars get a plain one."""
    is_input = v.owner.type == "Host2DeviceCopy"
    return {"name": v.name if is_input else feed_name(v.id, v.name), "id": v.id, "var_name": v.name,
            "ref_id": g["plan"]["ref"].get(v.id), "shape": [int(d) for d in v.shape], "model_input": is_input,
            **_dtype_info(v)}


def describe(model: str, ref_dump: str) -> Dict[str, Any]:
    """The data operators of ``model`` for the search (see the module docstring)."""
    g = _load(model, ref_dump)
    kept_why = g["plan"]["kept"]
    consumed: Set[int] = set()
    ops = []
    for o in g["data"]:
        reads, needs = [], []
        for v in _data_inputs(o, g):
            consumed.add(v.id)
            p = g["producer"][v.id]
            if v.id in g["cuttable"]:
                reads.append(p)
            else:
                needs.append([p, f"{v.name}: {kept_why.get(v.id, 'cannot be fed')}"])
        ops.append({"id": o.outputs[0].id, "name": o.outputs[0].name, "opr": o.name, "type": o.type,
                    "mode": _mode(o), "reads": sorted(set(reads)), "needs": needs,
                    "inputs": sorted({v.name for v in o.inputs if v.owner.type == "Host2DeviceCopy"}),
                    "outputs": [{"id": v.id, "name": v.name, "ref_id": g["plan"]["ref"].get(v.id)}
                                for v in o.outputs]})
    model_outs = {v.id for v in g["outs"]}
    for op in ops:  # outputs whose value someone uses: the only ones a part may output
        for out in op["outputs"]:
            out["used"] = out["id"] in consumed or out["id"] in model_outs
    inputs = [_feed(v, g) for v in g["plan"]["cut"] if v.owner.type == "Host2DeviceCopy"]
    return {"schema": DESCRIBE_SCHEMA, "model": str(model), "ref_dump": str(ref_dump), "ops": ops,
            "model_inputs": inputs,
            "static_ops": len(g["oprs"]) - len(g["data"]) - sum(o.type in SOURCE_OPRS for o in g["oprs"])}


def build(model: str, ref_dump: str, out_dir: str, keep: Sequence[int]) -> Dict[str, Any]:
    """Write ``reduced.mge`` and ``reduced.json`` into ``out_dir``; returns the record."""
    # numpy and megengine only in this child
    import numpy as np
    import megengine.utils.comp_graph_tools as cgt
    from megengine.core._imperative_rt import make_h2d
    from megengine.core.ops.builtin import TypeCvt
    from megengine.core.tensor import megbrain_graph as G

    g = _load(model, ref_dump)
    kept = [o for o in g["data"] if o.outputs[0].id in set(keep)]
    unknown = set(keep) - {o.outputs[0].id for o in kept}
    if unknown:
        raise SystemExit(f"no data operator of {model} has first output id {sorted(unknown)}")
    kept_ids = {o.outputs[0].id for o in kept}
    model_outs = {v.id for v in g["outs"]}
    read_by_kept: Set[int] = set()
    cut: Dict[int, Any] = {}
    used_anywhere: Set[int] = set()
    for o in g["data"]:
        for v in _data_inputs(o, g):
            used_anywhere.add(v.id)
            if o.outputs[0].id not in kept_ids:
                continue
            if g["producer"][v.id] in kept_ids:
                read_by_kept.add(v.id)
            elif v.id in g["cuttable"]:
                cut[v.id] = v
            else:
                raise SystemExit(f"operator {o.outputs[0].name} reads {v.name}, which cannot be fed "
                                 f"({g['plan']['kept'].get(v.id)}): keep its producer too")
        if o.outputs[0].id in kept_ids:
            cut.update({v.id: v for v in o.inputs if v.owner.type == "Host2DeviceCopy"})
    outputs = [v for o in kept for v in o.outputs
               if v.id not in read_by_kept and (v.id in used_anywhere or v.id in model_outs)]
    cur = list(outputs)
    feeds = []
    for v in sorted(cut.values(), key=lambda v: -v.id):  # one call per cut, last first
        feed = _feed(v, g)
        h = make_h2d(v.graph, v.comp_node, np.dtype(feed["feed_dtype"]), v.shape, feed["name"])
        if feed["convert"]:
            h = G.apply_normal_varnode(TypeCvt(dtype=v.dtype), h)[0]
        cur = cgt.replace_vars(cur, {v: h})
        feeds.append(feed)
    used = {v.name for v in cgt.get_dep_vars(cur, "Host2DeviceCopy")}
    feeds = [f for f in reversed(feeds) if f["name"] in used]
    buf, _ = G.dump_graph(cur, dump_format=_format_of(model), keep_var_name=2)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    (out / "reduced.mge").write_bytes(buf)
    ran = _data_oprs(cgt.get_oprs_seq(cur, prune_reshape=False))
    record = {"schema": BUILD_SCHEMA, "model": str(model), "ref_dump": str(ref_dump), "keep": sorted(kept_ids),
              "feeds": feeds, "outputs": [{"id": v.id, "name": v.name} for v in outputs],
              "operators_in_model": len(ran)}
    atomic_write_text(out / "reduced.json", json_text(record), what="reduced model record")
    return record


def main(argv: Optional[Sequence[str]] = None) -> int:
    """The two commands of the module docstring; 2 for a bad command line, 1 for MegEngine's errors."""
    args = list(sys.argv[1:] if argv is None else argv)
    usage = ("usage: python -m lar_prec.lar.reduce_build describe MODEL REF_DUMP OUT_JSON\n"
             "       python -m lar_prec.lar.reduce_build build MODEL REF_DUMP OUT_DIR --keep ID,ID,...\n")
    keep: List[int] = []
    if "--keep" in args:
        i = args.index("--keep")
        try:
            keep = [int(x) for x in args[i + 1].split(",") if x]
        except (IndexError, ValueError):
            sys.stderr.write(usage)
            return 2
        del args[i:i + 2]
    if len(args) != 4 or args[0] not in ("describe", "build") or (args[0] == "build") != bool(keep):
        sys.stderr.write(usage)
        return 2
    quickimport.import_megengine()  # this child runs MegEngine: import it without megfile and pkg_resources
    try:
        if args[0] == "describe":
            atomic_write_text(Path(args[3]), json_text(describe(args[1], args[2])), what="graph record")
        else:
            build(args[1], args[2], args[3], keep)
    except RuntimeError as exc:  # MegEngine's errors: its first line is the message
        sys.stderr.write(f"reduce_build: error: {str(exc).splitlines()[0] if str(exc) else exc!r}\n")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
