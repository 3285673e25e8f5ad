"""The JSON text of a report's vars and roots, fast: what the report writer writes.

A report of tens of thousands of vars goes through it (json's encoder took ~10 us a var,
longer than comparing it). The compare kernel's ``json_rows`` writes a table's keys and values
into one buffer per record, the values taken in one attrgetter call; a value it would not
write as json does (NaN, a numpy scalar, an int in a float field), a record with extras or a
None in an optional key, or no C kernel: the json module, through ``records._fields_json``.
The tables (:data:`~lar_prec.report.records.VAR_FIELDS`, ``ROOT_FIELDS``) are in records.py.
"""
from __future__ import annotations

import json
import operator
import sys
from json.encoder import encode_basestring_ascii
from typing import Any, Callable, Dict, Iterator, List, Optional, Sequence, Tuple

from lar_prec.compare.engine.scan import KERNEL
from lar_prec.compare.records import VarDiff
from lar_prec.report.records import ROOT_FIELDS, VAR_FIELDS, _fields_json

_ENCODE = json.JSONEncoder(allow_nan=False).encode
_KIND_CODE = {"float": "f", "int": "i", "num": "n", "str": "s", "bool": "b", "ints": "l"}


def _layout(rows: Sequence[Tuple[str, str, bool, str]]) -> Tuple[Tuple[str, ...], Tuple[str, ...], str]:
    """(attribute names, JSON prefixes, kind codes) of a table's ``rows``, for json_rows."""
    keys = tuple(sys.intern(k) for k, *_ in rows)
    prefixes = tuple(("{" if i == 0 else ", ") + encode_basestring_ascii(k) + ": " for i, k in enumerate(keys)) + ("}",)
    return keys, prefixes, "".join(_KIND_CODE[kind] for _, kind, _, _ in rows)


# vars: the always-written keys (a compare VarDiff has no optional ones), read by the kernel
_VAR_KEYS, _VAR_PREFIXES, _VAR_KINDS = _layout([r for r in VAR_FIELDS if r[2]])
_VAR_OPTIONAL = tuple(k for k, _, always, _ in VAR_FIELDS if not always)
# roots: every key read; the optional ones that are None are left out (_root_layout)
_ROOT_GET = operator.attrgetter(*(k for k, *_ in ROOT_FIELDS))
_ROOT_OPTIONAL = tuple(i for i, (_, _, always, _) in enumerate(ROOT_FIELDS) if not always)


def _texts(records: Sequence[Any], fast: Sequence[bool], rows: List[Any], prefixes: Tuple[str, ...],
           kinds: str, table: Tuple[Tuple[str, str, bool, str], ...], keys: Optional[Tuple[str, ...]] = None) -> List[str]:
    """The JSON text of each record: through the kernel where ``fast`` says it may (``rows``:
    those records' values in order, or with ``keys`` the records, whose attributes of those
    names the kernel reads), else (or where the kernel declines a value) through the json
    module."""
    it = iter(KERNEL.json_rows(prefixes, rows, kinds, keys) if rows else ())  # type: ignore[union-attr]
    return [t if t is not None else _ENCODE(_fields_json(r, table))
            for r, t in zip(records, (next(it) if f else None for f in fast))]


def var_json_text(d: Any) -> str:
    """``json.dumps(_fields_json(d, VAR_FIELDS))`` as the report writer encodes it (ASCII, no
    NaN), for a VarDiff or ReportVar ``d``."""
    return next(vars_json_texts([d]))[0]


def vars_json_texts(records: Sequence[Any], chunk: int = 256) -> Iterator[List[str]]:
    """:func:`var_json_text` of each record, in order, a list per ``chunk`` records (one
    kernel call each)."""
    for k in range(0, len(records), chunk):
        part = records[k : k + chunk]
        # a compare VarDiff has neither extras nor optional keys; a ReportVar is asked
        fast = [KERNEL is not None and (type(d) is VarDiff or (
            not getattr(d, "extra", None) and all(getattr(d, o, None) is None for o in _VAR_OPTIONAL)
            and all(hasattr(d, k) for k, _, a, _ in VAR_FIELDS if a))) for d in part]
        yield _texts(part, fast, [d for d, f in zip(part, fast) if f], _VAR_PREFIXES, _VAR_KINDS, VAR_FIELDS, _VAR_KEYS)


def roots_json_texts(roots: Sequence[Any], chunk: int = 256) -> Iterator[List[str]]:
    """Each root's JSON text as ``json`` writes :meth:`ReportRoot.to_json` (ASCII, no NaN), a
    list per ``chunk`` roots. Roots are grouped by which optional keys they have (most have
    no module): each group is one kernel call with the layout of its keys."""
    for k in range(0, len(roots), chunk):
        part = roots[k : k + chunk]
        rows = [_ROOT_GET(r) for r in part]
        texts: List[Optional[str]] = [None] * len(part)
        if KERNEL is not None:
            groups: Dict[Tuple[bool, ...], List[int]] = {}
            for j, (r, row) in enumerate(zip(part, rows)):
                if not getattr(r, "extra", None):
                    groups.setdefault(tuple(row[i] is not None for i in _ROOT_OPTIONAL), []).append(j)
            for present, at in groups.items():
                get, prefixes, kinds = _root_layout(present)
                for j, t in zip(at, KERNEL.json_rows(prefixes, [get(rows[j]) for j in at], kinds, None)):
                    texts[j] = t
        yield [t if t is not None else _ENCODE(_fields_json(r, ROOT_FIELDS)) for r, t in zip(part, texts)]


#: json_rows' layout of roots by which optional keys they have (a None one is left out)
_ROOT_LAYOUTS: Dict[Tuple[bool, ...], Tuple[Callable[[Any], Tuple[Any, ...]], Tuple[str, ...], str]] = {}


def _root_layout(present: Tuple[bool, ...]) -> Tuple[Callable[[Any], Tuple[Any, ...]], Tuple[str, ...], str]:
    """(values of a root's row to write, JSON prefixes, kind codes) for the optional keys
    ``present`` (in :data:`_ROOT_OPTIONAL`'s order)."""
    got = _ROOT_LAYOUTS.get(present)
    if got is None:
        missing = {i for i, p in zip(_ROOT_OPTIONAL, present) if not p}
        keep = [i for i in range(len(ROOT_FIELDS)) if i not in missing]
        _keys, prefixes, kinds = _layout([ROOT_FIELDS[i] for i in keep])
        got = _ROOT_LAYOUTS[present] = (operator.itemgetter(*keep), prefixes, kinds)
    return got
