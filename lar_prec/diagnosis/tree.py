"""The variable tree: a networkx DAG of vars annotated with their comparison, and its roots.

Edges go from an input var to the var its operator produces (``owner_opr_inputs`` in the
binary-dump titles, plus the ``deps`` of a text dump when one is given). A **root** is a
var whose status is not ``ok`` while every input it depends on is ``ok``: the place where
the divergence starts rather than where it is merely inherited.

Decisions (docs/threshold.md has the threshold ones):

* Inputs that were not compared (not dumped on either side, or ``missing`` on one side) are
  unknown and do not block a root; a ``missing`` var can itself be a root (its compared
  inputs agree) but is ranked after every var whose values, shape or dtype differ.
* Roots are ranked by execution order of their operator (outputs of one operator share a
  place), then by amplification (largest first), then id. Each root carries the largest
  ``max_err`` of its inputs and its amplification ``max_err / input_max_err`` (None when it has
  no compared input, ``inf`` when those inputs are bitwise equal).

The reader of MegEngine's ``compare_binary_iodump`` text and the ``accuracy_shake_var_tree``
compatibility layer (:func:`parse`, :class:`varNode`) live in :mod:`lar_prec.diagnosis.megcompat`;
their names stay importable from here (``from lar_prec.diagnosis.tree import parse, varNode``).
"""
from __future__ import annotations

import logging
import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Dict, Iterable, List, Optional, Sequence, Tuple, Union

from lar_prec.compare.engine.workers import DEFAULT_CHUNK
from lar_prec.compare.folders import compare_folders
from lar_prec.compare.records import AGREEING, count_statuses
from lar_prec.compare.records import Comparison, VarDiff
from lar_prec.compare.engine.plan import ProgressHook
from lar_prec.compare.threshold import Threshold
from lar_prec.dumps.textdump import TextDump, read_text_dump

if TYPE_CHECKING:  # networkx is imported on first use (VarTree.graph and graph queries)
    # networkx on first graph query (start-up time)
    import networkx as nx

log = logging.getLogger(__name__)

from lar_prec.records import PathLike, frozen_record  # noqa: E402
from lar_prec.graph import bfs_parents, path_to, reach

#: statuses that say the values (or their shape/dtype) differ; ``missing`` ranks after them
_VALUE_PROBLEMS = ("divergent", "nonfinite", "shape_mismatch", "dtype_mismatch")
#: text-dump dependency kinds that carry data (dev_comp_order only orders execution)
_DATA_DEPS = ("value", "shape", "host_value")


@dataclass(frozen=True)
class Root:
    """A var that is not ``ok`` while every compared input it depends on is ``ok``."""

    id: int
    name: str
    opr: str
    opr_type: str
    status: str
    dtype: str
    max_err: Optional[float]
    #: largest ``max_err`` among its compared inputs (None: no compared input)
    input_max_err: Optional[float]
    #: ``max_err / input_max_err``; ``inf`` when the inputs are bitwise equal; None when
    #: there is no compared input or no ``max_err``
    amplification: Optional[float]
    #: the input with the largest error (None: no compared input)
    worst_input: Optional[int]
    #: position of the root's operator in execution order
    order: int
    note: str = ""


#: a tree's inputs (var -> input -> (edge kind, input index)), consumers, and compared flags
_Adjacency = Tuple[Dict[int, Dict[int, Tuple[str, Optional[int]]]], Dict[int, Dict[int, None]], Dict[int, bool]]


class VarTree:
    """The var DAG of one comparison, its roots, and dependence queries.

    Build it with :meth:`from_folders` (compares two dump folders) or :meth:`from_comparison`.
    Var ids are plain ints everywhere.

    Example:
        >>> tree = VarTree.from_folders("vars_naive", "vars_default")   # doctest: +SKIP
        >>> [r.id for r in tree.roots()]                                 # doctest: +SKIP
        [23]
        >>> tree.path(23)                     # from the model input to the root  # doctest: +SKIP
        [7, 11, 16, 18, 23]
    """

    def __init__(
        self,
        diffs: Sequence[VarDiff],
        *,
        threshold: Optional[Threshold] = None,
        comparison: Optional[Comparison] = None,
        text_dump: Union[TextDump, PathLike, None] = None,
        source: str = "",
    ) -> None:
        self.comparison = comparison
        self.threshold = threshold if threshold is not None else (comparison.threshold if comparison else None)
        self.source = source
        self._diffs: Dict[int, VarDiff] = {}
        self._order: Dict[int, int] = {}
        for i, d in enumerate(diffs):
            self._diffs[d.id] = d
            self._order[d.id] = i
        # the adjacency is made on first use (_make_adjacency): rooting reads each var's inputs
        # from its record, and a command that only roots (compare) never needs it; networkx
        # (a fifth of the command's start-up) is imported only when ``graph`` is asked for
        self._adj: Optional[_Adjacency] = None
        self._text_dump: Optional[TextDump] = None
        if text_dump is not None:
            td = text_dump if isinstance(text_dump, TextDump) else read_text_dump(text_dump)
            if td.truncated:
                # its edges end at the cut: say so where the command's output is read (stderr)
                log.warning("note: text dump %s was cut (%s); only the edges before the cut are used", td.path, td.truncated)
            self._text_dump = td
            self._make_adjacency()  # its edges count for the roots
        self._graph: Optional["nx.DiGraph"] = None
        self._roots: Optional[Tuple[Root, ...]] = None
        self._paths: Optional[Tuple[Dict[int, Optional[int]], Dict[int, Optional[int]]]] = None

    def _make_adjacency(self) -> None:
        """Every var's inputs and consumers (the records' inputs and the text dump's edges),
        and the place in execution order of vars known only as inputs."""
        preds: Dict[int, Dict[int, Tuple[str, Optional[int]]]] = {}
        succs: Dict[int, Dict[int, None]] = {}
        compared: Dict[int, bool] = {}
        self._adj = (preds, succs, compared)
        # _add_node/_add_edge written out: tens of thousands of vars
        for v in self._diffs:
            preds[v], succs[v], compared[v] = {}, {}, True
        for d in self._diffs.values():
            v = d.id
            into = preds[v]
            for k, u in enumerate(d.inputs):
                if u not in preds:
                    preds[u], succs[u], compared[u] = {}, {}, False
                if u != v and u not in into:
                    into[u] = ("value", k)
                    succs[u][v] = None
        if self._text_dump is not None:
            for u, v, kind in self._text_dump.edges():
                if kind not in _DATA_DEPS or u == v:
                    continue
                self._add_node(u, False)
                self._add_node(v, False)
                if u not in preds[v]:
                    self._add_edge(u, v, kind, None)
        # vars known only as inputs sit just before their first consumer in execution order
        n_diffs = len(self._diffs)
        for n in preds:
            if n not in self._order:
                consumers = [self._order[c] for c in succs[n] if c in self._order]
                self._order[n] = (min(consumers) if consumers else n_diffs) - 1

    def _adjacency(self) -> _Adjacency:
        if self._adj is None:
            self._make_adjacency()
        return self._adj  # type: ignore[return-value]

    @property
    def _preds(self) -> Dict[int, Dict[int, Tuple[str, Optional[int]]]]:
        """Var -> its inputs -> (edge kind, input index)."""
        return self._adjacency()[0]

    @property
    def _succs(self) -> Dict[int, Dict[int, None]]:
        """Var -> its consumers."""
        return self._adjacency()[1]

    @property
    def _compared(self) -> Dict[int, bool]:
        """Var -> dumped on both sides (False: known only as an input)."""
        return self._adjacency()[2]

    def _add_node(self, n: int, compared: bool) -> None:
        if n not in self._preds:
            self._preds[n] = {}
            self._succs[n] = {}
            self._compared[n] = compared

    def _add_edge(self, u: int, v: int, kind: str, index: Optional[int]) -> None:
        self._preds[v][u] = (kind, index)
        self._succs[u][v] = None

    @property
    def graph(self) -> "nx.DiGraph":
        """The var DAG as a networkx DiGraph: edges input -> consumer with ``kind`` ("value",
        or a text-dump dependency kind) and ``index`` (input position); nodes carry
        ``compared`` (False for vars known only as inputs)."""
        if self._graph is None:
            # networkx on first graph query (start-up time)
            import networkx as nx

            g = nx.DiGraph()
            for n, c in self._compared.items():
                g.add_node(n, compared=c)
            for v, preds in self._preds.items():
                for u, (kind, index) in preds.items():
                    g.add_edge(u, v, kind=kind, index=index)
            self._graph = g
        return self._graph

    # ------------------------------------------------------------------ builders

    @classmethod
    def from_comparison(cls, comparison: Comparison, *, text_dump: Union[TextDump, PathLike, None] = None) -> "VarTree":
        """The tree of an existing :class:`~lar_prec.compare.Comparison`."""
        return cls(comparison.diffs, comparison=comparison, text_dump=text_dump, source=f"{comparison.dir_a} vs {comparison.dir_b}")

    @classmethod
    def from_folders(
        cls,
        dir_a: PathLike,
        dir_b: PathLike,
        *,
        threshold: Union[str, float, Threshold, None] = "auto",
        text_dump: Union[TextDump, PathLike, None] = None,
        chunk_elements: int = DEFAULT_CHUNK,
        jobs: Optional[int] = 1,
        on_progress: Optional[ProgressHook] = None,
        pairing: str = "id",
        pass_ratio: float = 1.0,
        stats: bool = False,
    ) -> "VarTree":
        """Compare two ``--bin-io-dump`` folders and build their tree (see
        :func:`~lar_prec.compare.compare_folders` for the arguments and errors). With
        ``pairing`` ``name`` the tree is A's graph (the reference side)."""
        cmp = compare_folders(dir_a, dir_b, threshold=threshold, chunk_elements=chunk_elements, jobs=jobs,
                              on_progress=on_progress, pairing=pairing, pass_ratio=pass_ratio, stats=stats)
        return cls.from_comparison(cmp, text_dump=text_dump)

    # ------------------------------------------------------------------ queries

    def __contains__(self, var_id: object) -> bool:
        return var_id in self._preds

    def __len__(self) -> int:
        return len(self._preds)

    @property
    def diffs(self) -> Tuple[VarDiff, ...]:
        """The compared vars in execution order."""
        return tuple(self._diffs.values())

    def _check(self, var_id: int) -> int:
        if var_id not in self._preds:
            near = sorted(self._preds, key=lambda n: abs(n - var_id))[:5]
            raise KeyError(f"var {var_id} is not in the tree ({len(self._preds)} vars; nearest ids: {near})")
        return var_id

    def node(self, var_id: int) -> VarDiff:
        """The comparison of ``var_id``. A var known only as an input (never dumped) gets a
        ``missing`` VarDiff that says so.

        Raises:
            KeyError: the id is not in the tree (the message lists the nearest ids).
        """
        self._check(var_id)
        d = self._diffs.get(var_id)
        if d is not None:
            return d
        users = sorted(self._succs[var_id])
        return VarDiff(
            id=var_id, name="", opr="", opr_type="", dtype="", shape=(), inputs=(), status="missing",
            note=f"not dumped on either side; known only as an input of var(s) {users}",
        )

    def get(self, var_id: int) -> Optional[VarDiff]:
        """The comparison of ``var_id``, or None when it was not compared."""
        return self._diffs.get(var_id)

    def is_compared(self, var_id: int) -> bool:
        """True when ``var_id`` was dumped on both sides and compared."""
        d = self._diffs.get(var_id)
        return d is not None and d.status != "missing"

    def _sorted(self, ids: Iterable[int]) -> Tuple[int, ...]:
        return tuple(sorted(ids, key=lambda n: (self._order.get(n, 0), n)))

    def inputs(self, var_id: int) -> Tuple[int, ...]:
        """Vars ``var_id`` reads (its operator's inputs), in input order when known."""
        self._check(var_id)
        preds = self._preds[var_id]
        return tuple(sorted(preds, key=lambda u: (preds[u][1] is None, preds[u][1] or 0, u)))

    def consumers(self, var_id: int) -> Tuple[int, ...]:
        """Vars computed from ``var_id``, in execution order."""
        self._check(var_id)
        return self._sorted(self._succs[var_id])

    def ancestors(self, var_id: int) -> Tuple[int, ...]:
        """Every var ``var_id`` depends on, in execution order."""
        self._check(var_id)
        return self._sorted(reach(var_id, self._preds))

    def descendants(self, var_id: int) -> Tuple[int, ...]:
        """Every var that depends on ``var_id``, in execution order."""
        self._check(var_id)
        return self._sorted(reach(var_id, self._succs))

    def path(self, target: int, source: Optional[int] = None) -> List[int]:
        """A shortest dependency path ``source -> ... -> target``.

        Without ``source`` it starts at a model input: the nearest ``Host2DeviceCopy``
        ancestor, else the nearest ancestor without inputs (a constant), else ``target`` itself
        (of equally near ones, the first in execution order). One search from every start
        serves the paths of every var (made on first use): the paths to all roots cost one
        walk of the graph, whatever its depth.

        Raises:
            KeyError: unknown id, or no path from ``source`` to ``target``.
        """
        self._check(target)
        if source is not None:
            self._check(source)
            back = bfs_parents([target], self._preds)  # source -> ... -> target, read backwards
            if source not in back:
                raise KeyError(f"var {target} does not depend on var {source}")
            return [int(x) for x in reversed(path_to(source, back))]
        for parent in self._input_paths():
            if target in parent:
                return [int(x) for x in path_to(target, parent)]
        return [target]

    def _input_paths(self) -> Tuple[Dict[int, Optional[int]], Dict[int, Optional[int]]]:
        """The searches :meth:`path` reads: from the model inputs, then from every var without
        inputs (constants), each start preferred in execution order."""
        if self._paths is None:
            sources = sorted((n for n in self._preds if not self._preds[n]), key=lambda n: (self._order.get(n, 0), n))
            h2d = [n for n in sources if self.node(n).opr_type == "Host2DeviceCopy"]
            self._paths = (bfs_parents(h2d, self._succs), bfs_parents(sources, self._succs))
        return self._paths

    def subgraph(self, var_id: int, radius: int = 2) -> "nx.DiGraph":
        """The vars within ``radius`` edges of ``var_id`` (either direction), with their
        edges: the neighbourhood a report draws around a root."""
        self._check(var_id)
        seen = {var_id}
        frontier = [var_id]
        for _ in range(max(0, radius)):
            nxt = []
            for v in frontier:
                for w in list(self._preds[v]) + list(self._succs[v]):
                    if w not in seen:
                        seen.add(w)
                        nxt.append(w)
            frontier = nxt
        return self.graph.subgraph(seen).copy()

    # ------------------------------------------------------------------ roots

    def roots(self) -> Tuple[Root, ...]:
        """The roots, most likely origin first (see the module docstring for the order)."""
        if self._roots is not None:
            return self._roots
        # each operator's first place, filled in the one pass below: a root's operator is
        # placed by then (its first output comes before or is the root)
        opr_pos: Dict[str, int] = {}
        order = self._order
        found: List[Tuple[Tuple[Any, ...], Root]] = []
        # dump-only auto: vars that make error by the edge rule are roots behind divergent inputs too
        made = self.threshold.made if self.threshold is not None else {}
        by_id = self._diffs
        get = by_id.get
        # a var's inputs: its record's, unless the adjacency is made (a text dump adds edges)
        adj_preds = self._adj[0] if self._adj is not None else None
        for d in by_id.values():
            opr_pos.setdefault(d.opr or f"#{d.id}", order[d.id])
            if d.status in AGREEING:
                continue
            v = d.id
            preds = adj_preds[v] if adj_preds is not None else d.inputs
            # a compared input that is not ok explains this var (it is not a root); a loop, not
            # any() over a generator: most of tens of thousands of divergent vars stop here
            if v not in made:
                explained = False
                for u in preds:
                    e = get(u)
                    if e is not None and e.status not in AGREEING and e.status != "missing" and u != v:
                        explained = True
                        break
                if explained:
                    continue
            # (an input listed twice counts once: only the largest error is taken)
            compared = [e for u in preds if u != v for e in (get(u),) if e is not None and e.status != "missing"]
            # the largest input error, the smallest id among equals: tuples compared natively
            errs = [(u.max_err, -u.id) for u in compared if u.max_err is not None]
            in_err: Optional[float] = None
            worst_in: Optional[int] = None
            if errs:
                in_err, minus_id = max(errs)
                worst_in = -minus_id
            amp: Optional[float] = None
            if d.max_err is not None and in_err is not None:
                amp = d.max_err / in_err if in_err > 0 else (math.inf if d.max_err > 0 else 0.0)
            pos = opr_pos[d.opr or f"#{d.id}"]
            rank = 0 if d.status in _VALUE_PROBLEMS else 1
            amp_key = -(amp if amp is not None else math.inf)
            # a root making 100x what its inputs explain goes before one making 2x, whatever the order
            margin = made.get(d.id)
            mkey = -math.floor(math.log10(margin)) if margin else 0
            r = frozen_record(Root, {
                "id": d.id, "name": d.name, "opr": d.opr, "opr_type": d.opr_type, "status": d.status, "dtype": d.dtype,
                "max_err": d.max_err, "input_max_err": in_err, "amplification": amp, "worst_input": worst_in,
                "order": pos, "note": d.note,
            })
            found.append(((rank, mkey, pos, amp_key, d.id), r))
        found.sort(key=lambda t: t[0])
        self._roots = tuple(r for _, r in found)
        return self._roots

    def root_ids(self) -> Tuple[int, ...]:
        """Ids of :meth:`roots`, in the same order."""
        return tuple(r.id for r in self.roots())

    def counts(self) -> Dict[str, int]:
        """Number of compared vars per status."""
        return count_statuses(self._diffs.values())

    @property
    def diverged(self) -> bool:
        """True when any compared var does not agree (commands exit 1)."""
        return any(d.status not in AGREEING for d in self._diffs.values())


__all__ = ["Root", "VarTree"]
