"""Which var of dump folder A goes with which var of B: the stage between reading and comparing.

:func:`pair_folders` returns a frozen :class:`Pairing` that :func:`lar_prec.compare.compare_folders`
consumes. Today there is one mode:

* ``"id"``: a var of A pairs with the var of B with the same id (same graph, two runs).

Pairing by name across rewritten graphs (load_and_run options that change the graph:
layout transforms, fusion; ../shared/design.md and reference/graph-options.md) belongs here
as mode ``"name"`` (and ``"auto"``: by id when the graphs agree, else by name): add a
function that builds a :class:`Pairing` and a branch in :func:`pair_folders`; compare needs
no change beyond reading ``pairs`` whose two ids differ.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import List, Optional, Tuple

from lar_prec.errors import DumpFolderError, UsageError
from lar_prec.iodump import DumpFolder

#: pairing modes pair_folders accepts
MODES = ("id",)

Entry = Tuple[Optional[int], Optional[int]]


@dataclass(frozen=True)
class Pairing:
    """The vars of two folders, matched.

    ``order`` is every entry in execution order: ``(id_a, id_b)`` for a pair, ``(id_a,
    None)`` for a var only in A, ``(None, id_b)`` for one only in B (placed right after the
    last of its inputs). ``mode`` says how pairs were made.
    """

    mode: str
    order: Tuple[Entry, ...]

    @property
    def pairs(self) -> Tuple[Tuple[int, int], ...]:
        """``(id_a, id_b)`` of every paired var, in execution order."""
        return tuple((a, b) for a, b in self.order if a is not None and b is not None)

    @property
    def only_a(self) -> Tuple[int, ...]:
        """Ids of the vars of A that have no partner in B."""
        return tuple(a for a, b in self.order if b is None and a is not None)

    @property
    def only_b(self) -> Tuple[int, ...]:
        """Ids of the vars of B that have no partner in A."""
        return tuple(b for a, b in self.order if a is None and b is not None)

    def __len__(self) -> int:
        return len(self.order)


def _by_id_order(fa: DumpFolder, fb: DumpFolder) -> List[Entry]:
    """Execution order of the vars of both folders: A's order, with B-only vars placed
    right after the last of their inputs (B's own order otherwise)."""
    in_b = fb.files()
    order: List[Entry] = [(v, v if v in in_b else None) for v in fa.ids]
    if not any(v not in fa for v in in_b):
        return order  # B's titles need not be read for their inputs
    only_b = [v for v in fb.ids if v not in fa]
    pos = {v: i for i, v in enumerate(fa.ids)}
    placed: List[Tuple[float, int, Entry]] = []
    for k, v in enumerate(only_b):
        after = max((pos[u] for u in fb.inputs_of(v) if u in pos), default=-1)
        placed.append((after + 0.5, k, (None, v)))
    merged = [(float(i), 0, e) for i, e in enumerate(order)] + placed
    merged.sort(key=lambda x: (x[0], x[1]))
    return [e for _, _, e in merged]


def pair_folders(fa: DumpFolder, fb: DumpFolder, mode: str = "id") -> Pairing:
    """Pair the vars of two folders (see the module docstring for the modes).

    Raises:
        DumpFolderError: a folder holds no dumps, or the folders have no var in common.
        UsageError: an unknown ``mode``.
    """
    if mode not in MODES:
        raise UsageError(f"pairing mode must be one of {', '.join(MODES)}, got {mode!r}")
    for f in (fa, fb):
        if len(f) == 0:
            extra = f" ({len(f.stray)} other entries)" if f.stray else ""
            raise DumpFolderError(f"no binary dump files in {f.path}{extra}: expected files named like 00000b written by --bin-io-dump")
    if not set(fa.files()) & set(fb.files()):
        raise DumpFolderError(
            f"{fa.path} and {fb.path} have no var in common ({len(fa)} and {len(fb)} vars): not dumps of the same model?"
        )
    return Pairing(mode=mode, order=tuple(_by_id_order(fa, fb)))
