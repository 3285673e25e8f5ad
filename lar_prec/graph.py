"""Small graph algorithms on var ids (plain dicts and ints; no networkx)."""
from __future__ import annotations

import heapq
from typing import Callable, Dict, Iterable, List, Mapping, Optional, Set, Tuple

__all__ = ["reach", "topological_order"]


def topological_order(inputs: Mapping[int, Iterable[int]]) -> Tuple[List[int], List[int]]:
    """Execution order of vars given each var's input ids: inputs before their consumers,
    ties broken by the smaller id. Inputs that are not keys, and self-edges, are ignored.

    Returns the order and the ids caught in a cycle (none in a real graph); those are
    appended to the order by id rather than lost.
    """
    # the usual graph (load_and_run numbers vars as it creates them): every input's id below
    # its consumer's, so the order is by id (what the general algorithm gives, in a tenth: the
    # smallest id left always has its inputs placed)
    if all(u <= v or u not in inputs for v, us in inputs.items() for u in us):
        return sorted(inputs), []
    indeg: Dict[int, int] = {v: 0 for v in inputs}
    users: Dict[int, List[int]] = {v: [] for v in inputs}
    for v, us in inputs.items():
        for u in set(us):
            if u in indeg and u != v:
                indeg[v] += 1
                users[u].append(v)
    heap = [v for v, n in indeg.items() if n == 0]
    heapq.heapify(heap)
    order: List[int] = []
    while heap:
        v = heapq.heappop(heap)
        order.append(v)
        for w in users[v]:
            indeg[w] -= 1
            if indeg[w] == 0:
                heapq.heappush(heap, w)
    cyclic = sorted(set(inputs) - set(order)) if len(order) != len(indeg) else []
    return order + cyclic, cyclic


def reach(start: int, neighbours: Mapping[int, Iterable[int]],
          stop: Optional[Callable[[int], bool]] = None) -> Set[int]:
    """Every id reachable from ``start`` along ``neighbours`` (inputs: ancestors; consumers:
    descendants), ``start`` itself excluded. Ids without an entry have no neighbours; an id
    for which ``stop`` is true is reached but not walked through (the sweep's nearest compared
    ancestors). The one reachability of the package: the variable tree, the local-error labels
    and the sweep use it."""
    seen: Set[int] = set()
    todo = [start]
    while todo:
        v = todo.pop()
        if v != start and stop is not None and stop(v):
            continue
        for w in neighbours.get(v, ()):
            if w not in seen:
                seen.add(w)
                todo.append(w)
    seen.discard(start)
    return seen
