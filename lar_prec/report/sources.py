"""Weights and inputs that differ between the two runs, in a report: the top-level JSON keys
``different_weights`` and ``different_inputs`` and the verdict's first words
(:mod:`lar_prec.compare.sources` decides which vars they are)."""
from __future__ import annotations

from typing import Any, Dict, Iterable, List, Mapping

from lar_prec.compare.sources import Source, different_sources, sources_text

KEYS = {"weight": "different_weights", "input": "different_inputs"}


def sources_json(records: Iterable[object]) -> Dict[str, List[Dict[str, Any]]]:
    """``{"different_weights": [...], "different_inputs": [...]}`` (only the non-empty ones):
    id, name, shape, dtype and max_abs_err of each."""
    out: Dict[str, List[Dict[str, Any]]] = {}
    for s in different_sources(records):
        out.setdefault(KEYS[s.kind], []).append({"id": s.id, "name": s.name, "shape": list(s.shape), "dtype": s.dtype,
                                                  "max_abs_err": s.max_abs_err})
    return out


def sources_verdict(extra: Mapping[str, Any]) -> str:
    """The verdict's first words from a report's top level ("" when nothing differs)."""
    found = [Source(x["id"], x["name"], tuple(x["shape"]), x["dtype"], x["max_abs_err"], kind)
             for kind, key in KEYS.items() for x in extra.get(key) or ()]
    return sources_text(found)
