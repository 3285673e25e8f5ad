"""MegEngine's fast-run algorithm cache (``--fast-run-algo-policy FILE``): which algorithm
each operator ran.

Under ``--fast-run`` MegEngine profiles every algorithm of an operator and keeps the results
in this cache, fastest first; a run reading the cache takes the first one its constraints
allow (``--reproducible``: the first reproducible one). Local error needs to know it: a
Winograd convolution rounds several times more than a direct one on the same inputs, so its
noise floor must be wider (:mod:`lar_prec.diagnosis.floors`), or fast-run's choice reads as a fault.

The format (MegEngine ``InFilePersistentCache``, checked on 1.13 files), all integers
little-endian uint32::

    ncategories, then per category: blob(name), nentries, then per entry: blob(key), blob(value)
    blob = length + bytes
    key   = "N,C,H,W;Float32|...|" per layout (inputs then outputs), then the param's bytes
    value = nresults, then per result: blob(algo desc: handle, type, ?, blob(name)),
            blob(":attribute;seconds;workspace:\\0")

Nothing here imports numpy or megengine.
"""
from __future__ import annotations

import itertools
import re
import struct
from dataclasses import dataclass, field
from pathlib import Path
from typing import Dict, Iterable, List, Optional, Sequence, Tuple

from lar_prec.errors import UsageError
from lar_prec.records import PathLike

#: AlgoAttribute::REPRODUCIBLE in MegDNN
REPRODUCIBLE = 1


@dataclass(frozen=True)
class ProfiledAlgo:
    """One profiled algorithm of one operator: its name, attribute bits, time and workspace."""

    name: str
    attribute: int
    seconds: Optional[float]
    workspace: Optional[int]
    #: its two records as in the file (what :func:`prefer_algorithms` writes back)
    raw: bytes = field(default=b"", repr=False)


@dataclass(frozen=True)
class CacheEntry:
    """One operator configuration of the cache: its category (``...ConvolutionForward...``),
    its layouts (shapes, inputs then outputs) and its algorithms, fastest first."""

    category: str
    shapes: Tuple[Tuple[int, ...], ...]
    key: bytes
    results: Tuple[ProfiledAlgo, ...]
    #: the category's bytes as in the file
    raw_category: bytes = field(default=b"", repr=False)

    def chosen(self, reproducible: bool = False) -> Optional[ProfiledAlgo]:
        """The algorithm a run reading the cache takes (None: none allowed)."""
        for r in self.results:
            if not reproducible or r.attribute & REPRODUCIBLE:
                return r
        return None


class _Reader:
    def __init__(self, data: bytes, path: Path) -> None:
        self.data, self.pos, self.path = data, 0, path

    def u32(self) -> int:
        if self.pos + 4 > len(self.data):
            raise UsageError(f"{self.path}: cut at byte {self.pos} (expected a MegEngine fast-run algorithm cache)")
        v = struct.unpack_from("<I", self.data, self.pos)[0]
        self.pos += 4
        return v

    def blob(self) -> bytes:
        n = self.u32()
        if self.pos + n > len(self.data):
            raise UsageError(f"{self.path}: a {n}-byte record at byte {self.pos - 4} runs past the end "
                             "(expected a MegEngine fast-run algorithm cache)")
        b = self.data[self.pos:self.pos + n]
        self.pos += n
        return b


_LAYOUT = re.compile(rb"([0-9,]*);([A-Za-z0-9]+)\|")


def _shapes(key: bytes) -> Tuple[Tuple[int, ...], ...]:
    out = []
    for m in _LAYOUT.finditer(key):
        dims = m.group(1).decode()
        out.append(tuple(int(d) for d in dims.split(",") if d))
    return tuple(out)


def _results(value: bytes, path: Path) -> Tuple[ProfiledAlgo, ...]:
    r = _Reader(value, path)
    out = []
    for _ in range(r.u32()):
        start = r.pos
        desc = _Reader(r.blob(), path)
        desc.u32(), desc.u32(), desc.u32()  # handle type, algo type, (unused)
        name = desc.blob().decode("utf-8", "replace")
        info = r.blob().rstrip(b"\0").decode("utf-8", "replace").strip(":").split(";")
        try:
            attr = int(info[0])
        except (ValueError, IndexError):
            attr = 0
        secs = _float(info[1]) if len(info) > 1 else None
        work = int(info[2]) if len(info) > 2 and info[2].isdigit() else None
        out.append(ProfiledAlgo(name, attr, secs, work, value[start:r.pos]))
    return tuple(out)


def _float(s: str) -> Optional[float]:
    try:
        return float(s)
    except ValueError:
        return None


def read_algo_cache(path: PathLike) -> Tuple[CacheEntry, ...]:
    """Every profiled operator configuration of the cache file ``path``.

    Raises:
        UsageError: the file is missing, cut, or not such a cache (the message names it).
    """
    p = Path(path)
    try:
        data = p.read_bytes()
    except OSError as exc:
        raise UsageError(f"{p}: cannot read the fast-run algorithm cache ({exc.strerror or exc})") from None
    r = _Reader(data, p)
    out: List[CacheEntry] = []
    try:
        for _ in range(r.u32()):
            raw_category = r.blob()
            category = raw_category.decode("utf-8", "replace")
            for _ in range(r.u32()):
                key, value = r.blob(), r.blob()
                out.append(CacheEntry(category, _shapes(key), key, _results(value, p), raw_category))
    except UnicodeDecodeError:
        raise UsageError(f"{p}: not a MegEngine fast-run algorithm cache") from None
    if r.pos != len(data):
        raise UsageError(f"{p}: {len(data) - r.pos} bytes after the last record "
                         "(expected a MegEngine fast-run algorithm cache)")
    return tuple(out)


def _u32(n: int) -> bytes:
    return struct.pack("<I", n)


def _blob(b: bytes) -> bytes:
    return _u32(len(b)) + b


def prefer_algorithms(src: PathLike, dst: PathLike, word: str) -> Path:
    """Write a copy of the cache ``src`` to ``dst`` where, for every operator, the algorithms
    whose name contains ``word`` come first (the others keep their order): a run reading it
    takes that algorithm wherever the operator has one, e.g. ``"WINOGRAD"`` or ``":4:6:"``
    (Winograd F(6, 3)). For measuring what an algorithm family does to precision.

    Raises:
        UsageError: ``src`` is not such a cache.
    """
    out = bytearray()
    # entries of one category are consecutive in the file: write them back in its order
    groups = [list(g) for _, g in itertools.groupby(read_algo_cache(src), key=lambda e: e.raw_category)]
    out += _u32(len(groups))
    for group in groups:
        out += _blob(group[0].raw_category) + _u32(len(group))
        for e in group:
            results = sorted(e.results, key=lambda r: word not in r.name)  # stable
            out += _blob(e.key) + _blob(_u32(len(results)) + b"".join(r.raw for r in results))
    Path(dst).write_bytes(bytes(out))
    return Path(dst)


def _nonempty(shapes: Iterable[Sequence[int]]) -> Tuple[Tuple[int, ...], ...]:
    return tuple(tuple(s) for s in shapes if len(s) and all(d > 0 for d in s))


def chosen_algorithms(entries: Sequence[CacheEntry], operators: Iterable[Tuple[int, str, Sequence[Sequence[int]],
                                                                          Sequence[int]]],
                      *, reproducible: bool = False) -> Dict[int, Tuple[str, ...]]:
    """Var id -> the algorithms the cache gives its operator, for each ``(id, opr_type,
    input_shapes, output_shape)``. Matched by operator type and layouts; several entries with
    the same layouts (different params) give every candidate (callers take the worst)."""
    by_shapes: Dict[Tuple[str, Tuple[Tuple[int, ...], ...]], List[str]] = {}
    for e in entries:
        c = e.chosen(reproducible)
        if c is not None:
            by_shapes.setdefault((_category_op(e.category), _nonempty(e.shapes)), []).append(c.name)
    out: Dict[int, Tuple[str, ...]] = {}
    for vid, opr_type, ins, shape in operators:
        names = by_shapes.get((opr_type, _nonempty(list(ins) + [shape])))
        if names:
            out[vid] = tuple(sorted(set(names)))
    return out


def _category_op(category: str) -> str:
    """``profile:plat=cpu:ConvolutionForwardv5F0`` -> ``ConvolutionForward``."""
    tail = category.rsplit(":", 1)[-1]
    return re.sub(r"v\d+F\d+$", "", tail)


#: the operator type of a cache category (public name)
category_op = _category_op


def winograd_tile(name: str) -> Optional[int]:
    """The output tile m of a Winograd algorithm F(m, r) from its name (None: not Winograd).

    ``CONVOLUTION_DEFAULT_WINOGRAD:FB_GI_F32_MK4_4x8:4:6:32:3`` is F(6, 3): the fields after
    the matmul are pack size, m, tile count, r.
    """
    if "WINOGRAD" not in name.upper():
        return None
    fields = name.split(":")
    try:
        return int(fields[-3])
    except (ValueError, IndexError):
        return 8  # an unknown spelling: assume a large tile (a wider floor, not a false alarm)


__all__ = ["ProfiledAlgo", "CacheEntry", "read_algo_cache", "chosen_algorithms", "prefer_algorithms", "winograd_tile", "category_op",
           "REPRODUCIBLE"]
