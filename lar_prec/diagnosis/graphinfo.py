"""A model's operators and vars as typed records, read from :mod:`lar_prec.lar.graph_records`.

The record is written by a child process that has MegEngine (:func:`describe_model`); this
module reads it with the standard library alone, so the oracle, the quantization analysis and
the mixed-precision fractions work on plain data. Anything read here is data: names and
parameters are never executed or passed to a command line.
"""
from __future__ import annotations

import math
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Dict, Iterator, List, Mapping, Optional, Tuple

from lar_prec.errors import UsageError
from lar_prec.records import PathLike
from lar_prec.diagnosis.local import child_env, run_child
from lar_prec.inputspec import read_json_file

SCHEMA = "lar-prec.graph/1"
#: operators that only provide values (model inputs, stored tensors): nothing to compute
SOURCE_TYPES = frozenset({"Host2DeviceCopy", "ImmutableTensor", "SharedDeviceTensor", "VolatileSharedDeviceTensor",
                          "MultipleDeviceTensorHolder", "MultipleDeviceTensorWithFormatHolder"})
#: operators whose MACs are counted (multiply-accumulates of convolutions and matrix products)
MAC_TYPES = frozenset({"ConvolutionForward", "ConvBiasForward", "ConvolutionBackwardData", "MatrixMul",
                       "BatchedMatrixMul"})


@dataclass(frozen=True)
class GraphVar:
    """One var: id (the dump's id under the bundled load_and_run), name, MegDNN dtype name,
    shape, and for quantized dtypes its scale (and zero point when asymmetric)."""

    id: int
    name: str
    dtype: str
    shape: Optional[Tuple[int, ...]]
    scale: Optional[float] = None
    zero_point: Optional[int] = None

    @property
    def is_quantized(self) -> bool:
        return self.dtype.startswith("Quantized")

    @property
    def is_float(self) -> bool:
        return self.dtype in ("Float32", "Float16", "BFloat16")


@dataclass(frozen=True)
class GraphOpr:
    """One operator in execution order: ``index``, name, MegEngine type, its parameters as
    MegEngine writes them (a dict, a list for Subtensor-like indexing, None when unreadable),
    the parameters that were probed (name -> how), and input/output var ids."""

    index: int
    name: str
    type: str
    params: Any
    inputs: Tuple[int, ...]
    outputs: Tuple[int, ...]
    probed: Mapping[str, str] = field(default_factory=dict)

    @property
    def is_source(self) -> bool:
        return self.type in SOURCE_TYPES

    def param(self, key: str, default: Any = None) -> Any:
        return self.params.get(key, default) if isinstance(self.params, dict) else default


@dataclass(frozen=True)
class GraphInfo:
    """Every operator and var of one model."""

    model: str
    operators: Tuple[GraphOpr, ...]
    vars: Mapping[int, GraphVar]
    outputs: Tuple[int, ...]

    def var(self, var_id: int) -> GraphVar:
        return self.vars[var_id]

    def producer(self, var_id: int) -> Optional[GraphOpr]:
        """The operator computing ``var_id`` (None for a var no operator of the record makes)."""
        return self._producers().get(var_id)

    def _producers(self) -> Dict[int, GraphOpr]:
        cache = self.__dict__.get("_prod")
        if cache is None:
            cache = {v: o for o in self.operators for v in o.outputs}
            object.__setattr__(self, "_prod", cache)
        return cache

    def computing(self) -> Iterator[GraphOpr]:
        """Operators that compute (not model inputs, not stored tensors)."""
        return (o for o in self.operators if not o.is_source)

    def by_output_name(self) -> Dict[str, GraphOpr]:
        """Output var name -> operator (the last producer when a name repeats)."""
        out: Dict[str, GraphOpr] = {}
        for o in self.operators:
            for v in o.outputs:
                out[self.vars[v].name] = o
        return out


def macs(g: GraphInfo, opr: GraphOpr) -> int:
    """Multiply-accumulates of one convolution or matrix product (0 for other operators):
    output elements x the products each one sums."""
    if opr.type not in MAC_TYPES or len(opr.inputs) < 2:
        return 0
    out = g.vars[opr.outputs[0]].shape
    a, b = g.vars[opr.inputs[0]].shape, g.vars[opr.inputs[1]].shape
    if not out or not a or not b:
        return 0
    n_out = math.prod(out)
    if opr.type in ("ConvolutionForward", "ConvBiasForward"):
        # filter (OC, IC, KH, KW) or (G, OCg, ICg, KH, KW): elements per output channel
        channels = out[1] if opr.param("format", "NCHW") == "NCHW" else out[-1]
        return n_out * (math.prod(b) // max(channels, 1))
    if opr.type == "ConvolutionBackwardData":
        # inputs (filter, diff): every diff element meets the filter slice of its channel
        return math.prod(b) * (math.prod(a) // max(b[1], 1))
    k = a[-2] if opr.param("transposeA", False) else a[-1]
    return n_out * k


def read_graph_info(path: PathLike) -> GraphInfo:
    """Read a record written by ``python -m lar_prec.lar.graph_records``.

    Raises:
        UsageError: the file is missing or is not such a record.
    """
    p = Path(path)
    data = read_json_file(p, f"graph record ({SCHEMA})")
    if not isinstance(data, dict) or data.get("schema") != SCHEMA:
        raise UsageError(f"{p}: expected a graph record with schema {SCHEMA}")
    try:
        vars_ = {int(v["id"]): GraphVar(int(v["id"]), str(v["name"]), str(v["dtype"]),
                                        tuple(int(d) for d in v["shape"]) if v["shape"] is not None else None,
                                        float(v["scale"]) if v["scale"] is not None else None,
                                        int(v["zero_point"]) if v["zero_point"] is not None else None)
                 for v in data["vars"]}
        oprs = tuple(GraphOpr(k, str(o["name"]), str(o["type"]), o["params"], tuple(int(i) for i in o["inputs"]),
                              tuple(int(i) for i in o["outputs"]), {str(a): str(b) for a, b in o["probed"].items()})
                     for k, o in enumerate(data["operators"]))
        outputs = tuple(int(i) for i in data["outputs"])
    except (KeyError, TypeError, ValueError, AttributeError) as exc:
        raise UsageError(f"{p}: malformed graph record ({type(exc).__name__}: {exc})") from None
    missing = [i for o in oprs for i in o.inputs + o.outputs if i not in vars_]
    if missing:
        raise UsageError(f"{p}: malformed graph record (operators name var {missing[0]}, which is not listed)")
    return GraphInfo(str(data.get("model", "")), oprs, vars_, outputs)


def describe_model(model: PathLike, out_json: PathLike, *, timeout: Optional[float] = 600.0) -> GraphInfo:
    """Write ``out_json`` for ``model`` in a child process (MegEngine) and read it.

    Raises:
        UsageError: the model does not exist; RunError/RunTimeout: MegEngine failed on it.
    """

    model, out = Path(model), Path(out_json)
    if not model.is_file():
        raise UsageError(f"model file {model} does not exist (expected a MegEngine .mge model)")
    argv: List[str] = [sys.executable, "-m", "lar_prec.lar.graph_records", str(model), str(out)]
    run_child(argv, child_env(), timeout, f"reading the graph of {model}", out.parent / (out.name + ".log"))
    return read_graph_info(out)
