"""The search of ``lar-prec reduce``: the smallest part of a model that fails the same way.

The model's N data operators are in execution order and the root operator is at position p
(a crash or stall has no root: every operator is a suspect). Each part tried is judged by
:class:`~.candidate.Tester`; a part is tried once (results are kept by its operator set).

1. **The whole model** must fail the same way first (else :class:`NotReproduced`).
2. **The root alone**: most roots fail on their own (one run, and done).
3. **From the outputs back**: the shortest prefix ``ops[:m]`` (m > p) that still fails,
   by bisection (the whole model is the longest): what the failure needs after the root.
4. **From the inputs forward**: the latest start ``s <= p`` with ``ops[s:m]`` still failing,
   by bisection: what it needs before the root. Cut inputs are fed the reference's values.
5. **Branches**: the operators of the window neither upstream nor downstream of the root,
   removed at once.
6. **Chunks, then one by one**: the operators left (but the root) removed in chunks, halved
   until single operators, a removal kept when the part still fails the same way, again until
   no removal works: every operator left is needed, and the part without it is on record (it
   passed, or failed another way, or an operator left cannot be fed without it).

Bisection assumes that adding operators after (before) the failing ones keeps the failure;
where it does not, step 6 still only accepts parts that fail the same way, so the result
always does. Runs: about ``2 log2 N + 4`` plus one per operator left; at ``max_runs`` the search
stops and hands over the smallest part that failed the same way so far, and says so.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Dict, FrozenSet, Iterable, List, Optional, Tuple

from lar_prec.errors import LarPrecError
from lar_prec.workflows.reduce.candidate import Graph, Outcome, Part, Tester, drop_dump


class NotReproduced(LarPrecError):
    """The whole model does not fail the way the analysis found."""


class _OutOfRuns(Exception):
    """The search spent its runs."""


@dataclass(frozen=True)
class Step:
    """One part tried: ``phase``, its operators (ids, execution order), what it did."""

    n: int
    phase: str
    ops: Tuple[int, ...]
    verdict: str
    klass: str
    why: str
    root_err: Optional[float]

    def to_json(self) -> Dict[str, Any]:
        return {"n": self.n, "phase": self.phase, "operators": len(self.ops), "ops": list(self.ops),
                "verdict": self.verdict, "class": self.klass, "why": self.why,
                "root_err": self.root_err if self.root_err is None or self.root_err < float("inf") else None}


@dataclass(frozen=True)
class Reduction:
    """What the search found: the operators kept (execution order), why each is needed, every
    part tried, the final part and its outcome; ``stopped``: why the search ended early."""

    kept: Tuple[int, ...]
    needed: Tuple[Tuple[int, str], ...]
    steps: Tuple[Step, ...]
    part: Optional[Part]
    outcome: Outcome
    stopped: Optional[str] = None


Progress = Callable[[str], None]


class _Search:
    def __init__(self, tester: Tester, graph: Graph, anchor: Optional[int], progress: Optional[Progress],
                 max_runs: int) -> None:
        self.t, self.g, self.anchor, self.progress, self.max_runs = tester, graph, anchor, progress, max_runs
        self.order = {o.id: k for k, o in enumerate(graph.ops)}
        self.cache: Dict[FrozenSet[int], Tuple[Optional[Part], Outcome]] = {}
        self.steps: List[Step] = []
        self.best = frozenset(self.order)  # the smallest part that failed the same way (the whole model first)
        self.why: Dict[int, Tuple[FrozenSet[int], str]] = {}  # op -> (the part it was removed from, what it did)

    def sorted(self, ops: Iterable[int]) -> Tuple[int, ...]:
        return tuple(sorted(ops, key=self.order.__getitem__))

    def record(self, phase: str, keep: FrozenSet[int], out: Outcome) -> None:
        self.steps.append(Step(len(self.steps) + 1, phase, self.sorted(keep), out.verdict, out.klass, out.why,
                               out.root_err))
        if self.progress:
            self.progress(f"{phase}: {len(keep)} operator(s): {out.verdict} ({out.why})")

    def fails(self, keep: Iterable[int], phase: str) -> bool:
        """Whether the part keeping ``keep`` (and what it needs) fails the same way."""
        closed = self.g.closure(keep)
        if closed not in self.cache:
            if self.t.runs >= self.max_runs:
                raise _OutOfRuns
            part, out = self.t.part(closed)
            self.cache[closed] = (part, out)
            self.record(phase, closed, out)
            if out.verdict != "same":
                drop_dump(out)
            elif len(closed) < len(self.best):
                self.best = closed
        return self.cache[closed][1].verdict == "same"

    def window(self, ops: List[int], p: Optional[int]) -> FrozenSet[int]:
        """Steps 3 and 4: the shortest prefix, then the latest start, that still fail."""
        lo, hi = (p + 1 if p is not None else 1), len(ops)
        while lo < hi:
            mid = (lo + hi) // 2
            if self.fails(ops[:mid], "from the outputs back"):
                hi = mid
            else:
                lo = mid + 1
        m = hi
        lo, hi = 0, (p if p is not None else m - 1)
        while lo < hi:
            mid = (lo + hi + 1) // 2
            if self.fails(ops[mid:m], "from the inputs forward"):
                lo = mid
            else:
                hi = mid - 1
        return self.g.closure(ops[lo:m])

    def shrink(self, keep: FrozenSet[int]) -> FrozenSet[int]:
        """Step 6: chunks of the operators left removed, halved down to single operators, until no
        removal keeps the failure; each single removal's outcome is kept in ``self.why``."""
        size = max(1, (len(keep) - 1) // 2)
        while True:
            removed = False
            ops = [o for o in self.sorted(keep) if o != self.anchor]
            for i in range(0, len(ops), size):
                chunk = frozenset(ops[i:i + size]) & keep
                rest = self.g.closure(keep - chunk)
                if not chunk or not rest or rest & chunk:
                    if size == 1 and chunk and rest:
                        op = next(iter(chunk))
                        users = "; ".join(f"{n} reads {w}" for n, w in self.g.needed_by(keep, op))
                        self.why[op] = (keep, f"cannot be cut off: {users}")
                    continue
                if self.fails(rest, "chunks" if size > 1 else "one by one"):
                    keep, removed = rest, True
                elif size == 1:
                    out = self.cache[rest][1]
                    verb = {"passes": "the failure goes away", "invalid": "the part cannot be built"}.get(
                        out.verdict, "the part fails another way")
                    self.why[next(iter(chunk))] = (keep, f"without it {verb}: {out.why}")
            if size == 1 and not removed:
                return keep
            if not removed:
                size = max(1, size // 2)


def search(tester: Tester, graph: Graph, anchor: Optional[int], *, progress: Optional[Progress] = None,
           max_runs: int = 100) -> Reduction:
    """Reduce the model of ``tester``'s finding around operator ``anchor`` (its root; None for a
    crash or stall), in at most ``max_runs`` runs. See the module docstring.

    Raises:
        NotReproduced: the whole model does not fail the same way.
    """
    s = _Search(tester, graph, anchor, progress, max_runs)
    ops = [o.id for o in graph.ops]
    whole = tester.whole()
    full = frozenset(ops)
    s.record("the whole model", full, whole)
    if whole.verdict != "same":
        raise NotReproduced(f"the whole model does not fail the way the analysis found: {whole.why}")
    drop_dump(whole)
    s.cache[full] = (None, whole)
    stopped = None
    try:
        keep = graph.closure({anchor}) if anchor is not None else full
        if anchor is None or not s.fails(keep, "the root alone"):
            keep = s.window(ops, ops.index(anchor) if anchor is not None else None)
            related = graph.closure(graph.related(anchor) & keep) if anchor is not None else keep
            if related != keep and s.fails(related, "branches off the root's path"):
                keep = related
        keep = s.shrink(keep)
    except _OutOfRuns:
        keep, stopped = s.best, f"stopped after {tester.runs} runs (--max-runs): the part is not minimal"
    part, out = s.cache[keep]
    if part is None:  # the whole model itself is the smallest: build it as a part, to hand it over
        part, out = tester.part(keep)
        s.record("the part handed over", keep, out)
    for k, (_p, o) in s.cache.items():
        if k != keep:
            drop_dump(o)
    why = {op: w for op, (ctx, w) in s.why.items() if ctx == keep}
    if anchor is not None:
        why[anchor] = "the root: the failure is in its output"
    untried = "the failure comes with it (a part keeps one operator at least)" if len(keep) == 1 else (
        "not tried alone" if stopped else "the bisection needed it")
    needed = tuple((op, why.get(op, untried)) for op in s.sorted(keep))
    return Reduction(s.sorted(keep), needed, tuple(s.steps), part, out, stopped)
