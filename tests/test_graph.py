"""lar_prec.graph.topological_order: the by-id shortcut for the usual graph gives what the
general algorithm gives, and the general algorithm orders any graph (hypothesis)."""
from __future__ import annotations

import heapq
from typing import Dict, List

from hypothesis import given, settings
from hypothesis import strategies as st

from lar_prec.graph import topological_order


def _kahn(inputs: Dict[int, List[int]]) -> List[int]:
    # the definition: inputs first, the smallest ready id next; cycles appended by id
    indeg = {v: len({u for u in us if u in inputs and u != v}) for v, us in inputs.items()}
    ready = [v for v, n in indeg.items() if n == 0]
    heapq.heapify(ready)
    out: List[int] = []
    while ready:
        v = heapq.heappop(ready)
        out.append(v)
        for w, us in inputs.items():
            if v in us and w != v:
                indeg[w] -= 1
                if indeg[w] == 0:
                    heapq.heappush(ready, w)
    return out + sorted(set(inputs) - set(out))


graphs = st.dictionaries(st.integers(0, 60), st.lists(st.integers(0, 70), max_size=4), max_size=40)


@settings(max_examples=400, deadline=None)
@given(graphs, st.booleans())
def test_the_order_is_the_definitions(inputs, forward):
    if forward:  # the usual graph: every input numbered before its consumer (the shortcut)
        inputs = {v: [u for u in us if u <= v] for v, us in inputs.items()}
    order, cyclic = topological_order(inputs)
    assert order == _kahn(inputs)
    assert sorted(order) == sorted(inputs)
    if forward:
        assert order == sorted(inputs) and cyclic == []


def test_a_cycle_is_reported_and_kept():
    order, cyclic = topological_order({1: [3], 2: [1], 3: [2], 4: []})
    assert cyclic == [1, 2, 3] and order == [4, 1, 2, 3]
