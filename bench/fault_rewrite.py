"""Child of the fault benchmarks: a copy of a model with one constant times (1 + size u),
u ~ U[-1, 1] elementwise from a seeded generator (``--uniform``: times 1 + size).

    PYTHONPATH=. .venv/bin/python bench/fault_rewrite.py MODEL CONST SIZE OUT [--seed N] [--uniform]

A constant with a value in the loaded graph (ImmutableTensor) goes through lar-prec's own
``rewrite_const``. One that optimize_for_inference folded from a constant subgraph and merged
into a MultipleDeviceTensorHolder (swin's relative-position bias, gathered from its table by a
constant index) has no value there (``rewrite_const`` fails: ``TypeError: unsupported operand
type(s) for *: 'NoneType' and 'float'``): its value is computed by running the loaded graph up
to it, then it is replaced by an ImmutableTensor the same way. megengine only in this process.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def _factor(shape, size: float, seed: int, uniform: bool):
    import numpy as np

    if uniform:
        return 1.0 + size
    return 1.0 + size * np.random.RandomState(seed).uniform(-1.0, 1.0, size=shape)


def _rewrite_holder(model: str, const: str, size: float, seed: int, uniform: bool, out: str) -> None:
    """``rewrite_const`` for a constant whose value the loaded graph does not hold."""
    import numpy as np
    import megengine.utils.comp_graph_tools as cgt
    from megengine.core._imperative_rt import make_const, make_h2d
    from megengine.core.tensor import megbrain_graph as G

    with open(model, "rb") as f:
        outs = G.load_graph(f).output_vars_list
    w = cgt.find_vars_by_name(outs, [const])[0]
    node = G.OutputNode(w)
    w.graph.compile([node.outputs[0]]).execute()
    value = node.get_value().numpy()
    new_value = (value * _factor(value.shape, size, seed, uniform)).astype(value.dtype)
    varmap = {w: make_const(w.graph, new_value, w.comp_node, value.dtype, const)}
    for opr in cgt.get_oprs_seq(outs, prune_reshape=False):
        if opr.type == "Host2DeviceCopy":  # as rewrite_const: lite names inputs by the var
            v = opr.outputs[0]
            varmap[v] = make_h2d(v.graph, v.comp_node, v.dtype, v.shape, v.name)
    new_outs = cgt.replace_vars(outs, varmap)
    buf, _ = G.dump_graph({v.name: nv for v, nv in zip(outs, new_outs)}, dump_format="FBS", keep_var_name=2)
    Path(out).write_bytes(buf)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("model")
    ap.add_argument("const")
    ap.add_argument("size", type=float)
    ap.add_argument("out")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--uniform", action="store_true", help="times 1 + size everywhere")
    args = ap.parse_args(argv)
    from lar_prec.lar import quickimport
    from lar_prec.lar.layerwise_build import rewrite_const

    quickimport.import_megengine()
    import megengine.utils.comp_graph_tools as cgt
    from megengine.core.tensor import megbrain_graph as G

    with open(args.model, "rb") as f:
        found = cgt.find_vars_by_name(G.load_graph(f).output_vars_list, [args.const])
    if not found:
        raise SystemExit(f"{args.model} has no var named {args.const!r}")
    if found[0].value is None:
        _rewrite_holder(args.model, args.const, args.size, args.seed, args.uniform, args.out)
    else:
        rewrite_const(args.model, args.const,
                      lambda v: v * _factor(v.shape, args.size, args.seed, args.uniform), args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
