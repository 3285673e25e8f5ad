"""Synthetic ``--bin-io-dump`` folder pairs for the benchmark, written with lar-prec's dump writer format.

A pair is two folders with the same file names, as load_and_run writes them: folder A is the
"reference" run, folder B equals A with float rounding-level noise on clean variables and a
clear difference on a chosen share of divergent ones. Titles are realistic (conv, relu,
elemwise add, typecast, argmax ...; inputs reference earlier var ids so the input relation is a
DAG, like a real network), values are random.

Generation is meant to be disk-bound: values come from a fixed random pool sliced at random
offsets, and each variable is written in chunks, so a 4 GB pair needs only a few tens of MB.

``megengine_compatible`` keeps the dtypes to those MegEngine's ``compare_binary_iodump`` can
load (Float32, Int32, Float16, Uint8, Int8); it raises KeyError on Bool (12) and Uint16 (13)
and aborts the whole comparison (reference/load_and_run.md 6.1), so the timed pair uses only
those. The memory-check pair, which only lar-prec reads, also has Bool and Uint16 variables.
"""
from __future__ import annotations

import json
import math
import shutil
import struct
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Dict, List, Optional, Sequence, Tuple

import numpy as np

from lar_prec.dumps.titles import HEADER_SIZE, VarInfo, contiguous_layout, format_title
from lar_prec.dumps.binary import MAX_NDIM, dump_file_name
from lar_prec.dumps.dtypes import dtype_by_name

_HEADER = struct.Struct("<10I")
assert _HEADER.size == HEADER_SIZE  # the benchmark writes headers itself to stream large vars

COMP_NODE = 'CompNode("cpu0:0" from "cpu0:0")'
#: elements per write chunk (16 MB of float32)
CHUNK = 1 << 22
#: float rounding-level relative noise on clean float32 vars: like naive vs default kernels,
#: low bits differ, so a byte-equality shortcut cannot skip the arithmetic
CLEAN_NOISE = 1e-7
#: relative noise on divergent float vars; far above the 1e-3 threshold the benchmark uses
DIVERGENT_NOISE = 1e-2

# share of the variables (by count) per dtype; the rest are float32
MIXED_DTYPES_MGE: Tuple[Tuple[str, float], ...] = (
    ("Int32", 0.05), ("Float16", 0.06), ("Uint8", 0.04), ("Int8", 0.03),
)
MIXED_DTYPES_ALL: Tuple[Tuple[str, float], ...] = MIXED_DTYPES_MGE + (("Bool", 0.03), ("Uint16", 0.02))


@dataclass(frozen=True)
class PairSpec:
    """What to generate. ``total_bytes`` counts both folders' files (headers and titles too)."""

    total_bytes: int
    n_vars: int = 400
    divergent_share: float = 0.5
    megengine_compatible: bool = True
    #: bytes of the single largest variable (None: sizes follow the random distribution only);
    #: the memory check sets it high so that holding one variable would exceed the budget
    largest_var_bytes: Optional[int] = None
    seed: int = 20261122
    #: how the values are made (a pair kept by --keep from another version is made again):
    #: 2, the model input and the weights are equal on both sides, as in two runs of one graph
    version: int = 2


@dataclass(frozen=True)
class PairInfo:
    """What was generated."""

    dir_a: str
    dir_b: str
    n_vars: int
    n_divergent: int
    bytes_a: int
    bytes_b: int
    largest_var_bytes: int
    dtype_counts: Dict[str, int]
    divergent_ids: Tuple[int, ...]
    seconds: float
    spec: Dict[str, object] = field(default_factory=dict)

    @property
    def total_bytes(self) -> int:
        return self.bytes_a + self.bytes_b


@dataclass
class _Var:
    info: VarInfo
    inputs: Tuple[VarInfo, ...]
    kind: str  # value generator: "act", "relu", "weight", "int", "bool"
    divergent: bool = False


def _shape_for(n: int, rng: np.random.Generator, dtype: str) -> Tuple[int, ...]:
    """A plausible NCHW (or 2-d) shape with about ``n`` elements (at least 256)."""
    n = max(256, int(n))
    if dtype in ("Int32", "Uint16"):
        return (max(1, n // 1000), min(n, 1000)) if n > 1000 else (n,)
    c = int(rng.choice([16, 32, 64, 128, 256, 512]))
    c = min(c, max(1, n // 16))
    hw = max(1, int(math.sqrt(n / c)))
    return (1, c, hw, max(1, n // (c * hw)))


#: (dtype, kind, opr_type, name, owner text with {inputs}, input node indices)
_Node = Tuple[str, str, str, str, str, Tuple[int, ...]]


def _structure(spec: PairSpec, rng: np.random.Generator) -> List[_Node]:
    """The operators in execution order: (dtype, kind, opr_type, name, owner text with {inputs},
    input node indices)."""
    mix = MIXED_DTYPES_MGE if spec.megengine_compatible else MIXED_DTYPES_ALL
    n = max(2, spec.n_vars)
    dtypes = ["Float32"] * n
    # other dtypes spread through the network (not first/last, which are input/output)
    slots = [int(s) for s in rng.permutation(np.arange(2, n - 1))]
    for name, share in mix:
        for _ in range(max(1, round(share * n)) if n >= 20 else 0):
            if slots:
                dtypes[slots.pop()] = name

    # 1. structure: (dtype, kind, opr_type, name, owner text with {inputs}, input node indices)
    nodes: List[_Node] = []
    acts: List[int] = []  # float32 nodes usable as inputs downstream
    for i in range(n):
        if len(nodes) >= n:
            break
        dt = dtypes[i]
        if i == 0:
            nodes.append((dt, "act", "Host2DeviceCopy", "data", "h2d", ()))
            acts.append(0)
            continue
        prev = acts[-1]
        layer = len(acts)
        if dt == "Float32":
            r = rng.random()
            if r < 0.45 and len(nodes) + 2 <= n:
                # a conv: its weight const is dumped too, as ImmutableTensor outputs are
                nodes.append(("Float32", "weight", "ImmutableTensor", f"c{layer}.weight", "const", ()))
                nodes.append((dt, "act", "ConvolutionForward", f"c{layer}.Convolution", "conv", (prev, len(nodes) - 1)))
            elif r < 0.75:
                nodes.append((dt, "relu", "Elemwise", f"relu{layer}", "RELU", (prev,)))
            else:
                skip = acts[int(rng.integers(max(0, len(acts) - 6), len(acts)))]
                nodes.append((dt, "act", "Elemwise", f"add{layer}", "ADD", (prev, skip)))
            acts.append(len(nodes) - 1)
        elif dt == "Int32":
            nodes.append((dt, "int", "Argmax", f"argmax{layer}", "argmax", (prev,)))
        elif dt == "Bool":
            nodes.append((dt, "bool", "Elemwise", f"mask{layer}", "LT", (prev,)))
        else:
            kind = "act" if dt == "Float16" else "int"
            nodes.append((dt, kind, "TypeCvt", f"cvt{layer}.{dt.lower()}", "TypeCvt", (prev,)))
    return nodes


def _sizes(spec: PairSpec, nodes: List[_Node], rng: np.random.Generator
           ) -> Tuple[np.ndarray, Dict[int, Tuple[int, ...]]]:
    """Elements of every node's output, and the shapes of the weights."""
    # 2. sizes: log-normal like real activations (a few big, many small), scaled to the budget;
    # weights stay small and fixed
    m = len(nodes)
    itemsize = np.array([dtype_by_name(nd[0]).storage.itemsize for nd in nodes], dtype=float)  # type: ignore[union-attr]
    weight = np.array([nd[1] == "weight" for nd in nodes])
    w_shapes = {j: (int(rng.choice([16, 32, 64])), int(rng.choice([3, 16, 32])), 3, 3) for j in np.flatnonzero(weight)}
    w_bytes = sum(4 * int(np.prod(s)) for s in w_shapes.values())
    budget = spec.total_bytes / 2 - m * (HEADER_SIZE + 700.0) - w_bytes  # ~700 title bytes per file
    raw = rng.lognormal(mean=0.0, sigma=1.2, size=m)
    raw[weight] = 0.0
    big = None
    if spec.largest_var_bytes:
        cand = [j for j in range(1, m) if nodes[j][0] == "Float32" and not weight[j]]
        big = cand[int(np.argmax(raw[cand]))]
        raw[big] = 0.0
        budget -= spec.largest_var_bytes
    scale = max(budget, 0.0) / float((raw * itemsize).sum() or 1.0)
    elems = raw * scale
    if big is not None:
        elems[big] = spec.largest_var_bytes / 4.0
    return elems, w_shapes


def _plan(spec: PairSpec, rng: np.random.Generator) -> List[_Var]:
    """The variable list in execution order with shapes, dtypes, titles and divergence."""
    nodes = _structure(spec, rng)
    elems, w_shapes = _sizes(spec, nodes, rng)
    # 3. VarInfos (ids: each operator takes one id and its output the next, as in MegEngine)
    out: List[_Var] = []
    for j, (dt, kind, opr_type, name, owner, ins) in enumerate(nodes):
        opr_id, var_id = 2 * j + 1, 2 * j + 2
        shape = w_shapes[j] if kind == "weight" else _shape_for(elems[j], rng, dt)
        inputs = tuple(out[k].info for k in ins)
        if kind == "weight":
            owner_text = "const{" + ",".join(map(str, shape)) + "}"
            infer = (2, 2)
        elif opr_type == "Host2DeviceCopy":
            owner_text, infer = owner, (4, 4)
        else:
            owner_text = f"{owner}({','.join(v.name for v in inputs)})"
            infer = (4, 1)
        info = VarInfo(var_id, name, f"{owner_text}[{opr_id}]", opr_type, opr_id, dt, shape,
                       contiguous_layout(shape, dt), 0, COMP_NODE, "s", *infer)
        out.append(_Var(info, inputs, kind))
    # the model input and the weights are read from files, equal in any two runs of one graph
    # (lar-prec says "different weights" otherwise): noise and faults only in computed vars
    computed = [j for j, v in enumerate(out) if v.kind != "weight" and v.info.opr_type != "Host2DeviceCopy"]
    k = int(round(spec.divergent_share * len(out)))
    for j in rng.choice(computed, size=min(k, len(computed)), replace=False):
        out[int(j)].divergent = True
    return out


class _Pool:
    """Random values sliced at random offsets: cheap, and different enough per chunk."""

    def __init__(self, rng: np.random.Generator) -> None:
        self.rng = rng
        self.values = rng.standard_normal(2 * CHUNK, dtype=np.float32)
        self.noise = rng.standard_normal(2 * CHUNK + 4099, dtype=np.float32)

    def take(self, n: int) -> Tuple[np.ndarray, np.ndarray]:
        o = int(self.rng.integers(0, CHUNK))
        p = int(self.rng.integers(0, CHUNK + 4099))
        return self.values[o:o + n], self.noise[p:p + n]


def _chunk_pair(var: _Var, storage: np.dtype, a32: np.ndarray, z: np.ndarray, first: bool) -> Tuple[np.ndarray, np.ndarray]:
    """Values of one chunk in both folders."""
    dt = var.info.dtype
    if var.kind == "weight" or var.info.opr_type == "Host2DeviceCopy":
        return a32, a32
    if var.kind == "bool":
        a = a32 > 0
        b = a ^ (z > 2.0) if var.divergent else a
        if var.divergent and first:
            b = b.copy()
            b[0] = not a[0]
        return a, b
    if storage.kind in "iu":
        info = np.iinfo(storage)
        hi = min(info.max, 1000)
        lo = max(info.min, -1000)
        a = np.clip(a32 * (hi - lo) / 6 + (hi + lo) / 2, lo, hi).astype(storage)
        if not var.divergent:
            return a, a
        delta = np.where(z > 1.5, 1 + np.abs(a.astype(np.int64)) // 50, 0)
        if first:
            delta[0] = 1 + abs(int(a[0])) // 50
        return a, (a.astype(np.int64) + delta).astype(storage)
    if var.kind == "relu":
        a32 = np.abs(a32)
    if dt == "Float16":
        a = a32.astype(np.float16)
        if not var.divergent:
            return a, a
        b = (a32 * (1 + DIVERGENT_NOISE * z)).astype(np.float16)
        if first:
            b[0] = np.float16(float(a[0]) * 1.05 + 0.05)
        return a, b
    eps = DIVERGENT_NOISE if var.divergent else CLEAN_NOISE
    b = z * np.float32(eps)
    b *= a32
    b += a32
    if var.divergent and first:
        b[0] = a32[0] * np.float32(1.05) + np.float32(0.05)
    return a32, b


def _write_var(var: _Var, path_a: Path, path_b: Path, pool: _Pool) -> int:
    dt = dtype_by_name(var.info.dtype)
    assert dt.storage is not None  # internal: the plan uses byte-addressable dtypes only
    shape = var.info.shape
    size = int(np.prod(shape))
    title = format_title(var.info, var.inputs).encode("utf-8")
    header = _HEADER.pack(len(title), dt.code, MAX_NDIM, *(list(shape) + [0] * (MAX_NDIM - len(shape))))
    with open(path_a, "wb") as fa, open(path_b, "wb") as fb:
        fa.write(header + title)
        fb.write(header + title)
        for start in range(0, size, CHUNK):
            n = min(CHUNK, size - start)
            a32, z = pool.take(n)
            a, b = _chunk_pair(var, dt.storage, a32, z, start == 0)
            fa.write(np.ascontiguousarray(a, dtype=dt.storage).data)
            fb.write(np.ascontiguousarray(b, dtype=dt.storage).data)
    return HEADER_SIZE + len(title) + size * dt.storage.itemsize


def generate_pair(root: Path, spec: PairSpec) -> PairInfo:
    """Write ``root/a`` and ``root/b`` (replacing them) and ``root/pair.json``; return what was written.

    The metadata file sits next to the folders, not inside: MegEngine's script asserts that
    both folders hold exactly the same names and cannot read anything but dumps.
    """
    t0 = time.perf_counter()
    root = Path(root)
    rng = np.random.default_rng(spec.seed)
    plan = _plan(spec, rng)
    dir_a, dir_b = root / "a", root / "b"
    for d in (dir_a, dir_b):
        if d.exists():
            shutil.rmtree(d)
        d.mkdir(parents=True)
    pool = _Pool(rng)
    total = 0
    largest = 0
    counts: Dict[str, int] = {}
    for v in plan:
        name = dump_file_name(v.info.id)
        nbytes = _write_var(v, dir_a / name, dir_b / name, pool)
        total += nbytes
        largest = max(largest, nbytes - HEADER_SIZE)
        counts[v.info.dtype] = counts.get(v.info.dtype, 0) + 1
    info = PairInfo(
        dir_a=str(dir_a), dir_b=str(dir_b), n_vars=len(plan), n_divergent=sum(v.divergent for v in plan),
        bytes_a=total, bytes_b=total, largest_var_bytes=largest, dtype_counts=dict(sorted(counts.items())),
        divergent_ids=tuple(v.info.id for v in plan if v.divergent), seconds=time.perf_counter() - t0,
        spec=asdict(spec),
    )
    meta = asdict(info)
    (root / "pair.json").write_text(json.dumps(meta, indent=1) + "\n")
    return info


def graph_edges(n_vars: int, seed: int = 1) -> List[Tuple[int, Sequence[int]]]:
    """A synthetic network graph of ``n_vars`` variables for rooting benchmarks:
    ``(var id, input ids)`` in execution order, residual-network-like (chains with skips)."""
    rng = np.random.default_rng(seed)
    out: List[Tuple[int, Sequence[int]]] = []
    for i in range(n_vars):
        vid = 2 * i + 2
        if i == 0:
            out.append((vid, ()))
            continue
        ins = [vid - 2]
        if i > 4 and rng.random() < 0.25:
            ins.append(vid - 2 * int(rng.integers(2, 5)))
        out.append((vid, tuple(ins)))
    return out
