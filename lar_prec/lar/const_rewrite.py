"""A copy of a model with one constant changed: how the tests and benchmarks inject a weight fault.

``python -m lar_prec.lar.const_rewrite --scale MODEL NAME FACTOR OUT`` multiplies constant NAME
by FACTOR; ``--perturb MODEL NAME SIZE SEED OUT`` multiplies each of its elements by
``1 + SIZE u``, ``u ~ U[-1, 1]`` from ``numpy.random.RandomState(SEED)`` (issue 51's fault
protocol: a wrong weight that does not scale a layer as a whole). The fault is in the model, so
its error really propagates through MegEngine. The copy is dumped with ``dump_format="FBS"``
like the layerwise models, so both load their weights aligned. A constant optimize_for_inference
folded and merged into a MultipleDeviceTensorHolder has no value in the loaded graph: its value
is computed by running the graph up to it, and it is replaced by a plain constant.
megengine only in this module's own process.
"""
from __future__ import annotations

import sys
from pathlib import Path
from typing import Any, Callable, Optional, Sequence

from lar_prec.lar import quickimport


def scale_const(model: str, const_name: str, factor: float, out: str) -> None:
    """Write a copy of ``model`` whose constant ``const_name`` is multiplied by ``factor``."""
    rewrite_const(model, const_name, lambda value: value * factor, out)


def perturb_const(model: str, const_name: str, size: float, seed: int, out: str) -> None:
    """Write a copy of ``model`` whose constant ``const_name`` is multiplied element by element by
    ``1 + size u``, ``u ~ U[-1, 1]`` (seeded)."""
    # numpy only in this module's own process
    import numpy as np

    rewrite_const(model, const_name,
                  lambda v: v * (1.0 + size * np.random.RandomState(seed).uniform(-1.0, 1.0, size=v.shape)), out)


def _value(w: Any) -> Any:
    """A constant's values: as the loaded graph holds them, or (merged into a holder, no value
    there) computed by running the graph up to it."""
    # numpy and megengine only in this module's own process
    import numpy as np
    from megengine.core.tensor import megbrain_graph as G

    value = np.asarray(w.value)
    if value.dtype.kind in "fiub":
        return value
    node = G.OutputNode(w)
    w.graph.compile([node.outputs[0]]).execute()
    return node.get_value().numpy()


def rewrite_const(model: str, const_name: str, change: Callable[[Any], Any], out: str) -> None:
    """:func:`scale_const` with any change of the constant's values (a numpy array in, one of
    the same shape out; cast back to its dtype): the stand-in builds of the tests and benchmarks
    also round it (a changed algorithm) or make it NaN."""
    # numpy and megengine only in this module's own process
    import numpy as np
    import megengine.utils.comp_graph_tools as cgt
    from megengine.core._imperative_rt import make_const, make_h2d
    from megengine.core.tensor import megbrain_graph as G

    loaded = G.load_graph(model)
    outs = loaded.output_vars_list
    found = cgt.find_vars_by_name(outs, [const_name])
    if not found:
        raise SystemExit(f"{model} has no var named {const_name!r}")
    w = found[0]
    value = _value(w)
    new = make_const(w.graph, np.asarray(change(value)).astype(value.dtype), w.comp_node, value.dtype, const_name)
    varmap = {w: new}
    for opr in cgt.get_oprs_seq(outs, prune_reshape=False):
        if opr.type == "Host2DeviceCopy":  # lite names inputs by the operator: keep the var's name
            v = opr.outputs[0]
            varmap[v] = make_h2d(v.graph, v.comp_node, v.dtype, v.shape, v.name)
    new_outs = cgt.replace_vars(outs, varmap)
    named = {v.name: nv for v, nv in zip(outs, new_outs)}
    buf, _ = G.dump_graph(named, dump_format="FBS", keep_var_name=2)
    Path(out).write_bytes(buf)


USAGE = ("usage: python -m lar_prec.lar.const_rewrite --scale MODEL NAME FACTOR OUT\n"
         "       python -m lar_prec.lar.const_rewrite --perturb MODEL NAME SIZE SEED OUT\n")


def main(argv: Optional[Sequence[str]] = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    quickimport.import_megengine()  # this child runs MegEngine: import it without megfile and pkg_resources
    try:
        if args[:1] == ["--scale"] and len(args) == 5:
            scale_const(args[1], args[2], float(args[3]), args[4])
        elif args[:1] == ["--perturb"] and len(args) == 6:
            perturb_const(args[1], args[2], float(args[3]), int(args[4]), args[5])
        else:
            sys.stderr.write(USAGE)
            return 2
    except (RuntimeError, ValueError) as exc:  # MegEngine's errors: its first line is the message
        sys.stderr.write(f"const_rewrite: error: {str(exc).splitlines()[0] if str(exc) else exc!r}\n")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
