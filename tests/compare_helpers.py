"""Helpers shared by test_compare.py, test_vartree.py and test_cli_compare.py.

Two kinds of dump folders: small hand-built graphs written with ``iodump.write_binary_dump``
(for format corners and exact graph shapes), and copies of real dumps with a fault injected
into one var and carried into everything downstream of it.
"""
from __future__ import annotations

import shutil
from pathlib import Path
from typing import Dict, Iterable, List, Optional, Sequence, Set, Tuple

import numpy as np

from lar_prec.dumps.folder import DumpFolder
from lar_prec.graph import reach
from lar_prec.dumps.binary import dump_file_name, read_binary_dump, write_binary_dump
from lar_prec.dumps.titles import VarInfo, contiguous_layout, format_title

CN = 'CompNode("cpu0:0" from "cpu0:0")'

#: cases whose every var is float32 (the auto threshold must stay quiet on naive vs default)
FLOAT32_CASES = ("cnn", "resnet", "mlp", "attention", "multi_input", "fastrun_shake")


def var_info(vid: int, shape: Sequence[int], dtype: str = "Float32", opr_type: str = "Elemwise", name: Optional[str] = None) -> VarInfo:
    """A VarInfo as MegEngine writes it (contiguous layout, cpu0, operator id = var id - 1)."""
    shape = tuple(int(x) for x in shape)
    return VarInfo(
        id=vid,
        name=name if name is not None else f"v{vid}",
        owner=f"opr{vid}[{vid - 1}]",
        opr_type=opr_type,
        opr_id=vid - 1,
        dtype=dtype,
        shape=shape,
        layout=contiguous_layout(shape, dtype) if shape else None,
        slot=0,
        comp_node=CN,
        storage="s",
    )


class GraphDump:
    """Write a hand-built graph into a dump folder: ``add(vid, values, inputs=(...))``."""

    def __init__(self, folder: Path) -> None:
        self.folder = Path(folder)
        self.folder.mkdir(parents=True, exist_ok=True)
        self.infos: Dict[int, VarInfo] = {}

    def add(self, vid: int, values: np.ndarray, inputs: Iterable[int] = (), dtype: Optional[str] = None,
            opr_type: str = "Elemwise", name: Optional[str] = None, shape: Optional[Sequence[int]] = None) -> Path:
        arr = np.asarray(values)
        if dtype is None:
            dtype = {np.dtype(np.float32): "Float32", np.dtype(np.float16): "Float16", np.dtype(np.int32): "Int32",
                     np.dtype(np.bool_): "Bool", np.dtype(np.uint8): "Uint8", np.dtype(np.int8): "Int8"}[arr.dtype]
        shp = tuple(arr.shape) if shape is None else tuple(shape)
        info = var_info(vid, shp, dtype, opr_type, name)
        self.infos[vid] = info
        ins = [self.infos[i] if i in self.infos else var_info(i, (1,)) for i in inputs]
        return write_binary_dump(self.folder / dump_file_name(vid), arr, format_title(info, ins), dtype, shape=shape)


def consumers_map(folder: DumpFolder) -> Dict[int, List[int]]:
    """Var id -> ids of the dumped vars that read it."""
    users: Dict[int, List[int]] = {}
    for v in folder.ids:
        for u in folder.inputs_of(v):
            users.setdefault(u, []).append(v)
    return users


def downstream(folder: DumpFolder, var_id: int, *, through_floats: bool = False) -> Set[int]:
    """``var_id`` and every dumped var that depends on it (``through_floats``: by paths of
    float vars only; a shape or an index read off a var does not change with its values)."""
    users = consumers_map(folder)
    if through_floats:
        users = {v: [w for w in ws if folder[w].dtype.kind == "float"] for v, ws in users.items()}
    return {var_id} | reach(var_id, users)


def inject_fault(src: Path, dst: Path, var_id: int, rel: float, *, only: bool = False) -> Set[int]:
    """Copy dump folder ``src`` to ``dst`` and multiply var ``var_id`` by ``1 + rel``, and
    (unless ``only``) every float var downstream of it through float vars too (a shape read off
    it does not change), nothing recomputed: the fault is
    born at ``var_id`` and carried everywhere it flows. Titles are kept. Returns the ids changed."""
    if dst.exists():
        shutil.rmtree(dst)
    shutil.copytree(src, dst)
    folder = DumpFolder(dst)
    ids = {var_id} if only else downstream(folder, var_id, through_floats=True)
    changed = set()
    for v in ids:
        d = folder[v]
        if d.dtype.kind != "float":
            continue
        x = np.array(d.array(), dtype=np.float32)
        y = (x * np.float32(1 + rel)).astype(d.dtype.storage if d.dtype.name != "BFloat16" else np.float32)
        write_binary_dump(d.path, y, d.title, d.dtype.code)
        changed.add(v)
    return changed


def computed_float_vars(folder: DumpFolder) -> List[int]:
    """Ids of float vars produced by an operator (not inputs or constants) with nonzero values."""
    out = []
    for v in folder.ids:
        d = folder[v]
        if d.dtype.kind != "float" or d.var.opr_type in ("Host2DeviceCopy", "ImmutableTensor"):
            continue
        if float(np.abs(np.asarray(d.array(), dtype=np.float32)).max()) == 0:
            continue
        out.append(v)
    return out


def pick_spread(ids: Sequence[int], k: int = 3) -> Tuple[int, ...]:
    """``k`` ids spread over the list: first, middle(s), last."""
    if len(ids) <= k:
        return tuple(ids)
    idx = sorted({round(i * (len(ids) - 1) / (k - 1)) for i in range(k)})
    return tuple(ids[i] for i in idx)


def copy_dump(src: Path, dst: Path) -> Path:
    """A plain copy of a dump folder."""
    if dst.exists():
        shutil.rmtree(dst)
    shutil.copytree(src, dst)
    return dst


def rewrite_var(folder: Path, var_id: int, values: np.ndarray, dtype: Optional[str] = None) -> None:
    """Replace the values of one var in ``folder`` (same title)."""
    p = folder / dump_file_name(var_id)
    d = read_binary_dump(p)
    write_binary_dump(p, values, d.title, dtype if dtype is not None else d.dtype.code)


def dtype_corners(tmp_path: Path) -> tuple:
    """Two dump folders with every dtype the compare engine's batch reader measures and every
    corner it leaves to the Python engine (NaN/Inf, BFloat16, a big var, shape and dtype
    mismatches, a renamed var, vars on one side only, several chunks, a 0-d scalar)."""
    rng = np.random.default_rng(5)
    a, b = GraphDump(tmp_path / "a"), GraphDump(tmp_path / "b")

    def both_sides(vid, x, y, **kw):
        a.add(vid, x, **kw)
        b.add(vid, y, **kw)

    x = rng.standard_normal(37).astype(np.float32)
    both_sides(1, x, x)                                            # identical float32
    both_sides(2, x, x + np.float32(1e-3), inputs=[1])             # differs
    y = x.copy()
    y[3] = np.nan
    both_sides(3, x, y, inputs=[2])                                # NaN on one side: Python
    z = x.copy()
    z[[0, 5]] = [np.inf, np.nan]
    both_sides(4, z, z.copy(), inputs=[3])                         # the same NaN/Inf: Python
    h = rng.standard_normal(50).astype(np.float16)
    both_sides(5, h, h, inputs=[4])                                # float16 identical
    h2 = h.copy()
    h2[[1, 7]] = -h2[[1, 7]]
    h2[9] = np.float16(0.0) if h[9] != 0 else np.float16(1.0)
    both_sides(6, h, h2, inputs=[5])                               # float16 through zero
    big = np.array([1 << 30, -(1 << 29) - 3, 7, 1 << 25], np.int32)
    both_sides(7, big, big, dtype="Int32")                         # int32 beyond 2**24, identical: Python
    # (its squares' sum rounds in float64, and numpy adds them in another order)
    big2 = big.copy()
    big2[0] += 1
    both_sides(8, big, big2, dtype="Int32", inputs=[7])            # ... differing by one
    both_sides(9, np.array([True, False, True]), np.array([True, True, True]))
    both_sides(10, np.arange(6, dtype=np.uint16), np.arange(6, dtype=np.uint16)[::-1].copy(), dtype="Uint16")
    both_sides(11, np.arange(-3, 3, dtype=np.int16), np.arange(-3, 3, dtype=np.int16), dtype="QuantizedS16")
    both_sides(12, np.arange(8, dtype=np.int8), np.arange(8, dtype=np.int8) + 1, dtype="QuantizedS8")
    both_sides(13, np.arange(8, dtype=np.uint8), np.arange(8, dtype=np.uint8), dtype="Byte")
    both_sides(14, np.arange(4, dtype=np.uint16), np.arange(4, dtype=np.uint16) + 1, dtype="BFloat16")  # Python
    w = rng.standard_normal(300_000).astype(np.float32)                # over MAX_FILE: read a window at a time
    both_sides(15, w, w * np.float32(1.0001))
    both_sides(16, h, h[:25].copy(), inputs=[6])                   # shape differs
    a.add(17, x, inputs=[2])
    b.add(17, x.astype(np.float16), inputs=[2])                    # dtype differs
    a.add(18, x, name="before")
    b.add(18, x, name="after")                                     # renamed: titles differ
    a.add(19, x)                                                   # only in A
    b.add(20, x, inputs=[19])                                      # only in B
    f = rng.standard_normal(100_000).astype(np.float32)
    both_sides(21, f, f + np.float32(1e-4))                        # four chunks of float32
    both_sides(22, np.float32(2.5), np.float32(2.25), shape=())    # a 0-d scalar
    return tmp_path / "a", tmp_path / "b"
