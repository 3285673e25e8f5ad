"""Why a shake root wobbles, and where every other diverging var got it from: one fixed
vocabulary (``docs/jitter-causes.md``), decided per root and per var that is not ok.

A root's cause comes from what differs between the runs that disagree there: the algorithm
MegEngine chose (read from each run's fast-run cache), the thread count or the batch position
the mode changed, or nothing at all (the same algorithm gave another result: a
non-deterministic kernel, which ``--reproducible`` and pinned reruns confirm). Every other var
that is not ok inherits from its nearest root upstream.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Dict, List, Mapping, Optional, Sequence, Tuple

from lar_prec.workflows.shake.algos import grouped

ALGORITHM = "algorithm differs between runs"
SAME_ALGORITHM = "same algorithm, result differs"
THREADS = "thread count"
BATCH = "batch position"
INHERITED = "inherited from root"
OBSERVER = "the dump perturbs the run"
#: the whole vocabulary: a ``cause`` in the JSON is always one of these
CAUSES = (ALGORITHM, SAME_ALGORITHM, THREADS, BATCH, INHERITED, OBSERVER)

#: what a run is to the others: run 1, a repeat of run 1's setting, or a changed setting
BASE, REPEAT, THREAD_RUN, BATCH_RUN = "base", "repeat", "threads", "batch"


@dataclass(frozen=True)
class Cause:
    """One var's cause: a phrase of :data:`CAUSES`, what it rests on, and for an inherited
    var the root it comes from."""

    cause: str
    detail: str = ""
    root: Optional[int] = None

    def to_json(self) -> Dict[str, object]:
        d: Dict[str, object] = {"cause": self.cause, "cause_detail": self.detail}
        if self.root is not None:
            d["cause_root"] = self.root
        return d

    def text(self, names: Mapping[int, str]) -> str:
        """One line for people: the phrase, the root's name when inherited, then the detail."""
        head = self.cause
        if self.cause == INHERITED and self.root is not None:
            head = f"{INHERITED} {names.get(self.root, 'var')} (var {self.root})"
        return f"{head}: {self.detail}" if self.detail and self.cause != INHERITED else head


@dataclass(frozen=True)
class Evidence:
    """What the shake knows beyond the dumps: each run's role, the algorithms per var (None:
    they cannot be told, and ``unknown_why`` says why), the settings of the runs, and what the
    reruns (pinned algorithms, ``--reproducible``) showed."""

    roles: Mapping[str, str]
    algorithms: Optional[Mapping[int, Mapping[str, str]]]
    unknown_why: str = ""
    setting: Mapping[str, str] = None  # type: ignore[assignment]
    reruns: Tuple[str, ...] = ()


def _runs(labels: Sequence[str], limit: int = 6) -> str:
    return ", ".join(labels[:limit]) + (f" and {len(labels) - limit} more" if len(labels) > limit else "")


def root_cause(vid: int, groups: Sequence[Sequence[str]], ev: Evidence) -> Cause:
    """The cause of root ``vid``; ``groups``: the runs grouped by the result they gave for it,
    run 1's group first."""
    base_group = list(groups[0]) if groups else []
    differing = [lbl for g in groups[1:] for lbl in g]
    algos = (ev.algorithms or {}).get(vid) if ev.algorithms is not None else None
    if algos:
        base = next((algos[lbl] for lbl in base_group if lbl in algos), None)
        other = [lbl for lbl in differing if lbl in algos and algos[lbl] != base]
        same = [lbl for lbl in differing if lbl in algos and algos[lbl] == base]
        if other:
            detail = grouped(algos, [*base_group, *differing])
            if same:
                detail += f" ({_runs(same)} differ with run 1's algorithm too)"
            return Cause(ALGORITHM, detail)
    repeats = [lbl for lbl in differing if ev.roles.get(lbl) == REPEAT]
    changed = [lbl for lbl in differing if ev.roles.get(lbl) in (THREAD_RUN, BATCH_RUN)]
    setting = ev.setting or {}
    if changed and not repeats:
        kind = THREADS if ev.roles.get(changed[0]) == THREAD_RUN else BATCH
        results = [[setting.get(lbl, lbl) for lbl in g] for g in groups[1:]]
        what = "; ".join(f"{', '.join(r[:6])}{' ...' if len(r) > 6 else ''}" for r in results)
        detail = (f"run 1 ({setting.get(base_group[0], base_group[0]) if base_group else '?'}) gives one result, "
                  f"{what} {'another' if len(results) == 1 else 'others, one per group'}")
        if kind == BATCH and len(results) == 1 and len(changed) == sum(1 for r in ev.roles.values() if r == BATCH_RUN):
            detail += " (the same at every position: the batch size changes the result, not the position)"
        held = [lbl for lbl in base_group if ev.roles.get(lbl) == REPEAT]
        if held:
            detail += f"; a repeat of run 1's setting ({_runs(held)}) gives run 1's result"
        if algos and changed[0] in algos:
            detail += f"; algorithms: {grouped(algos)}"
        elif ev.algorithms is None:
            detail += "; whether the algorithm changes with it is not known (MegEngine's heuristic choice)"
        return Cause(kind, detail)
    if algos:
        name = next(iter(algos.values()))
        how = f"{name} in every run"
    elif ev.algorithms is not None:
        how = "an operator without an algorithm choice (one kernel)"
    else:
        how = f"algorithm not known ({ev.unknown_why or 'no cache'}); taken to be the same: same binary, flags and machine"
    detail = f"{how}; differs in {_runs(differing)}"
    if changed and repeats:
        detail += f" (repeats of run 1's setting differ too, so not only {ev.roles.get(changed[0])})"
    if ev.reruns:
        detail += "; " + "; ".join(ev.reruns)
    return Cause(SAME_ALGORITHM, detail)


def assign(vars_: Sequence[object], root_ids: Sequence[int], groups: Mapping[int, Sequence[Sequence[str]]],
           ev: Evidence) -> Dict[int, Cause]:
    """A :class:`Cause` for every root and every var that is not ok (``vars_`` in execution
    order, with ``id``, ``inputs``, ``status``, ``opr_type``): roots by :func:`root_cause`, the
    others inherited from their nearest root upstream (the most likely one when several reach
    it). A var no root reaches (e.g. a var missing in some run) gets none."""
    rank = {rid: k for k, rid in enumerate(root_ids)}
    out: Dict[int, Cause] = {}
    root_of: Dict[int, int] = {}
    for v in vars_:
        vid = int(getattr(v, "id"))
        if vid in rank:
            out[vid] = root_cause(vid, groups.get(vid, ()), ev)
            root_of[vid] = vid
            continue
        if getattr(v, "status") == "ok":
            continue
        up = [root_of[u] for u in getattr(v, "inputs") if u in root_of]
        if not up:
            continue
        rid = min(up, key=lambda r: rank[r])
        root_of[vid] = rid
        detail = ""
        algos = (ev.algorithms or {}).get(vid)
        if algos and len(set(algos.values())) > 1:
            detail = "its own algorithm differs too: " + grouped(algos)
        out[vid] = Cause(INHERITED, detail, rid)
    return out


def model_cause(root_causes: Sequence[Cause], observer_differs: bool) -> Optional[str]:
    """The report's one ``cause`` line: the dump perturbing the run first, then the causes of
    the roots, most likely root first (each phrase once, with how many roots have it)."""
    parts: List[str] = [OBSERVER] if observer_differs else []
    counts: Dict[str, int] = {}
    for c in root_causes:
        counts[c.cause] = counts.get(c.cause, 0) + 1
    if len(counts) == 1 and not parts:
        return next(iter(counts))
    parts += [f"{c} ({n} root{'s' if n > 1 else ''})" for c, n in counts.items()]
    return "; ".join(parts) if parts else None
