"""The records of a comparison: one :class:`VarDiff` per var and the :class:`Comparison` of two
folders. Built fast (tens of thousands of vars): :func:`new_diff` and :func:`with_changes` fill a
frozen record's dict without re-running its generated ``__init__``."""
from __future__ import annotations

import operator
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Dict, Iterable, Iterator, Optional, Tuple

from lar_prec.compare.engine.workers import DEFAULT_CHUNK
from lar_prec.compare.threshold import SCALE_FLOOR, Threshold
from lar_prec.records import VarKey, frozen_record

#: an index output (TopK, ArgSort, ...) whose indices differ but index values that agree
#: (lar_prec/compare/indices.py): no divergence
INDEX_EQUIVALENT = "index_equivalent"
#: var statuses, in the order reports list them (design.md; index_equivalent: issue 40)
STATUSES = ("ok", INDEX_EQUIVALENT, "divergent", "nonfinite", "shape_mismatch", "dtype_mismatch", "missing")
#: statuses that come from the values (the others come from headers or file presence)
VALUE_STATUSES = ("ok", INDEX_EQUIVALENT, "divergent", "nonfinite")
#: statuses that are no divergence (exit code 0): the values agree, or what indices index does
AGREEING = frozenset(("ok", INDEX_EQUIVALENT))


_STATUS = operator.attrgetter("status")


def count_statuses(records: Iterable[Any]) -> Dict[str, int]:
    """Records (anything with ``status``) per status: every one of :data:`STATUSES`, zeros
    included, in that order."""
    out = {s: 0 for s in STATUSES}
    out.update(Counter(map(_STATUS, records)))  # counted in C (tens of thousands of records)
    return out

@dataclass(frozen=True)
class VarDiff(VarKey):
    """The comparison of one var between folder A and folder B.

    Metrics are None when they do not apply (missing var, shape mismatch, undecodable
    dtype, or no position finite on both sides); :mod:`lar_prec.compare.metrics` defines each.
    ``worst_index`` is the index (in the var's shape) of the element with the largest
    ``max_err``; ``worst_a``/``worst_b`` its values. ``threshold`` is the threshold this var
    was held to and ``n_over`` the number of its elements above it. ``inputs`` are the var
    ids of its owner operator's inputs.
    """

    max_err: Optional[float] = None
    max_abs_err: Optional[float] = None
    max_rel_err: Optional[float] = None
    mean_abs_err: Optional[float] = None
    rmse: Optional[float] = None
    cosine: Optional[float] = None
    max_ulp: Optional[int] = None
    n_over: Optional[int] = None
    worst_index: Optional[Tuple[int, ...]] = None
    worst_a: Optional[float] = None
    worst_b: Optional[float] = None
    scale_unknown: bool = False
    note: str = ""
    #: number of elements
    size: int = 0
    #: largest |value| on either side (finite positions), what the auto threshold scales by
    scale: Optional[float] = None
    #: elements that differ at all (exact types and bitwise checks); None when not counted
    n_diff: Optional[int] = None
    #: positions that are NaN/Inf on one side only (or NaN vs Inf, +Inf vs -Inf)
    n_nonfinite: int = 0
    #: the threshold this var was held to (None: not decided by a threshold)
    threshold: Optional[float] = None
    #: dtype / shape in B when they differ from A's (``dtype``/``shape`` are A's)
    dtype_b: Optional[str] = None
    shape_b: Optional[Tuple[int, ...]] = None
    #: for ``missing``: "a" or "b", the only folder that has the var
    only_in: Optional[str] = None
    #: position in the comparison's execution order
    index: int = 0
    #: float vars' error statistics (lar_prec/compare/engine/hist.py): quantiles p50, p90, p99
    #: and p99.9 of MegEngine's error (max_err's metric), each at most 6.25% above the exact
    #: one; of the relative and the absolute error apart only when asked (compare --stats)
    err_p50: Optional[float] = None
    err_p90: Optional[float] = None
    err_p99: Optional[float] = None
    err_p999: Optional[float] = None
    #: the smallest threshold at which the var passes: max_err, or with a pass ratio R < 1 the
    #: R-quantile of its error (as the quantiles, at most 6.25% above)
    pass_threshold: Optional[float] = None
    rel_err_p50: Optional[float] = None
    rel_err_p90: Optional[float] = None
    rel_err_p99: Optional[float] = None
    rel_err_p999: Optional[float] = None
    abs_err_p50: Optional[float] = None
    abs_err_p90: Optional[float] = None
    abs_err_p99: Optional[float] = None
    abs_err_p999: Optional[float] = None
    #: with an auto threshold, a float var the batch reader measured: (elements above its band
    #: x its scale factor, its errors inside it as float32 bytes), what its count of elements
    #: above any threshold in the band comes from (not in the JSON)
    band: Optional[Tuple[int, bytes]] = None

    @property
    def ok(self) -> bool:
        """True when the status is ``ok``."""
        return self.status == "ok"

    def __bool__(self) -> bool:
        return self.status == "ok"

    @property
    def within_share(self) -> Optional[float]:
        """Share of the var's elements within its threshold (neither above it nor NaN/Inf on one
        side); None when not known (no threshold, or its count above it not made)."""
        if self.n_over is None or not self.size or self.threshold is None:
            return None
        return (self.size - self.n_over - self.n_nonfinite) / self.size

    @property
    def norm_err(self) -> Optional[float]:
        """``max_err`` divided by ``min(1, max(scale, SCALE_FLOOR))``: the number the auto
        threshold is compared with (equal to ``max_err`` when the var has values >= 1)."""
        e, s = self.max_err, self.scale
        if e is None:
            return None
        # scale_factor(s) inline (per var, several times per auto threshold)
        if s is None or not s < 1.0:
            return e / 1.0
        return e / (s if s > SCALE_FLOOR else SCALE_FLOOR)



#: the instance dict of a VarDiff built by its __init__ (the first one: field order). It is
#: key-sharing, and so is a copy of it overwritten key by key, at a third of the size of a
#: dict filled by update() (1.2 KB): there is one VarDiff per var, tens of thousands of them
_VARDIFF_DICT: Dict[str, object] = VarDiff(id=0, name="", opr="", opr_type="", dtype="", shape=(), inputs=(), status="").__dict__


def _with_dict(template: Dict[str, object], changes: Dict[str, object]) -> VarDiff:
    # a VarDiff being built here, not one anybody holds: its dict is filled before it is shared
    values = template.copy()
    values.update(changes.items())  # pairs, not a dict: update() would resize (unshare) it
    return frozen_record(VarDiff, values)


def new_diff(fields: Dict[str, object]) -> VarDiff:
    """``VarDiff(**fields)`` without the generated ``__init__``'s per-field frozen setattr
    (a VarDiff has 30 fields; this is per var); only for fields lar-prec computed itself."""
    return _with_dict(_VARDIFF_DICT, fields)


def diff_template() -> Dict[str, object]:
    """The dict :func:`diff_from` copies (key-sharing, in field order), for a maker of records
    in C that makes them as it does (the batch reader's ``file_records``)."""
    return _VARDIFF_DICT


def diff_from(keys: Tuple[str, ...], values: Tuple[object, ...]) -> VarDiff:
    """:func:`new_diff` of ``dict(zip(keys, values))`` without making that dict."""
    d = _VARDIFF_DICT.copy()
    d.update(zip(keys, values))
    return frozen_record(VarDiff, d)


def with_changes(d: VarDiff, **changes: object) -> VarDiff:
    """``dataclasses.replace`` for VarDiff without re-running ``__init__`` (ten times faster,
    which matters with tens of thousands of vars): a new record, ``d`` is left as it is."""
    return _with_dict(d.__dict__, changes)


@dataclass(frozen=True)
class Comparison:
    """Every var of two dump folders, in execution order, judged by one threshold."""

    dir_a: Path
    dir_b: Path
    diffs: Tuple[VarDiff, ...]
    threshold: Threshold
    #: folder-level remarks: stray files, ``-inp`` files, incomplete runs, renamed vars
    notes: Tuple[str, ...] = ()
    chunk_elements: int = DEFAULT_CHUNK
    #: how vars were paired (``id`` or ``name``) and, by name, ``(side, id, name, reason)`` of
    #: every var left without a partner (:class:`lar_prec.pairing.Pairing`)
    pairing: str = "id"
    unpaired: Tuple[Tuple[str, int, str, str], ...] = ()
    #: ``(A's id, B's id)`` of every paired var, in execution order (equal ids by id)
    pairs: Tuple[Tuple[int, int], ...] = field(default=(), repr=False, compare=False)
    #: ids of the constants and model inputs that differ (lar_prec/compare/sources.py)
    sources: Tuple[int, ...] = ()
    #: var id -> record, made on first lookup (a compare that only roots never looks one up:
    #: a pass over tens of thousands of records saved)
    _by_id: Optional[Dict[int, VarDiff]] = field(default=None, init=False, repr=False, compare=False, hash=False)

    def _index(self) -> Dict[int, VarDiff]:
        by_id = self._by_id
        if by_id is None:
            by_id = {d.id: d for d in self.diffs}
            object.__setattr__(self, "_by_id", by_id)
        return by_id

    def __getitem__(self, var_id: int) -> VarDiff:
        try:
            return self._index()[var_id]
        except KeyError:
            raise KeyError(f"var {var_id} is in neither {self.dir_a} nor {self.dir_b}") from None

    def __contains__(self, var_id: object) -> bool:
        return var_id in self._index()

    def __iter__(self) -> Iterator[VarDiff]:
        return iter(self.diffs)

    def __len__(self) -> int:
        return len(self.diffs)

    @property
    def ids(self) -> Tuple[int, ...]:
        """Var ids in execution order."""
        return tuple(d.id for d in self.diffs)

    def counts(self) -> Dict[str, int]:
        """Number of vars per status (every status present, zeros included)."""
        return count_statuses(self.diffs)

    @property
    def not_ok(self) -> Tuple[VarDiff, ...]:
        """The vars that do not agree (status not in :data:`AGREEING`), in execution order."""
        return tuple(d for d in self.diffs if d.status not in AGREEING)

    @property
    def diverged(self) -> bool:
        """True when any var does not agree (the command exits 1)."""
        return any(d.status not in AGREEING for d in self.diffs)
