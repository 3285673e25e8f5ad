"""Every operator of a model as a plain JSON record: type, parameters, input and output vars.

``python -m lar_prec.lar.graph_records MODEL OUT.json`` loads MODEL with MegEngine's graph
API and writes, in execution order, each operator's type, name and parameters (MegEngine's
own parameter JSON, ``OperatorNode.params``) and each var's id, name, dtype, shape, and for
quantized dtypes the scale and zero point. The numpy side reads it with
:mod:`lar_prec.diagnosis.graphinfo`: the float64 oracle takes operator parameters from it, the
quantization analysis the scales (dump titles carry none), the mixed-precision report the
MACs of each operator.

Var ids are those of ``megbrain_graph.load_graph``, which are the ids the bundled load_and_run
dumps the same model under (megenginelite loads it with the same loader).

Parameters MegEngine does not expose as JSON are *probed*: the operator itself is run by
MegEngine on a random input and the parameter read off the result (Softmax's axis: its JSON
is ``{ }`` in 1.13). Probed parameters are listed under ``probed`` with how they were found.

megengine is imported only inside :func:`describe`.
"""
from __future__ import annotations

import json
import re
import sys
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence

from lar_prec.lar import quickimport
from lar_prec.outputs import atomic_write_text, json_text

#: schema of the JSON record
SCHEMA = "lar-prec.graph/1"

#: numpy dtype names -> MegDNN's names, as dump titles spell them
MGB_NAMES = {
    "float32": "Float32", "float16": "Float16", "bfloat16": "BFloat16", "int32": "Int32", "int16": "Int16",
    "int8": "Int8", "uint8": "Uint8", "uint16": "Uint16", "bool": "Bool",
}


def _var_record(var: Any) -> Dict[str, Any]:
    # megengine (and numpy) only in the rewrite's own process
    import numpy as np
    from megengine.core.tensor.dtype import get_scale, get_zero_point, is_quantize

    scale = zero_point = None
    try:
        dt = var.dtype
    except RuntimeError as exc:  # dtypes numpy has no name for (BatchNorm's Byte workspace)
        m = re.search(r"dtype (\w+) to numpy", str(exc))
        name = m.group(1) if m else "unknown"
    else:
        if is_quantize(dt):
            meta = dt.metadata["mgb_dtype"]
            name = meta["name"]
            scale = float(get_scale(dt))
            # only the asymmetric types carry a zero point (Quantized8Asymm, Quantized4Asymm)
            zero_point = int(get_zero_point(dt)) if "Asymm" in name else None
        else:
            try:
                name = MGB_NAMES.get(np.dtype(dt).name, np.dtype(dt).name)
            except TypeError:
                name = str(dt)
    shape = var.shape
    return {"id": int(var.id), "name": var.name, "dtype": name,
            "shape": [int(d) for d in shape] if shape is not None else None,
            "scale": scale, "zero_point": zero_point}


def _params(opr: Any) -> Any:
    try:  # a NaN or Infinity parameter (a fill value) stays its name, a string: JSON has neither
        return json.loads(opr.params, parse_constant=str)
    except (ValueError, TypeError, RuntimeError):
        return None


def probe_softmax_axis(graph: Any, opr: Any) -> Optional[int]:
    """The axis MegEngine's Softmax normalises over: run it on a random input of the same
    shape and find the one axis whose sums are all 1."""
    # megengine (and numpy) only in the rewrite's own process
    import numpy as np
    import megengine.core.tensor.megbrain_graph as G
    import megengine.utils.comp_graph_tools as cgt
    from megengine.core._imperative_rt import make_shared
    from megengine.tensor import Tensor

    x, y = opr.inputs[0], opr.outputs[0]
    if x.shape is None or len(x.shape) == 0:
        return None
    probe = np.random.RandomState(0).standard_normal(tuple(x.shape)).astype("float32")
    src = make_shared(x.graph, Tensor(probe.astype(np.dtype(x.dtype)))._dev_tensor())
    out = cgt.replace_vars([y], {x: src})[0]
    node = G.OutputNode(out)
    func = graph.compile([node.outputs[0]])
    func.execute()
    func.wait()
    value = node.get_value().numpy().astype("float64")
    axes = [k for k in range(value.ndim)
            if x.shape[k] > 1 and np.allclose(value.sum(axis=k), 1.0, atol=1e-3)]
    return axes[0] if len(axes) == 1 else None


def describe(model: str) -> Dict[str, Any]:
    """The JSON object of ``model``: operators in execution order, vars by id, the outputs."""
    import logging

    logging.getLogger("megengine").setLevel(logging.ERROR)
    # megengine (and numpy) only in the rewrite's own process
    import megengine.core.tensor.megbrain_graph as G
    import megengine.utils.comp_graph_tools as cgt

    with open(model, "rb") as f:  # load_graph(path) leaves the file open
        loaded = G.load_graph(f)
    outs = loaded.output_vars_list
    oprs = cgt.get_oprs_seq(outs, prune_reshape=False)
    records: List[Dict[str, Any]] = []
    vars_: Dict[int, Dict[str, Any]] = {}
    for opr in oprs:
        params = _params(opr)
        probed: Dict[str, str] = {}
        if opr.type == "SoftmaxForward" and isinstance(params, dict) and "axis" not in params:
            axis = probe_softmax_axis(loaded.graph, opr)
            if axis is not None:
                params["axis"] = axis
                probed["axis"] = "the axis whose sums are 1 when MegEngine runs this operator on a random input"
        for v in list(opr.inputs) + list(opr.outputs):
            if v.id not in vars_:
                vars_[v.id] = _var_record(v)
        records.append({"name": opr.name, "type": opr.type, "params": params, "probed": probed,
                        "inputs": [int(v.id) for v in opr.inputs], "outputs": [int(v.id) for v in opr.outputs]})
    return {"schema": SCHEMA, "model": str(model), "operators": records,
            "vars": [vars_[k] for k in sorted(vars_)], "outputs": [int(v.id) for v in outs]}


def main(argv: Optional[Sequence[str]] = None) -> int:
    """``python -m lar_prec.lar.graph_records MODEL OUT.json``."""
    quickimport.import_megengine()  # this child runs MegEngine: import it without megfile and pkg_resources
    args = list(sys.argv[1:] if argv is None else argv)
    if len(args) != 2:
        sys.stderr.write("usage: python -m lar_prec.lar.graph_records MODEL OUT.json\n")
        return 2
    try:
        record = describe(args[0])
    except RuntimeError as exc:  # MegEngine's errors: the first line is the message
        sys.stderr.write(f"graph_records: error: {str(exc).splitlines()[0] if str(exc) else exc!r}\n")
        return 1
    atomic_write_text(Path(args[1]), json_text(record), what="graph record")
    return 0


if __name__ == "__main__":
    sys.exit(main())
