"""A mixed-precision model: chosen operators in float32, the rest in float16 as fp16 options run them.

``--enable-ioc16`` runs every operator in float16 and ``--enable-io16xc32`` stores in float16
but computes convolutions, matrix products and reductions in float32; neither takes a
per-operator list (MegEngine 1.13's ``ConvertF32ToF16Pass`` converts the whole graph). This
module rewrites a float32 model so that the operators of a :class:`KeepList` run in float32
and every other one as the option would run it:

* every operator is rebuilt in execution order; a float input is converted (``TypeCvt``) to
  the precision of the operator reading it, so conversions appear exactly at the boundaries
  between float32 and float16 operators (named ``<var>.to_f16`` / ``<var>.to_f32``);
* as in MegEngine's pass, a model input read in float16 is converted under its own name,
  constants read in float16 are converted and then folded into float16 constants of the same
  name, outputs are converted back to their float32 dtype under their own name, a ``TypeCvt``
  to float32 becomes one to float16, and ``GetVarShape`` reads its input as it is;
* under ``io16xc32`` the float16 convolutions, matrix products and reductions compute in
  float32 (``compute_mode=FLOAT32``, Reduce ``FLOAT_O16xC32``), as the pass sets them; unlike
  the pass, only where their input is float (the pass also sets it on integer reductions, and
  then ``io16xc32`` fails at load: graph-options.md section 2);
* every operator output keeps its var name, so a dump pairs by name with the plain model's.

With an empty keep-list the rewritten graph computes exactly what ``--enable-ioc16`` /
``--enable-io16xc32`` compute (bit for bit under the naive kernels); with every operator kept
it is the plain model.

How an operator is rebuilt with new inputs: ``cg::replace_vars`` copies an operator whose
inputs are replaced, but it refuses a map where one replaced var depends on another ("opr
output already replaced"), and replacing one input at a time builds intermediate operators
with mixed dtypes that MegDNN rejects. So each input is first swapped for a placeholder of
its own dtype (one call per input, latest producer first: placeholders depend on nothing),
and then all placeholders at once for the new inputs. Operators whose parameters change
(compute mode) are built from their ``OpDef`` instead.

megengine is imported only inside the functions that rewrite; :class:`KeepList` and
:class:`MixedModel` work without it. :mod:`lar_prec.diagnosis.mixed` runs the rewrite in a child
process and measures what is left in float16.
"""
from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Dict, Iterable, List, Mapping, Optional, Sequence, Tuple

from lar_prec.lar import quickimport
from lar_prec.errors import UsageError
from lar_prec.inputspec import read_json_file
from lar_prec.records import PathLike
from lar_prec.lar.graphopts import load_output_vars, rewrite_errors, write_model
from lar_prec.errors import LarPrecError
from lar_prec.outputs import atomic_write_text, json_text

#: the fp16 options a mixed model can follow
MODES = ("ioc16", "io16xc32")
#: schema of a keep-list file and of the rewrite's record
KEEP_SCHEMA = "lar-prec.keep/1"
RECORD_SCHEMA = "lar-prec.mixed-model/1"
#: bytes a keep-list file may have (one name per kept operator: far less)
KEEP_LIMIT = 16 << 20
#: exit status of the child process for a usage error (a rewrite MegEngine refused: 1)
USAGE_EXIT = 2
#: operators that only provide values: they have no precision of their own
SOURCE_TYPES = frozenset({"Host2DeviceCopy", "ImmutableTensor", "SharedDeviceTensor", "VolatileSharedDeviceTensor",
                          "MultipleDeviceTensorHolder", "MultipleDeviceTensorWithFormatHolder"})
#: operators that read only their input's shape: its dtype does not matter
SHAPE_READERS = frozenset({"GetVarShape"})
#: io16xc32: the parameter that makes a float16 operator compute in float32 (ConvertF32ToF16Pass)
F32_COMPUTE = {
    "ConvolutionForward": ("compute_mode", "FLOAT32"),
    "ConvBiasForward": ("compute_mode", "FLOAT32"),
    "ConvolutionBackwardData": ("compute_mode", "FLOAT32"),
    "MatrixMul": ("compute_mode", "FLOAT32"),
    "BatchedMatrixMul": ("compute_mode", "FLOAT32"),
    "Reduce": ("data_type", "FLOAT_O16xC32"),
}


# ============================================================================ keep-list


def _short_type(t: str) -> str:
    return t[: -len("Forward")] if t.endswith("Forward") else t


@dataclass(frozen=True)
class KeepList:
    """The operators to keep in float32: by instance (an output var's name, or the operator's
    name), by var id (of the plain model, as the bundled load_and_run dumps it) and by type
    (MegEngine's, as dump titles show it: ``PoolingForward``, or without ``Forward``)."""

    instances: Tuple[str, ...] = ()
    ids: Tuple[int, ...] = ()
    types: Tuple[str, ...] = ()

    def why(self, opr_type: str, opr_name: str, out_names: Iterable[str], out_ids: Iterable[int]) -> Optional[str]:
        """Why an operator is kept (``"instance NAME"``, ``"id N"``, ``"type T"``), or None."""
        names = set(out_names)
        for n in self.instances:
            if n in names or n == opr_name:
                return f"instance {n}"
        ids = set(out_ids)
        for i in self.ids:
            if i in ids:
                return f"id {i}"
        for t in self.types:
            if t == opr_type or _short_type(t) == _short_type(opr_type):
                return f"type {t}"
        return None

    def entries(self) -> List[str]:
        return [f"instance {n}" for n in self.instances] + [f"id {i}" for i in self.ids] + [f"type {t}" for t in self.types]

    def to_json(self) -> Dict[str, Any]:
        return {"schema": KEEP_SCHEMA, "float32": {"instances": list(self.instances), "ids": list(self.ids),
                                                    "types": list(self.types)}}

    @classmethod
    def from_json(cls, data: Any, where: str = "keep-list") -> "KeepList":
        """Read :meth:`to_json`'s object; raises UsageError naming ``where`` on anything else."""
        if not isinstance(data, dict) or data.get("schema") != KEEP_SCHEMA or not isinstance(data.get("float32"), dict):
            raise UsageError(f"{where}: expected a keep-list object with schema {KEEP_SCHEMA} and a 'float32' object")
        f32 = data["float32"]
        inst, ids, types = f32.get("instances", []), f32.get("ids", []), f32.get("types", [])
        if not (isinstance(inst, list) and all(isinstance(x, str) for x in inst)):
            raise UsageError(f"{where}: float32.instances must be a list of var or operator names")
        if not (isinstance(ids, list) and all(isinstance(x, int) and not isinstance(x, bool) for x in ids)):
            raise UsageError(f"{where}: float32.ids must be a list of var ids (integers)")
        if not (isinstance(types, list) and all(isinstance(x, str) for x in types)):
            raise UsageError(f"{where}: float32.types must be a list of operator types")
        return cls(tuple(inst), tuple(ids), tuple(types))


# ============================================================================ the rewrite (MegEngine)


@dataclass(frozen=True)
class MixedModel:
    """A model written by :func:`rewrite_mixed`: the operators kept in float32 (output var
    name, why), the float operators run in float16, and the boundary conversions added
    between them (model inputs, outputs and constants not counted)."""

    path: Path
    sha256: str
    mode: str
    kept: Tuple[Tuple[str, str], ...]
    float16: Tuple[str, ...]
    conversions: Tuple[str, ...]

    def to_json(self) -> Dict[str, Any]:
        return {"schema": RECORD_SCHEMA, "path": str(self.path), "sha256": self.sha256, "mode": self.mode,
                "kept": [{"name": n, "why": w} for n, w in self.kept], "float16": list(self.float16),
                "conversions": list(self.conversions)}

    @classmethod
    def from_json(cls, data: Any, where: str) -> "MixedModel":
        try:
            if data["schema"] != RECORD_SCHEMA:
                raise ValueError(f"schema {data['schema']!r}")
            return cls(Path(data["path"]), str(data["sha256"]), str(data["mode"]),
                       tuple((str(k["name"]), str(k["why"])) for k in data["kept"]),
                       tuple(str(n) for n in data["float16"]), tuple(str(n) for n in data["conversions"]))
        except (KeyError, TypeError, ValueError) as exc:
            raise UsageError(f"{where}: expected a mixed-model record ({RECORD_SCHEMA}): {exc}") from None


def _is_float(var: Any) -> Optional[str]:
    """'float32' / 'float16' for a float var, else None (quantized and integer vars)."""
    # megengine (and numpy) only in the rewrite's own process
    import numpy as np

    try:
        name = np.dtype(var.dtype).name
    except TypeError:
        return None
    if name in ("float32", "float16") and not getattr(var.dtype, "metadata", None):
        return name
    return None


class _Rebuilder:
    """The rewrite's state: the new var of every original var, and the conversions made."""

    def __init__(self, oprs: Sequence[Any], keep: KeepList, mode: str) -> None:
        self.keep, self.mode = keep, mode
        self.order = {v.id: k for k, o in enumerate(oprs) for v in o.outputs}
        self.cur: Dict[int, Any] = {}
        self.cvt: Dict[Tuple[int, str], Any] = {}
        self.boundaries: List[str] = []
        self.kept: List[Tuple[str, str]] = []
        self.float16: List[str] = []

    def convert(self, orig: Any, new: Any, want: str) -> Any:
        """``new`` (the rebuilt ``orig``) as ``want``: one TypeCvt per var and dtype."""
        # megengine (and numpy) only in the rewrite's own process
        import numpy as np
        import megengine.core.tensor.megbrain_graph as G
        from megengine.core.ops.builtin import TypeCvt

        key = (new.id, want)
        if key not in self.cvt:
            c = G.apply_normal_varnode(TypeCvt(dtype=np.dtype(want)), new)[0]
            if orig.owner.type in SOURCE_TYPES:
                c.name = orig.name  # as the pass names them; constants fold under their own name
            else:
                c.name = f"{orig.name}.to_{'f16' if want == 'float16' else 'f32'}"
                self.boundaries.append(c.name)
            self.cvt[key] = c
        return self.cvt[key]

    def copy(self, opr: Any, new_inputs: Mapping[int, Any]) -> List[Any]:
        """``opr`` copied onto ``new_inputs`` (original input id -> new var): placeholders first."""
        # megengine (and numpy) only in the rewrite's own process
        import megengine.utils.comp_graph_tools as cgt
        from megengine.core._imperative_rt import make_h2d

        outs = list(opr.outputs)
        distinct: Dict[int, Any] = {}
        for v in opr.inputs:
            distinct.setdefault(v.id, v)
        holders: Dict[int, Any] = {}
        # latest producer first: no placeholder's var is an ancestor of one still to swap
        for v in sorted(distinct.values(), key=lambda v: -self.order.get(v.id, -1)):
            holders[v.id] = make_h2d(v.graph, v.comp_node, v.dtype, v.shape, f"placeholder{v.id}")
            outs = cgt.replace_vars(outs, {v: holders[v.id]})
        return cgt.replace_vars(outs, {holders[k]: new_inputs[k] for k in distinct})

    def from_opdef(self, opr: Any, key: str, value: str, inputs: Sequence[Any]) -> List[Any]:
        """``opr`` made anew from its OpDef with one parameter changed (float16 output)."""
        # megengine (and numpy) only in the rewrite's own process
        import megengine.core.tensor.megbrain_graph as G
        import numpy as np
        from megengine.utils.network_node import str_to_mge_class

        node = str_to_mge_class(opr.type).load(opr)
        params = dict(node.params)
        params[key] = value
        if "dtype" in params:  # ConvBias, deconvolution: their output dtype is a parameter
            params["dtype"] = np.dtype("float16")
        return list(G.apply_normal_varnode(node.opdef(**params), *inputs))

    def rebuild(self, opr: Any) -> None:
        # megengine (and numpy) only in the rewrite's own process
        import numpy as np
        import megengine.core.tensor.megbrain_graph as G
        from megengine.core.ops.builtin import TypeCvt

        if opr.type in SOURCE_TYPES:
            for v in opr.outputs:
                self.cur[v.id] = v
            return
        why = self.keep.why(opr.type, opr.name, (v.name for v in opr.outputs), (v.id for v in opr.outputs))
        want = "float32" if why else "float16"
        new_in: Dict[int, Any] = {}
        for v in opr.inputs:
            nv = self.cur.get(v.id, v)
            have = _is_float(nv)
            if have and have != want and opr.type not in SHAPE_READERS:
                nv = self.convert(v, nv, want)
            new_in[v.id] = nv
        floats = any(_is_float(v) for v in list(opr.inputs) + list(opr.outputs))
        if floats and opr.type not in SHAPE_READERS:
            if why:
                self.kept.append((opr.outputs[0].name, why))
            else:
                self.float16.append(opr.outputs[0].name)
        args = [new_in[v.id] for v in opr.inputs]
        if want == "float16" and opr.type == "TypeCvt" and _is_float(opr.outputs[0]) == "float32":
            new = [G.apply_normal_varnode(TypeCvt(dtype=np.dtype("float16")), args[0])[0]]
        elif (want == "float16" and self.mode == "io16xc32" and opr.type in F32_COMPUTE
              and any(_is_float(a) == "float16" for a in args)):
            new = self.from_opdef(opr, *F32_COMPUTE[opr.type], args)
        elif all(new_in[v.id].id == v.id for v in opr.inputs):  # nothing to convert upstream or here
            new = list(opr.outputs)
        else:
            new = self.copy(opr, new_in)
        for o, n in zip(opr.outputs, new):
            n.name = o.name
            self.cur[o.id] = n


def _unmatched(oprs: Sequence[Any], keep: KeepList) -> List[str]:
    """Keep-list entries that name no operator of the model."""
    out = []
    for entry in keep.entries():
        kind, _, value = entry.partition(" ")
        one = KeepList(**{{"instance": "instances", "id": "ids", "type": "types"}[kind]:
                          (int(value) if kind == "id" else value,)})
        if not any(one.why(o.type, o.name, (v.name for v in o.outputs), (v.id for v in o.outputs))
                   for o in oprs if o.type not in SOURCE_TYPES):
            out.append(entry)
    return out


def rewrite_mixed(model: PathLike, out: PathLike, keep: KeepList, mode: str = "ioc16") -> MixedModel:
    """Write ``model`` with the operators of ``keep`` in float32 and the rest in float16 as
    ``mode`` (``ioc16`` or ``io16xc32``) runs them, to ``out`` (replaced atomically).

    Raises:
        UsageError: no such model, an unknown mode, or a keep-list entry naming no operator.
        RewriteError: MegEngine refused the rewrite (its first line is the message).
    """

    src, dst = Path(model), Path(out)
    if mode not in MODES:
        raise UsageError(f"mode {mode!r}: expected one of {', '.join(MODES)}")
    # megengine (and numpy) only in the rewrite's own process
    import megengine.core.tensor.megbrain_graph as G
    import megengine.utils.comp_graph_tools as cgt
    from megengine.core.ops.builtin import TypeCvt
    import numpy as np

    with rewrite_errors(f"cannot rewrite {src} to mixed precision ({mode})"):
        outs = load_output_vars(src)
        oprs = cgt.get_oprs_seq(outs, prune_reshape=False)
        missing = _unmatched(oprs, keep)
        if missing:
            raise UsageError(f"{src}: the keep-list names no operator of this model: {', '.join(missing)}")
        rb = _Rebuilder(oprs, keep, mode)
        for opr in oprs:
            rb.rebuild(opr)
        final = []
        for o in outs:
            n = rb.cur[o.id]
            if _is_float(n) and _is_float(o) and _is_float(n) != _is_float(o):
                n = G.apply_normal_varnode(TypeCvt(dtype=np.dtype(o.dtype)), n)[0]
            n.name = o.name
            final.append(n)
        for v in cgt.get_dep_vars(final, "Host2DeviceCopy"):
            v.owner.name = v.name  # lite names inputs by their operator (graph-options.md section 1)
        # folds the float16 conversions of constants into float16 constants, as under ioc16
        final, _ = G.optimize_for_inference(final, enable_fuse_grain=False)
        G.set_priority_to_id([getattr(v, "_node", v) for v in final])
        buf, _ = G.dump_graph(final, keep_var_name=2, keep_param_name=True)
    sha = write_model(dst, buf, "the mixed-precision model")
    return MixedModel(dst, sha, mode, tuple(rb.kept), tuple(rb.float16), tuple(rb.boundaries))


# ============================================================================ in a child process


def main(argv: Optional[Sequence[str]] = None) -> int:
    """``python -m lar_prec.lar.mixed_rewrite MODEL OUT --keep KEEP.json [--mode M] [--record R.json]``."""

    quickimport.import_megengine()  # this child runs MegEngine: import it without megfile and pkg_resources
    args = list(sys.argv[1:] if argv is None else argv)
    usage = "usage: python -m lar_prec.lar.mixed_rewrite MODEL OUT --keep KEEP.json [--mode ioc16|io16xc32] [--record R.json]\n"
    opts: Dict[str, str] = {"--mode": "ioc16"}
    pos: List[str] = []
    while args:
        a = args.pop(0)
        if a in ("--keep", "--mode", "--record"):
            if not args:
                sys.stderr.write(usage)
                return 2
            opts[a] = args.pop(0)
        else:
            pos.append(a)
    if len(pos) != 2 or "--keep" not in opts:
        sys.stderr.write(usage)
        return 2
    try:
        keep = KeepList.from_json(read_json_file(opts["--keep"], "keep-list", limit=KEEP_LIMIT), opts["--keep"])
        done = rewrite_mixed(pos[0], pos[1], keep, opts["--mode"])
        if "--record" in opts:
            atomic_write_text(opts["--record"], json_text(done.to_json()), what="mixed-model record")
    except LarPrecError as exc:
        sys.stderr.write(f"mixed_rewrite: error: {exc}\n")
        return USAGE_EXIT if isinstance(exc, UsageError) else 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
