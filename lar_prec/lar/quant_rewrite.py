"""An int8 model with chosen layers computed in float32: what "keep this layer in float" gives.

``python -m lar_prec.lar.quant_rewrite MODEL OUT --keep KEEP.json`` loads an int8 model
(``quantize_qat`` + ``quantize`` + dump) and replaces each kept quantized operator by its float
computation: its int8 inputs dequantized (``TypeCvt`` to float32), the operator computed in
float32, and the result quantized back to the operator's own output dtype and scale (its
consumers read int8, as they did). So a kept layer differs from the int8 one exactly by what
quantizing it cost: its weights, its accumulation and its own rounding; the rounding of its
input and output stays, as it would in a deployment that keeps one layer in float.

What each kept operator becomes (anything else is refused, with the operator named):

* ``ConvBiasForward``: a float32 ``ConvBias`` of the same geometry and nonlinearity, with the
  **float model's** weights (``weight`` in the keep file: an ``.npy`` the caller wrote from the
  float run's dump) and the int8 model's bias dequantized (int32 at ``input scale x weight
  scale``: below a thousandth of an int8 step from the float bias, which the float model's
  ``optimize_for_inference`` may have moved into a later operator);
* ``ElemwiseMultiType`` ``QADD``, ``QFUSE_ADD_RELU``, ...: the float ``Elemwise`` of that mode;
* ``PoolingForward``: the same pooling in float32.

The replacement keeps the var's name (its float vars are ``<name>.float`` and
``<name>.<input>.float``), so the rewritten model's dump pairs with the int8 model's by name.
Operators are replaced one at a time in execution order (``cg::replace_vars`` copies everything
downstream; the next kept var is found again by name in the new graph). On MegEngine 1.13 an
int8 add kept this way gives the int8 add's bits (its arithmetic is dequantize, add, round).

megengine is imported only inside :func:`rewrite_keep`.
"""
from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence

from lar_prec.lar import quickimport
from lar_prec.errors import LarPrecError, UsageError
from lar_prec.inputspec import read_json_file
from lar_prec.lar.graphopts import load_output_vars, rewrite_errors, write_model
from lar_prec.outputs import atomic_write_text, json_text
from lar_prec.records import PathLike

#: schema of the keep file and of the record written beside the model
KEEP_SCHEMA = "lar-prec.quant-keep/1"
RECORD_SCHEMA = "lar-prec.quant-kept-model/1"
#: exit status of the child for a usage error (MegEngine refusing the rewrite: 1)
USAGE_EXIT = 2
#: the operator types a keep file may name
KEEPABLE = frozenset({"ConvBiasForward", "ElemwiseMultiType", "PoolingForward"})


def read_keep(path: PathLike) -> List[Dict[str, Any]]:
    """The kept layers of a keep file: ``[{"name": var name, "weight": .npy path or null}]``.

    Raises:
        UsageError: not such a file.
    """
    p = Path(path)
    data = read_json_file(p, f"keep file ({KEEP_SCHEMA})")
    layers = data.get("layers") if isinstance(data, dict) and data.get("schema") == KEEP_SCHEMA else None
    if not isinstance(layers, list) or not all(
            isinstance(k, dict) and isinstance(k.get("name"), str) and (k.get("weight") is None or isinstance(k["weight"], str))
            for k in layers):
        raise UsageError(f"{p}: expected a keep file ({KEEP_SCHEMA}) with layers [{{name, weight}}]")
    return [{"name": k["name"], "weight": k.get("weight")} for k in layers]


def _float_of(var: Any, name: str, weight: Optional[str]) -> Any:
    """The float computation of the operator that produces ``var``, quantized back to its dtype."""
    # megengine (and numpy) only in the rewrite's own process
    import numpy as np
    import megengine.core.tensor.megbrain_graph as G
    from megengine.core._imperative_rt import make_const
    from megengine.core.ops import builtin
    from megengine.core.tensor.dtype import get_scale
    from megengine.utils.network_node import str_to_mge_class

    opr = var.owner
    if opr.type not in KEEPABLE:
        raise UsageError(f"{name} is computed by {opr.type}: only {', '.join(sorted(KEEPABLE))} can be kept in float")
    f32 = np.dtype("float32")

    def dequant(v: Any) -> Any:
        d = G.apply_normal_varnode(builtin.TypeCvt(dtype=f32), v)[0]
        d.name = f"{name}.{v.name}.float"
        return d

    if opr.type == "ConvBiasForward":
        if weight is None or len(opr.inputs) != 3:
            raise UsageError(f"{name}: a kept ConvBias needs the float weights and a bias input")
        x, wq, bq = opr.inputs
        w = np.load(weight, allow_pickle=False).astype(f32)
        if tuple(w.shape) != tuple(wq.shape):
            raise UsageError(f"{name}: float weights of shape {list(w.shape)}, the int8 model's are {list(wq.shape)}")
        bias = (np.asarray(bq.value).astype(np.float64) * float(get_scale(bq.dtype))).astype(f32)
        node = str_to_mge_class(opr.type).load(opr)
        params = dict(node.params, dtype=f32)
        wc = make_const(x.graph, w, x.comp_node, f32, f"{name}.float_weight")
        bc = make_const(x.graph, bias, x.comp_node, f32, f"{name}.float_bias")
        y = G.apply_normal_varnode(node.opdef(**params), dequant(x), wc, bc)[0]
    elif opr.type == "ElemwiseMultiType":
        mode = str(json.loads(opr.params).get("mode", ""))
        if not mode.startswith("Q"):
            raise UsageError(f"{name}: ElemwiseMultiType mode {mode} has no float counterpart")
        y = G.apply_normal_varnode(builtin.Elemwise(mode=mode[1:]), *[dequant(v) for v in opr.inputs])[0]
    else:
        node = str_to_mge_class(opr.type).load(opr)
        y = G.apply_normal_varnode(node.opdef(**node.params), dequant(opr.inputs[0]))[0]
    y.name = f"{name}.float"  # the var's own name goes to its int8 output alone
    out = G.apply_normal_varnode(builtin.TypeCvt(dtype=var.dtype), y)[0]
    out.name = var.name
    return out


def rewrite_keep(model: PathLike, out: PathLike, keep: Sequence[Dict[str, Any]]) -> Dict[str, Any]:
    """Write ``model`` with the layers of ``keep`` in float32 to ``out`` (atomically); returns
    the record (``model``, ``sha256``, ``kept``).

    Raises:
        UsageError: no such model, a name that is not one var of it, an operator that cannot be kept.
        RewriteError: MegEngine refused the rewrite (its first line is the message).
    """
    src, dst = Path(model), Path(out)
    # megengine only in the rewrite's own process
    import megengine.core.tensor.megbrain_graph as G
    import megengine.utils.comp_graph_tools as cgt

    with rewrite_errors(f"cannot keep layers of {src} in float"):
        outs = load_output_vars(src)
        order = {o.outputs[0].name: k for k, o in enumerate(cgt.get_oprs_seq(outs, prune_reshape=False))}
        for k in sorted(keep, key=lambda k: order.get(k["name"], -1)):
            found = [v for o in cgt.get_oprs_seq(outs, prune_reshape=False) for v in o.outputs if v.name == k["name"]]
            if len(found) != 1:
                raise UsageError(f"{src}: {len(found) or 'no'} var(s) named {k['name']!r}: expected exactly one")
            names = [o.name for o in outs]
            outs = cgt.replace_vars(outs, {found[0]: _float_of(found[0], k["name"], k["weight"])})
            for o, n in zip(outs, names):
                o.name = n
        for v in cgt.get_dep_vars(outs, "Host2DeviceCopy"):
            v.owner.name = v.name  # lite names inputs by their operator (graph-options.md section 1)
        buf, _ = G.dump_graph(outs, keep_var_name=2, keep_param_name=True)
    sha = write_model(dst, buf, "the model with layers kept in float")
    return {"schema": RECORD_SCHEMA, "model": str(dst), "sha256": sha, "kept": [k["name"] for k in keep]}


def main(argv: Optional[Sequence[str]] = None) -> int:
    """``python -m lar_prec.lar.quant_rewrite MODEL OUT --keep KEEP.json --record R.json``."""
    quickimport.import_megengine()  # this child runs MegEngine: import it without megfile and pkg_resources
    args = list(sys.argv[1:] if argv is None else argv)
    if len(args) != 6 or args[2] != "--keep" or args[4] != "--record":
        sys.stderr.write("usage: python -m lar_prec.lar.quant_rewrite MODEL OUT --keep KEEP.json --record R.json\n")
        return 2
    try:
        record = rewrite_keep(args[0], args[1], read_keep(args[3]))
        atomic_write_text(args[5], json_text(record), what="kept-model record")
    except LarPrecError as exc:
        sys.stderr.write(f"quant_rewrite: error: {exc}\n")
        return USAGE_EXIT if isinstance(exc, UsageError) else 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
