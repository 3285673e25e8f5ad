"""Small graph algorithms on var ids (plain dicts and ints; no networkx)."""
from __future__ import annotations

import heapq
from typing import Callable, Dict, Iterable, List, Mapping, Optional, Sequence, Set, Tuple

__all__ = ["bfs_parents", "path_to", "reach", "topological_order"]


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


def bfs_parents(starts: Sequence[int], neighbours: Mapping[int, Iterable[int]]) -> Dict[int, Optional[int]]:
    """One breadth-first search from every id of ``starts`` at once (most preferred first):
    each id reached -> the id before it on a shortest path from its nearest start (None for
    a start). Of equally near starts the most preferred wins, and a path's steps are the first
    found. Linear in the graph: every edge is looked at once, whatever its depth."""
    parent: Dict[int, Optional[int]] = {s: None for s in starts}
    # a level is walked in order of preference of its ids' starts: each id found takes the
    # preference of the first one that finds it, so the next level is in that order too
    frontier = list(parent)
    while frontier:
        nxt = []
        for v in frontier:
            for w in neighbours.get(v, ()):
                if w not in parent:
                    parent[w] = v
                    nxt.append(w)
        frontier = nxt
    return parent


def path_to(target: int, parent: Mapping[int, Optional[int]]) -> List[int]:
    """The path ``start -> ... -> target`` of a :func:`bfs_parents` search (``target`` reached)."""
    path = [target]
    step = parent[target]
    while step is not None:
        path.append(step)
        step = parent[step]
    path.reverse()
    return path
