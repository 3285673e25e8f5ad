"""Constants and model inputs that differ: the two runs did not run the same model (issue 40 #3).

Two runs of one graph (vars paired by id) read the same weights and the same inputs: their
values come from the model file and the input files, not from a kernel, so they are equal
bit for bit whatever the kernels, options or device. A constant or input that differs at all,
even by one rounding (a perturbed weight shows a max_err of 2.4e-07, far under any threshold),
means the runs were given different models or inputs: such a var is ``divergent`` (compared
exactly, threshold 0), said first in the verdict, and the command exits 1.

Graphs paired by name (options that rewrite the graph) may legitimately convert, fold or
relayout constants, so only vars paired by id are held to this.
"""
from __future__ import annotations

from typing import Iterable, List, NamedTuple, Tuple

#: operators that hold a model's weights and constants
CONSTANT_TYPES = frozenset({"ImmutableTensor", "SharedDeviceTensor", "VolatileSharedDeviceTensor",
                            "MultipleDeviceTensorHolder", "MultipleDeviceTensorWithFormatHolder"})
#: operators that feed a model's inputs
INPUT_TYPES = frozenset({"Host2DeviceCopy"})
SOURCE_TYPES = CONSTANT_TYPES | INPUT_TYPES

WEIGHT_NOTE = "a constant differs: the two runs used different weights (constants compare exactly)"
INPUT_NOTE = "a model input differs: the two runs were fed different inputs (inputs compare exactly)"


class Source(NamedTuple):
    """A constant or model input that differs between the two runs."""

    id: int
    name: str
    shape: Tuple[int, ...]
    dtype: str
    max_abs_err: float
    kind: str  # "weight" | "input"


def judge_sources(diffs: List[object]) -> Tuple[int, ...]:
    """Hold every constant and model input of ``diffs`` (compared records this comparison
    made, not yet shared: changed in place) to bitwise equality: one that differs at all is
    ``divergent`` with threshold 0 (``n_over``: recounted, or the exact count of an integer
    var) and a note saying what it means. Returns their ids."""
    found = []
    for d in [d for d in diffs if d.opr_type in SOURCE_TYPES]:  # type: ignore[attr-defined]
        kind = _kind(d)
        if d.status not in ("ok", "divergent") or d.dtype_b is not None:  # type: ignore[attr-defined]
            continue
        if not (d.max_abs_err or 0.0) > 0.0:  # type: ignore[attr-defined]
            continue
        note = WEIGHT_NOTE if kind == "weight" else INPUT_NOTE
        old = d.note  # type: ignore[attr-defined]
        exact = d.n_diff is not None and d.threshold == 0.0  # type: ignore[attr-defined]
        d.__dict__.update(status="divergent", threshold=0.0, n_over=d.n_diff if exact else None,  # type: ignore[attr-defined]
                          note=f"{old}; {note}" if old else note)
        found.append(d.id)  # type: ignore[attr-defined]
    return tuple(found)


def _kind(d: object) -> "str | None":
    t = d.opr_type  # type: ignore[attr-defined]
    return "weight" if t in CONSTANT_TYPES else "input" if t in INPUT_TYPES else None


def different_sources(records: Iterable[object]) -> List[Source]:
    """The constants and inputs judged different (:func:`judge_sources`), in execution order."""
    found = [d for d in records if d.status == "divergent" and d.opr_type in SOURCE_TYPES]  # type: ignore[attr-defined]
    out = []
    for d in found:
        note = getattr(d, "note", None) or ""
        if WEIGHT_NOTE in note or INPUT_NOTE in note:
            out.append(Source(d.id, d.name, tuple(d.shape), d.dtype, d.max_abs_err or 0.0, _kind(d)))  # type: ignore[attr-defined,arg-type]
    return out


def sources_text(sources: List[Source], limit: int = 5) -> str:
    """The verdict's first words: which weights (and inputs) differ, with their shapes."""
    parts = []
    for kind, what in (("weight", "different weights"), ("input", "different inputs")):
        mine = [s for s in sources if s.kind == kind]
        if not mine:
            continue
        shown = ", ".join(f"{s.name} ({','.join(map(str, s.shape))})" for s in mine[:limit])
        more = f" and {len(mine) - limit} more" if len(mine) > limit else ""
        parts.append(f"the two runs used {what}: {shown}{more}")
    return "; ".join(parts)
