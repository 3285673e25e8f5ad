"""The result of an analysis as one typed record, and its one JSON form.

Every command (``naive-vs-default``, ``shake``, ``compare``, ``tree``) builds a :class:`Report`
with :func:`from_tree` and hands it to the same writers and renderers:

- JSON (this module): :meth:`Report.to_json`, :func:`write_json`, :func:`dumps`,
  :func:`read_json`. The design.md keys with their exact meanings, plus extra keys (verdict,
  cause, notes, summary, per-variable extras). NaN and Inf become ``null`` (strict JSON).
  The per-variable keys come from one table, :data:`VAR_FIELDS`, which also defines
  :class:`ReportVar` and how one is built from a compare ``VarDiff`` (:func:`var_from_diff`).
- terminal (:mod:`lar_prec.report.terminal`): :func:`render_terminal`, :func:`render_csv`.
- HTML (:mod:`lar_prec.report.html`): :func:`render_html`, :func:`write_html`; the page's
  HTML, CSS and JS are the files of ``lar_prec/page/``.

Example::

    report = from_tree(VarTree.from_folders("a", "b"), command="compare")
    render_terminal(report, Console(stderr=True))
    write_json(report, "-")
    write_html(report, "report.html")
    sys.exit(exit_code(report))
"""
from __future__ import annotations

import io
import json
import logging
import operator
import sys
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any, Callable, Dict, Iterator, List, Mapping, Optional, Sequence, Tuple, Union

from lar_prec._lazy import LazyModule
from lar_prec.errors import UsageError
from lar_prec.inputspec import read_json_file
from lar_prec.outputs import atomic_writer
from lar_prec.report.records import SCHEMA, VAR_FIELDS, ReportRoot, ReportRun, ReportThreshold, ReportVar, _fields_json, _finite, _merge_extra, _req, _unknown, fmt_err, root_from_tree, run_from_result, var_from_diff
from lar_prec.report.json_text import roots_json_texts, vars_json_texts
from lar_prec.compare.records import AGREEING, INDEX_EQUIVALENT, count_statuses
from lar_prec.diagnosis.tree import VarTree
from lar_prec.diagnosis.modules import modules_of
from lar_prec.report.sources import sources_json, sources_verdict

if TYPE_CHECKING:  # type names only
    from lar_prec.compare.records import Comparison, VarDiff
    from lar_prec.diagnosis.local_analysis import LocalAnalysis
    from lar_prec.report import local as report_local
    from lar_prec.run.record import RunResult
else:  # local error's columns only with a model: a dump-only compare starts ~10 ms sooner without them
    report_local = LazyModule("lar_prec.report.local")

log = logging.getLogger(__name__)

__all__ = [
    "Report",
    "DiffVars",
    "auto_verdict",
    "from_tree",
    "threshold_from",
    "exit_code",
    "dumps",
    "write_json",
    "not_ok_positions",
    "read_json",
]


class DiffVars(Sequence[ReportVar]):
    """The vars of a comparison as a read-only sequence of :class:`ReportVar`, each made from
    its ``VarDiff`` when accessed.

    ``lar-prec compare`` on tens of thousands of vars would otherwise hold a second copy of
    every record; the JSON writer takes each var's dict straight from its VarDiff
    (:meth:`iter_json`), and the renderers read the VarDiffs' shared attribute names
    (:meth:`records`).
    """

    def __init__(self, diffs: Sequence["VarDiff"], counts: Optional[Mapping[str, int]] = None) -> None:
        self._diffs = diffs
        # vars per status when the caller counted them (VarTree.counts, the same count_statuses)
        self._counts: Optional[Dict[str, int]] = dict(counts) if counts is not None else None
        self._not_ok: Optional[List[int]] = None

    def __len__(self) -> int:
        return len(self._diffs)

    def __getitem__(self, i: Any) -> Any:
        if isinstance(i, slice):
            return tuple(var_from_diff(d) for d in self._diffs[i])
        return var_from_diff(self._diffs[i])

    def __iter__(self) -> Iterator[ReportVar]:
        return map(var_from_diff, self._diffs)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, (tuple, DiffVars)) and tuple(self) == tuple(other)

    __hash__ = None  # type: ignore[assignment]

    def iter_json(self) -> Iterator[Dict[str, Any]]:
        """Each var's JSON object, made as it is consumed."""
        return (_fields_json(d, VAR_FIELDS) for d in self._diffs)

    def iter_json_texts(self) -> Iterator[List[str]]:
        """Each var's JSON object as text (what the writer encodes :meth:`iter_json`'s to),
        a list per chunk of vars."""
        return vars_json_texts(self._diffs)

    def records(self) -> Sequence["VarDiff"]:
        """The VarDiffs (NaN not yet None): cheap to scan for status and error."""
        return self._diffs

    def status_counts(self) -> Dict[str, int]:
        """Vars per status (:func:`~lar_prec.compare.records.count_statuses`), counted once: the
        reports a command derives from one another (verdict, exit code) share these vars."""
        if self._counts is None:
            self._counts = count_statuses(self._diffs)
        return self._counts

    def not_ok(self) -> List[int]:
        """:func:`not_ok_positions` of these vars, found once (the verdict and the terminal's
        table of the most divergent read them; the reports derived from one share them)."""
        if self._not_ok is None:
            self._not_ok = _not_ok(self._diffs)
        return self._not_ok


def _records(vars_: Sequence[ReportVar]) -> Sequence[Any]:
    """What to scan for status, error and id without building ReportVars (see DiffVars)."""
    return vars_.records() if isinstance(vars_, DiffVars) else vars_


_STATUS = operator.attrgetter("status")


def _not_ok(recs: Sequence[Any]) -> List[int]:
    return [i for i, s in enumerate(map(_STATUS, recs)) if s not in AGREEING]


def not_ok_positions(vars_: Sequence[ReportVar]) -> List[int]:
    """The positions of the vars that do not agree (status not in :data:`AGREEING`), in order:
    what the verdict and the most divergent vars are made from (of tens of thousands of vars,
    usually few)."""
    return vars_.not_ok() if isinstance(vars_, DiffVars) else _not_ok(_records(vars_))


#: roots whose operator's module is told (each looks at its inputs' and consumers' names)
MODULE_ROOTS = 20

_REPORT_KEYS = ("schema", "command", "threshold", "vars", "roots", "runs", "verdict", "cause", "notes", "model",
                "summary")


@dataclass(frozen=True)
class Report:
    """Everything a command found, ready to render.

    ``vars`` is in execution order (a tuple, or a :class:`DiffVars`); ``roots`` is ordered
    most likely origin first. ``verdict`` is the one-line answer (empty: :func:`auto_verdict`
    makes one). ``cause`` is the ``shake`` diagnosis, None elsewhere. ``extra`` keeps further
    top-level keys (e.g. ``dirs``), written flat in the JSON.
    """

    command: str
    threshold: ReportThreshold
    vars: Sequence[ReportVar] = ()
    roots: Tuple[ReportRoot, ...] = ()
    runs: Tuple[ReportRun, ...] = ()
    verdict: str = ""
    cause: Optional[str] = None
    notes: Tuple[str, ...] = ()
    model: Optional[str] = None
    extra: Mapping[str, Any] = field(default_factory=dict)
    schema: str = SCHEMA

    def _cached(self, name: str, make: Callable[[], Any]) -> Any:
        # frozen dataclass: cache outside the fields, like functools.cached_property does
        v = self.__dict__.get(name)
        if v is None:
            v = self.__dict__[name] = make()
        return v

    def var(self, var_id: int) -> Optional[ReportVar]:
        """The variable with id ``var_id``, or None."""
        rec = self._cached("_by_id", lambda: {int(v.id): v for v in _records(self.vars)}).get(var_id)
        if rec is None or isinstance(rec, ReportVar):
            return rec
        return var_from_diff(rec)


    def status_counts(self) -> Dict[str, int]:
        """Number of variables per status, in :data:`STATUSES` order, zero counts left out."""
        def count() -> Dict[str, int]:
            counts = self.vars.status_counts() if isinstance(self.vars, DiffVars) else count_statuses(self.vars)
            return {s: n for s, n in counts.items() if n}
        return dict(self._cached("_counts", count))

    @property
    def n_not_ok(self) -> int:
        """How many variables are not ``ok``."""
        return sum(n for s, n in self.status_counts().items() if s not in AGREEING)

    def iter_vars_json(self) -> Iterator[Dict[str, Any]]:
        """The ``vars[]`` objects, made one at a time as they are consumed."""
        if isinstance(self.vars, DiffVars):
            return self.vars.iter_json()
        return (v.to_json() for v in self.vars)

    def iter_vars_texts(self) -> Iterator[List[str]]:
        """The ``vars[]`` objects as JSON text (:func:`var_json_text`), a list per chunk."""
        if isinstance(self.vars, DiffVars):
            return self.vars.iter_json_texts()
        return vars_json_texts(self.vars)

    def json_items(self) -> Dict[str, Any]:
        """The top-level JSON object with ``vars`` as an iterator (for a streaming writer)."""
        d = {
            "schema": self.schema,
            "command": self.command,
            "threshold": self.threshold.to_json(),
            "vars": self.iter_vars_json(),
            "roots": (r.to_json() for r in self.roots),  # made as consumed (the writer has its own)
            "runs": [r.to_json() for r in self.runs],
            "verdict": self.verdict or auto_verdict(self),
            "cause": self.cause,
            "notes": list(self.notes),
            "model": self.model,
            "summary": {"n_vars": len(self.vars), "n_not_ok": self.n_not_ok, "by_status": self.status_counts(),
                        "n_roots": len(self.roots), "exit_code": exit_code(self)},
        }
        return _merge_extra(d, self.extra)

    def to_json(self) -> Dict[str, Any]:
        """The design.md report object: ``schema, command, threshold, vars, roots, runs`` with
        their exact meanings, then ``verdict, cause, notes, model, summary`` and the extras.
        NaN/Inf anywhere become null."""
        d = self.json_items()
        d["vars"] = list(d["vars"])
        d["roots"] = list(d["roots"])
        return d

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> "Report":
        """Read a report back from :meth:`to_json` output (any ``lar-prec.report/1`` object);
        ``summary`` is recomputed.

        Raises:
            UsageError: not a ``lar-prec.report/1`` object, or a required key is missing.
        """
        schema = _req(d, "schema", "report")
        if schema != SCHEMA:
            raise UsageError(f"report JSON: schema is {schema!r}, this lar-prec reads {SCHEMA!r}")
        for key in ("vars", "roots", "runs", "notes"):
            if not isinstance(d.get(key) or [], list):
                raise UsageError(f"report JSON: {key} must be a list")
        return cls(
            schema=schema,
            command=str(_req(d, "command", "report")),
            threshold=ReportThreshold.from_json(_req(d, "threshold", "report")),
            vars=tuple(ReportVar.from_json(v) for v in _req(d, "vars", "report")),
            roots=tuple(ReportRoot.from_json(r) for r in _req(d, "roots", "report")),
            runs=tuple(ReportRun.from_json(r) for r in d.get("runs") or ()),
            verdict=str(d.get("verdict") or ""),
            cause=None if d.get("cause") is None else str(d["cause"]),
            notes=tuple(str(n) for n in d.get("notes") or ()),
            model=None if d.get("model") is None else str(d["model"]),
            extra=_unknown(d, _REPORT_KEYS),
        )


# ============================================================================ verdict, exit code


def exit_code(report: Report) -> int:
    """The design.md result code: 0 when every variable is ``ok``, 1 when any is not."""
    if report.command == "sweep" and "exit_code" in report.extra:
        # a sweep's findings include options that crash or hang, which have no variables
        return 1 if report.extra["exit_code"] else 0
    return 1 if report.n_not_ok else 0


def auto_verdict(report: Report, *, by_local: bool = False) -> str:
    """A one-line verdict from the counts and the first root, for reports built without one
    (``by_local``: statuses and roots come from local error). Weights or inputs that differ
    between the runs are said first (:mod:`lar_prec.compare.sources`)."""
    first = sources_verdict(report.extra)
    text = _counts_verdict(report, by_local=by_local)
    local = report.extra.get("local")
    not_judged = local.get("not_judged") if isinstance(local, dict) else None
    if not_judged:  # counted, never absorbed as noise (issue 51 #1)
        whys = sorted({f"{n.get('opr_type')}: {n.get('why')}" for n in not_judged})
        text += (f"; {len(not_judged)} operator(s) not judged by local error ({'; '.join(whys[:2])}"
                 f"{' ...' if len(whys) > 2 else ''})")
    n_index = report.status_counts().get(INDEX_EQUIVALENT, 0)
    if n_index:  # agreeing, but not equal: said (docs/json.md)
        text += (f"; {n_index} index output(s) differ but index values that agree (status {INDEX_EQUIVALENT}: "
                 f"ties may reorder)")
    return f"{first}; {text}" if first else text


def _counts_verdict(report: Report, *, by_local: bool) -> str:
    n = len(report.vars)
    bad = report.n_not_ok
    thr = fmt_err(report.threshold.value)
    if not bad:
        # each var is held to its own threshold (scaled by its magnitude, or widened by the
        # rounding its inputs carry): say so when some ok vars sit above the headline value
        per = report.threshold.per_dtype
        above = sum(1 for v in _records(report.vars) if v.status == "ok" and v.max_err is not None
                    and v.max_err > per.get(v.dtype, report.threshold.value))
        if above and by_local:
            return (f"no divergence: every operator's local error within its noise floor ({above} of {n} variables "
                    f"above the threshold {thr} carry that rounding from their inputs)")
        if above:
            return (f"no divergence: all {n} variables within their thresholds ({thr}; {above} above it carry "
                    f"rounding from their inputs, which is not divergence: see the threshold's reason)")
        return f"no divergence: all {n} variables within threshold {thr}"
    per = report.threshold.per_dtype
    over = within = nonfinite = 0
    recs = _records(report.vars)  # not ReportVars (20,000 of them cost 1 s)
    for i in not_ok_positions(report.vars):
        v = recs[i]
        st, err = v.status, v.max_err
        if err is None:
            nonfinite += st == "nonfinite"
        elif err > per.get(v.dtype, report.threshold.value):
            over += 1
        elif st == "divergent":
            within += 1
    parts = [f"{over} above the threshold {thr}"] if over else []
    if within:  # held to their own, lower threshold: say by what, as the threshold line does not
        parts.append(f"{within} within it but above {'their local floor' if by_local else 'what their inputs explain'}")
    if nonfinite:
        parts.append(f"{nonfinite} with NaN/Inf on one side")
    others = bad - over - within - nonfinite  # missing, shape or dtype mismatches
    if others:
        parts.append(f"{others} not compared (missing, another shape or dtype)")
    text = f"divergence found: {bad} of {n} variables not ok ({'; '.join(parts) or 'threshold ' + thr})"
    if report.roots:
        r = report.roots[0]
        more = f" (+{len(report.roots) - 1} more)" if len(report.roots) > 1 else ""
        tests = r.extra.get("tests") if r.extra else None  # by local error: which tests it failed (issue 57)
        failed = f", failed: {', '.join(str(t).replace('_', ' ') for t in tests)}" if tests else ""
        text += f"; root: {r.name} ({r.opr_type}, var {r.id}{failed}){more}"
    return text


# ============================================================================ JSON


_END = object()


def _write_stream(report: Report, out: IO[str]) -> None:
    """The report as JSON, one top-level key and one list item (a var, a root) per line.

    Streamed item by item (each var's dict is made as it is written: no second copy of a
    report with tens of thousands of vars), and through json's C encoder, which ``indent``
    would turn off: the pure-Python one took longer than comparing 20,000 small vars.
    """
    enc = json.JSONEncoder(allow_nan=False).encode  # ASCII: safe on any stdout encoding
    out.write("{")
    sep = "\n"
    for k, v in report.json_items().items():
        out.write(sep + " " + enc(k) + ": ")
        sep = ",\n"
        if k in ("vars", "roots"):  # tens of thousands of vars, thousands of roots where a whole model diverges
            _write_texts(out, report.iter_vars_texts() if k == "vars" else roots_json_texts(report.roots))
        elif isinstance(v, (list, Iterator)):
            items = iter(v)
            first = next(items, _END)
            if first is _END:
                out.write("[]")
                continue
            out.write("[\n  " + enc(first))
            for x in items:
                out.write(",\n  " + enc(x))
            out.write("\n ]")
        else:
            out.write(enc(v))
    out.write("\n}\n")


def _write_texts(out: IO[str], chunks: Iterator[List[str]]) -> None:
    """A JSON list of items already written as text, one per line, a chunk at a time."""
    lead = "[\n  "
    for texts in chunks:
        if texts:
            out.write(lead)  # apart: not a copy of each chunk's text to put it in front
            out.write(",\n  ".join(texts))
            lead = ",\n  "
    out.write("[]" if lead == "[\n  " else "\n ]")


def dumps(report: Report) -> str:
    """The report as strict JSON text (no NaN/Infinity tokens), as :func:`write_json` writes it."""
    buf = io.StringIO()
    _write_stream(report, buf)
    return buf.getvalue()


def write_json(report: Report, path_or_dash: Union[str, Path], *, stream: Optional[IO[str]] = None) -> Optional[Path]:
    """Write the report as JSON to a file (atomically), or to ``stream`` (default stdout) for ``-``.

    Returns:
        The path written, or None for ``-``.

    Raises:
        UsageError: the file cannot be written (the message names it).
    """
    if str(path_or_dash) == "-":
        out = stream if stream is not None else sys.stdout
        _write_stream(report, out)
        out.flush()
        return None
    p = Path(path_or_dash)
    p.parent.mkdir(parents=True, exist_ok=True)
    with atomic_writer(p, what="JSON report") as f:
        _write_stream(report, f)
    log.info("wrote JSON report %s", p)
    return p


def read_json(path: Union[str, Path]) -> Report:
    """Read a report written by :func:`write_json`.

    Raises:
        UsageError: the file is missing, is not JSON, or is not a lar-prec report.
    """
    p = Path(path)
    data = read_json_file(p, "report")
    if not isinstance(data, dict):
        raise UsageError(f"report {p} is not a lar-prec report: expected a JSON object, found {type(data).__name__}")
    try:
        return Report.from_json(data)
    except UsageError as exc:
        raise UsageError(f"report {p}: {exc}") from None
    except (TypeError, ValueError, KeyError, AttributeError) as exc:  # a value of the wrong type in the file
        raise UsageError(f"report {p} is not a lar-prec report: {type(exc).__name__}: {exc}") from None


# ============================================================================ building from a tree


def threshold_from(thr: Any) -> ReportThreshold:
    """The :class:`ReportThreshold` of a compare ``Threshold`` (None: the text of a
    ``tree`` run does not say which one was used)."""
    if thr is None:
        return ReportThreshold(float("nan"), "fixed")
    return ReportThreshold.from_json({**thr.to_json(), "value": _finite(thr.value)})


def from_tree(
    tree: Union["VarTree", "Comparison"],
    *,
    command: str = "compare",
    runs: Sequence[Union[ReportRun, "RunResult"]] = (),
    verdict: str = "",
    cause: Optional[str] = None,
    notes: Sequence[str] = (),
    model: Optional[str] = None,
    extra: Optional[Mapping[str, Any]] = None,
    max_paths: int = 50,
    lazy_vars: bool = False,
    local: "Optional[LocalAnalysis]" = None,
    roots_by: Optional[str] = None,
    local_off: Optional[str] = None,
    runs_differing: Optional[Mapping[int, int]] = None,
) -> Report:
    """The :class:`Report` of a :class:`lar_prec.vartree.VarTree` (or a Comparison): the one
    way every command builds its report.

    Args:
        tree: the analysed tree.
        command: ``naive-vs-default``, ``shake``, ``compare`` or ``tree``.
        runs: the runs, as :class:`ReportRun` or :class:`lar_prec.runner.RunResult`.
        verdict: the one-line answer; empty makes :func:`auto_verdict` decide.
        cause: the ``shake`` diagnosis.
        notes: remarks added after the comparison's own notes.
        model: the model path, for titles.
        extra: more top-level JSON fields (``counts``, ``diverged`` and ``dirs`` or
            ``source`` are always there).
        max_paths: how many roots get a path (each costs one graph search).
        lazy_vars: ``vars`` is a :class:`DiffVars` over the tree's diffs (no second copy);
            ignored when local error adds columns.
        local: the analysis' local error (:mod:`lar_prec.report.local` adds its columns and,
            with ``roots_by="local"``, its roots and statuses).
        roots_by: ``local``, ``band`` or ``fixed`` (:meth:`ThresholdSpec.roots_by`); None: no
            local columns at all (``compare`` without ``--model``, ``tree``).
        local_off: why local error was not measured (a note and ``local.why``).
        runs_differing: shake: how many runs differ from run 1, per var id.
    """

    if not isinstance(tree, VarTree):
        tree = VarTree.from_comparison(tree)
    roots = []
    tree_roots = tree.roots()
    # the module of the first roots' operators (a name MegEngine made points at its input's)
    modules = modules_of([r.id for r in tree_roots[:MODULE_ROOTS]], tree.diffs, tree.get) if tree_roots else {}
    for k, r in enumerate(tree_roots):
        path: Sequence[int] = ()
        if k < max_paths:
            try:
                path = tree.path(r.id)
            except KeyError:  # a root not reachable from any model input
                path = ()
        roots.append(root_from_tree(r, path, modules.get(r.id)))
    tree_counts = tree.counts()
    cmp = tree.comparison
    sources = [tree.get(v) for v in cmp.sources] if cmp is not None else []
    top: Dict[str, Any] = {"counts": tree_counts, "diverged": tree.diverged, **sources_json(sources)}
    cmp_notes: Tuple[str, ...] = ()
    if cmp is not None:
        top["dirs"] = {"a": str(cmp.dir_a), "b": str(cmp.dir_b)}
        mode = getattr(cmp, "pairing", "id")
        if mode != "id":  # by name across rewritten graphs: what has no partner, and why
            left = getattr(cmp, "unpaired", ())
            top["pairing"] = {"mode": mode, **{f"unpaired_{side}": [{"id": i, "name": n, "reason": r}
                                                                   for sd, i, n, r in left if sd == side]
                                               for side in ("a", "b")}}
        cmp_notes = tuple(cmp.notes)
    elif tree.source:
        top["source"] = tree.source
    top.update(extra or {})
    vars_: Sequence[ReportVar]
    if roots_by is None and not runs_differing and lazy_vars:
        vars_ = DiffVars(tree.diffs, counts=tree_counts)
    else:
        vars_ = tuple(var_from_diff(d) for d in tree.diffs)
    if runs_differing is not None:
        vars_ = tuple(replace(v, runs_differing=runs_differing.get(v.id, 0)) for v in vars_)
    all_notes = cmp_notes + tuple(notes)
    by_local = False
    if roots_by is not None:
        cols = report_local.local_columns(vars_, tuple(roots), local, roots_by=roots_by, off=local_off, tree=tree)
        vars_, roots, all_notes = cols.vars, list(cols.roots), all_notes + cols.notes
        top.update(cols.extra)
        by_local = local is not None and roots_by == "local"
    rep = Report(
        command=command,
        threshold=threshold_from(tree.threshold),
        vars=vars_,
        roots=tuple(roots),
        runs=tuple(r if isinstance(r, ReportRun) else run_from_result(r) for r in runs),
        cause=cause,
        notes=all_notes,
        model=model,
        extra=top,
    )
    if by_local:  # statuses changed: the counts follow them
        counts = {**{k: 0 for k in top.get("counts", {})}, **rep.status_counts()}
        rep = replace(rep, extra={**rep.extra, "counts": counts, "diverged": rep.n_not_ok > 0})
    return replace(rep, verdict=(verdict or auto_verdict(rep, by_local=by_local)) + (" [roots by local error]" if by_local else ""))



