"""The record every stage shares: what identifies one compared variable.

compare's :class:`~lar_prec.compare.VarDiff` and the report's
:class:`~lar_prec.report_records.ReportVar` both start with these fields, in this order (the
design's JSON ``vars[]`` keys), so a variable is described once.
"""
from __future__ import annotations

import math
import os
from dataclasses import dataclass
from typing import Any, Dict, Optional, Tuple, Type, TypeVar, Union

#: a file or folder argument: str or any os.PathLike (one alias for the package)
PathLike = Union[str, "os.PathLike[str]"]

_R = TypeVar("_R")


def frozen_record(cls: Type[_R], fields: Dict[str, Any]) -> _R:
    """``cls(**fields)`` for a frozen dataclass without the generated ``__init__``, which sets
    each field through the frozen class's setattr (a few microseconds a record: thousands of
    roots, tens of thousands of vars). ``fields`` must hold every field, and becomes the
    record's ``__dict__``: only for values lar-prec made itself, no checks run."""
    new = object.__new__(cls)
    object.__setattr__(new, "__dict__", fields)
    return new


@dataclass(frozen=True)
class VarKey:
    """A compared variable: its id, names, dtype and shape (A's when the sides differ), the var
    ids of its owner operator's inputs, and its status (one of compare's ``STATUSES``)."""

    id: int
    name: str
    opr: str
    opr_type: str
    dtype: str
    shape: Tuple[int, ...]
    inputs: Tuple[int, ...]
    status: str


def json_number(x: Optional[float]) -> Optional[float]:
    """A number for JSON, which has no NaN or Inf: None for those and for None."""
    return None if x is None or not math.isfinite(x) else float(x)
