"""The result of an analysis as one typed record, and its three renderings: JSON, terminal, HTML.

:class:`Report` mirrors the JSON contract of ``shared/design.md`` field by field, so every
command (``naive-vs-default``, ``shake``, ``compare``, ``tree``) builds one and hands it to
the same renderers:

- :meth:`Report.to_json` / :func:`write_json`: exactly the design keys, plus extra keys
  (verdict, cause, notes, per-variable extras). NaN and Inf become ``null`` so the output is
  strict JSON; :meth:`Report.from_json` reads it back.
- :func:`render_terminal`: a verdict line, the threshold and why it was chosen, the roots with
  their amplification, the path from a model input to each root and the most divergent
  variables, written to a rich ``Console`` the caller owns (this module never prints).
- :func:`write_html`: one self-contained offline file (no network fetches, enforced by a
  Content-Security-Policy) with an error-vs-execution-order chart, a sortable, filterable,
  paginated table, the graph neighbourhood of every root and the runs with their commands.

Example::

    report = Report(command="compare", threshold=ReportThreshold(1e-5, "auto"), vars=..., roots=...)
    render_terminal(report, Console(stderr=True))
    write_json(report, "-")
    write_html(report, "report.html")
    sys.exit(exit_code(report))
"""
from __future__ import annotations

import csv
import html
import io
import json
import logging
import math
import re
import shlex
import sys
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any, Callable, Dict, Iterable, List, Mapping, Optional, Sequence, Tuple, Union

from lar_prec.errors import UsageError

if TYPE_CHECKING:  # imported only when used: rich to render, vartree/runner to build
    from rich.console import Console

    from lar_prec.compare import Comparison, VarDiff
    from lar_prec.runner import RunResult
    from lar_prec.vartree import Root, VarTree

log = logging.getLogger(__name__)

__all__ = [
    "SCHEMA",
    "STATUSES",
    "COMMANDS",
    "ReportThreshold",
    "ReportVar",
    "ReportRoot",
    "ReportRun",
    "Report",
    "auto_verdict",
    "from_tree",
    "to_report_json",
    "render_table",
    "render_csv",
    "CSV_FIELDS",
    "run_from_result",
    "fmt_err",
    "exit_code",
    "dumps",
    "write_json",
    "read_json",
    "render_terminal",
    "render_html",
    "write_html",
]

SCHEMA = "lar-prec.report/1"
#: every value a variable's ``status`` may take (design.md)
STATUSES = ("ok", "divergent", "nonfinite", "shape_mismatch", "dtype_mismatch", "missing")
COMMANDS = ("naive-vs-default", "shake", "compare", "tree")

Number = Union[int, float]


# ============================================================================ helpers


def _finite(x: Any) -> Optional[float]:
    """float(x), or None for None/NaN/Inf: JSON has no NaN, and the contract says null."""
    if x is None:
        return None
    try:
        f = float(x)
    except (TypeError, ValueError):
        return None
    return f if math.isfinite(f) else None


def _clean(obj: Any) -> Any:
    """Recursively make ``obj`` strict-JSON-safe: NaN/Inf -> None, tuples -> lists,
    numpy scalars -> Python numbers, unknown objects -> str."""
    if obj is None or isinstance(obj, (bool, str)):
        return obj
    if isinstance(obj, int):
        return int(obj)
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else None
    if isinstance(obj, Mapping):
        return {str(k): _clean(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_clean(v) for v in obj]
    # numpy scalars and 0-d arrays without importing numpy here
    item = getattr(obj, "item", None)
    if callable(item):
        try:
            return _clean(item())
        except (TypeError, ValueError):
            pass
    if isinstance(obj, Path):
        return str(obj)
    return str(obj)


def _ints(x: Any, what: str) -> Tuple[int, ...]:
    if x is None:
        return ()
    if not isinstance(x, (list, tuple)):
        raise UsageError(f"report JSON: {what} must be a list of integers, got {type(x).__name__}")
    try:
        return tuple(int(v) for v in x)
    except (TypeError, ValueError):
        raise UsageError(f"report JSON: {what} must be a list of integers, got {x!r:.80}") from None


def _req(d: Mapping[str, Any], key: str, where: str) -> Any:
    if not isinstance(d, Mapping):
        raise UsageError(f"report JSON: {where} must be an object, got {type(d).__name__}")
    if key not in d:
        raise UsageError(f"report JSON: {where} has no {key!r} (keys: {', '.join(sorted(d))})")
    return d[key]


def _opt_float(d: Mapping[str, Any], key: str) -> Optional[float]:
    return _finite(d.get(key))


def fmt_err(x: Optional[float]) -> str:
    """Short human form of an error value: ``—`` for unknown, ``0`` for exact, 3 significant digits."""
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return "—"
    if x == 0:
        return "0"
    if isinstance(x, float) and math.isinf(x):
        return "inf" if x > 0 else "-inf"
    a = abs(x)
    if 1e-3 <= a < 1e4:
        return f"{x:.3g}"
    return f"{x:.2e}"


# ============================================================================ records


def _merge_extra(d: Dict[str, Any], extra: Mapping[str, Any]) -> Dict[str, Any]:
    """Add ``extra`` at the top level of ``d`` (JSON stays flat), never over a known key."""
    for k, v in extra.items():
        if k not in d:
            d[str(k)] = _clean(v)
    return d


def _unknown(d: Mapping[str, Any], known: Iterable[str]) -> Dict[str, Any]:
    """The keys of ``d`` a record has no field for: kept so a round trip loses nothing."""
    ks = set(known)
    return {k: v for k, v in d.items() if k not in ks}


@dataclass(frozen=True)
class ReportThreshold:
    """The threshold on ``max_err`` that separates ``ok`` from ``divergent``.

    ``mode`` is ``auto`` (chosen from the data, see ``reason``) or ``fixed`` (``--threshold``);
    ``per_dtype`` holds the value used for each dtype. ``extra`` keeps any further keys
    (e.g. compare's ``scaled``), written at the top level of the JSON object.
    """

    value: float
    mode: str = "auto"
    metric: str = "megengine_rel"
    reason: str = ""
    per_dtype: Mapping[str, float] = field(default_factory=dict)
    extra: Mapping[str, Any] = field(default_factory=dict)

    def to_json(self) -> Dict[str, Any]:
        """The design.md ``threshold`` object (+ ``reason``, ``per_dtype``, extras)."""
        d: Dict[str, Any] = {"value": _finite(self.value), "mode": self.mode, "metric": self.metric}
        if self.reason:
            d["reason"] = self.reason
        if self.per_dtype:
            d["per_dtype"] = {str(k): _finite(v) for k, v in self.per_dtype.items()}
        return _merge_extra(d, self.extra)

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> "ReportThreshold":
        """Inverse of :meth:`to_json` (a null value, i.e. no threshold, becomes NaN).

        Raises:
            UsageError: a required key is missing.
        """
        value = _finite(_req(d, "value", "threshold"))
        per = d.get("per_dtype") or {}
        if not isinstance(per, Mapping):
            raise UsageError("report JSON: threshold.per_dtype must be an object")
        return cls(
            value=float("nan") if value is None else value,
            mode=str(_req(d, "mode", "threshold")),
            metric=str(d.get("metric") or "megengine_rel"),
            reason=str(d.get("reason") or ""),
            per_dtype={str(k): float(v) for k, v in per.items() if _finite(v) is not None},
            extra=_unknown(d, ("value", "mode", "metric", "reason", "per_dtype")),
        )


#: optional per-variable fields, serialised only when set: name -> kind
_VAR_EXTRAS: Dict[str, str] = {
    "max_rel_err": "float",
    "mean_abs_err": "float",
    "rmse": "float",
    "max_ulp": "num",
    "n_over": "int",
    "worst_index": "ints",
    "worst_a": "float",
    "worst_b": "float",
    "note": "str",
    "runs_differing": "int",
    "exec_index": "int",
}
_VAR_KEYS = ("id", "name", "opr", "opr_type", "dtype", "shape", "inputs", "status", "max_err", "max_abs_err",
             "cosine") + tuple(_VAR_EXTRAS)


def _extra_value(v: Any, kind: str, where: str) -> Any:
    if kind == "float":
        return _finite(v)
    if kind == "num":
        return int(v) if isinstance(v, int) and not isinstance(v, bool) else _finite(v)
    if kind == "int":
        try:
            return int(v)
        except (TypeError, ValueError):
            raise UsageError(f"report JSON: {where} must be an integer, got {v!r:.80}") from None
    if kind == "ints":
        return _ints(v, where)
    return str(v)


@dataclass(frozen=True)
class ReportVar:
    """One compared variable, in execution order.

    The first eleven fields are the design.md contract. ``max_err`` is MegEngine's metric
    (max over elements of ``|a-b| / max(|a|, |b|, 1)``); for ``shake`` it is the largest
    difference from the first run over all runs and ``runs_differing`` counts the runs that
    differ at all. ``extra`` keeps any further per-variable keys (written flat in the JSON).
    """

    id: int
    name: str
    opr: str
    opr_type: str
    dtype: str
    shape: Tuple[int, ...]
    inputs: Tuple[int, ...]
    status: str
    max_err: Optional[float]
    max_abs_err: Optional[float] = None
    cosine: Optional[float] = None
    max_rel_err: Optional[float] = None
    mean_abs_err: Optional[float] = None
    rmse: Optional[float] = None
    max_ulp: Optional[Number] = None
    n_over: Optional[int] = None
    worst_index: Optional[Tuple[int, ...]] = None
    worst_a: Optional[float] = None
    worst_b: Optional[float] = None
    note: Optional[str] = None
    runs_differing: Optional[int] = None
    exec_index: Optional[int] = None
    extra: Mapping[str, Any] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        """True when the variable is within the threshold."""
        return self.status == "ok"

    def to_json(self) -> Dict[str, Any]:
        """The design.md ``vars[]`` object; optional fields appear only when set."""
        d: Dict[str, Any] = {
            "id": int(self.id),
            "name": self.name,
            "opr": self.opr,
            "opr_type": self.opr_type,
            "dtype": self.dtype,
            "shape": [int(s) for s in self.shape],
            "inputs": [int(i) for i in self.inputs],
            "status": self.status,
            "max_err": _finite(self.max_err),
            "max_abs_err": _finite(self.max_abs_err),
            "cosine": _finite(self.cosine),
        }
        for key, kind in _VAR_EXTRAS.items():
            v = getattr(self, key)
            if v is not None:
                v = _extra_value(v, kind, key)
                d[key] = list(v) if kind == "ints" else v
        return _merge_extra(d, self.extra)

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> "ReportVar":
        """Inverse of :meth:`to_json` (NaN written as null comes back as None); keys it has
        no field for go to ``extra``, so vartree's JSON reads in without loss.

        Raises:
            UsageError: a required key is missing or has the wrong type.
        """
        where = f"var {d.get('id', '?')}" if isinstance(d, Mapping) else "var"
        status = str(_req(d, "status", where))
        if status not in STATUSES:
            raise UsageError(f"report JSON: {where} has status {status!r}; expected one of {', '.join(STATUSES)}")
        kw = {k: _extra_value(d[k], kind, f"{where}.{k}") for k, kind in _VAR_EXTRAS.items() if d.get(k) is not None}
        return cls(
            id=int(_req(d, "id", where)),
            name=str(_req(d, "name", where)),
            opr=str(_req(d, "opr", where)),
            opr_type=str(_req(d, "opr_type", where)),
            dtype=str(_req(d, "dtype", where)),
            shape=_ints(_req(d, "shape", where), f"{where}.shape"),
            inputs=_ints(_req(d, "inputs", where), f"{where}.inputs"),
            status=status,
            max_err=_finite(_req(d, "max_err", where)),
            max_abs_err=_opt_float(d, "max_abs_err"),
            cosine=_opt_float(d, "cosine"),
            extra=_unknown(d, _VAR_KEYS),
            **kw,
        )


_ROOT_KEYS = ("id", "name", "opr", "opr_type", "max_err", "input_max_err", "amplification", "path", "neighbourhood",
              "status", "note")


@dataclass(frozen=True)
class ReportRoot:
    """A variable where divergence starts: not ``ok`` while every input it depends on is ``ok``.

    ``input_max_err`` is the largest ``max_err`` among its inputs; ``amplification`` is
    ``max_err / input_max_err`` (None when unknown or when the inputs are exact). ``path``
    runs from a model input to this root (var ids, root last); ``neighbourhood`` lists
    nearby var ids for the HTML graph (empty: the page draws the inputs, their inputs and
    the consumers). ``extra`` keeps further keys, written flat in the JSON.
    """

    id: int
    name: str
    opr: str
    opr_type: str
    max_err: Optional[float]
    input_max_err: Optional[float]
    amplification: Optional[float] = None
    path: Tuple[int, ...] = ()
    neighbourhood: Tuple[int, ...] = ()
    status: Optional[str] = None
    note: Optional[str] = None
    extra: Mapping[str, Any] = field(default_factory=dict)

    def to_json(self) -> Dict[str, Any]:
        """The design.md ``roots[]`` object (+ amplification, path, neighbourhood, ...)."""
        d: Dict[str, Any] = {
            "id": int(self.id),
            "name": self.name,
            "opr": self.opr,
            "opr_type": self.opr_type,
            "max_err": _finite(self.max_err),
            "input_max_err": _finite(self.input_max_err),
            "amplification": _finite(self.amplification),
            "path": [int(i) for i in self.path],
            "neighbourhood": [int(i) for i in self.neighbourhood],
        }
        if self.status is not None:
            d["status"] = self.status
        if self.note is not None:
            d["note"] = self.note
        return _merge_extra(d, self.extra)

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> "ReportRoot":
        """Inverse of :meth:`to_json`; unknown keys go to ``extra``.

        Raises:
            UsageError: a required key is missing or has the wrong type.
        """
        where = f"root {d.get('id', '?')}" if isinstance(d, Mapping) else "root"
        return cls(
            id=int(_req(d, "id", where)),
            name=str(_req(d, "name", where)),
            opr=str(_req(d, "opr", where)),
            opr_type=str(_req(d, "opr_type", where)),
            max_err=_finite(_req(d, "max_err", where)),
            input_max_err=_finite(_req(d, "input_max_err", where)),
            amplification=_opt_float(d, "amplification"),
            path=_ints(d.get("path"), f"{where}.path"),
            neighbourhood=_ints(d.get("neighbourhood"), f"{where}.neighbourhood"),
            status=None if d.get("status") is None else str(d["status"]),
            note=None if d.get("note") is None else str(d["note"]),
            extra=_unknown(d, _ROOT_KEYS),
        )


_RUN_KEYS = ("label", "dir", "argv", "returncode", "seconds", "env", "config")


@dataclass(frozen=True)
class ReportRun:
    """One load_and_run process: its label (``naive``, ``default``, ``run3``...), run folder,
    argv, return code and wall time. ``env`` holds only the variables it changed; a None
    value means the variable was removed from the child's environment."""

    label: str
    dir: str
    argv: Tuple[str, ...]
    returncode: int
    seconds: float
    env: Mapping[str, Optional[str]] = field(default_factory=dict)
    config: Optional[str] = None
    extra: Mapping[str, Any] = field(default_factory=dict)

    def command_line(self) -> str:
        """A sh command line that repeats the run, environment changes included."""
        unset = [k for k, v in self.env.items() if v is None]
        env = [f"{k}={shlex.quote(str(v))}" for k, v in self.env.items() if v is not None]
        prefix = (["env"] + [f"-u {shlex.quote(k)}" for k in unset]) if unset else []
        return " ".join(prefix + env + [shlex.quote(a) for a in self.argv])

    def to_json(self) -> Dict[str, Any]:
        """The design.md ``runs[]`` object (+ env, config, extras)."""
        d: Dict[str, Any] = {
            "label": self.label,
            "dir": str(self.dir),
            "argv": [str(a) for a in self.argv],
            "returncode": int(self.returncode),
            "seconds": _finite(self.seconds),
        }
        if self.env:
            d["env"] = {str(k): None if v is None else str(v) for k, v in self.env.items()}
        if self.config is not None:
            d["config"] = self.config
        return _merge_extra(d, self.extra)

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> "ReportRun":
        """Inverse of :meth:`to_json`; unknown keys go to ``extra``.

        Raises:
            UsageError: a required key is missing or has the wrong type.
        """
        where = f"run {d.get('label', '?')}" if isinstance(d, Mapping) else "run"
        argv = _req(d, "argv", where)
        if not isinstance(argv, (list, tuple)):
            raise UsageError(f"report JSON: {where}.argv must be a list of strings")
        secs = _finite(_req(d, "seconds", where))
        rc = _req(d, "returncode", where)
        env = d.get("env") or {}
        if not isinstance(env, Mapping):
            raise UsageError(f"report JSON: {where}.env must be an object")
        return cls(
            label=str(_req(d, "label", where)),
            dir=str(_req(d, "dir", where)),
            argv=tuple(str(a) for a in argv),
            returncode=-1 if rc is None else int(rc),
            seconds=float("nan") if secs is None else secs,
            env={str(k): None if v is None else str(v) for k, v in env.items()},
            config=None if d.get("config") is None else str(d["config"]),
            extra=_unknown(d, _RUN_KEYS),
        )


_REPORT_KEYS = ("schema", "command", "threshold", "vars", "roots", "runs", "verdict", "cause", "notes", "model",
                "summary")


@dataclass(frozen=True)
class Report:
    """Everything a command found, ready to render.

    ``vars`` is in execution order; ``roots`` is ordered most likely origin first. ``verdict``
    is the one-line answer (empty: :func:`auto_verdict` makes one). ``cause`` is the ``shake``
    diagnosis (e.g. "algorithm choice differs between runs"), None elsewhere. ``extra`` keeps
    further top-level keys (e.g. ``dirs``), written flat in the JSON.
    """

    command: str
    threshold: ReportThreshold
    vars: Tuple[ReportVar, ...] = ()
    roots: Tuple[ReportRoot, ...] = ()
    runs: Tuple[ReportRun, ...] = ()
    verdict: str = ""
    cause: Optional[str] = None
    notes: Tuple[str, ...] = ()
    model: Optional[str] = None
    extra: Mapping[str, Any] = field(default_factory=dict)
    schema: str = SCHEMA

    def var(self, var_id: int) -> Optional[ReportVar]:
        """The variable with id ``var_id``, or None."""
        return self.var_index().get(var_id)

    def var_index(self) -> Dict[int, ReportVar]:
        """Var id -> :class:`ReportVar` (built on first use, then cached)."""
        idx = self.__dict__.get("_var_index")
        if idx is None:
            idx = {v.id: v for v in self.vars}
            # frozen dataclass: cache outside the fields, like functools.cached_property does
            self.__dict__["_var_index"] = idx
        return idx

    def status_counts(self) -> Dict[str, int]:
        """Number of variables per status, in :data:`STATUSES` order, zero counts left out."""
        counts = {s: 0 for s in STATUSES}
        for v in self.vars:
            counts[v.status] = counts.get(v.status, 0) + 1
        return {s: n for s, n in counts.items() if n}

    @property
    def n_not_ok(self) -> int:
        """How many variables are not ``ok``."""
        return sum(1 for v in self.vars if v.status != "ok")

    def to_json(self) -> Dict[str, Any]:
        """The design.md report object: ``schema, command, threshold, vars, roots, runs`` with
        their exact meanings, then ``verdict, cause, notes, model, summary`` and the extras.
        NaN/Inf anywhere become null."""
        d = {
            "schema": self.schema,
            "command": self.command,
            "threshold": self.threshold.to_json(),
            "vars": [v.to_json() for v in self.vars],
            "roots": [r.to_json() for r in self.roots],
            "runs": [r.to_json() for r in self.runs],
            "verdict": self.verdict or auto_verdict(self),
            "cause": self.cause,
            "notes": list(self.notes),
            "model": self.model,
            "summary": {"n_vars": len(self.vars), "n_not_ok": self.n_not_ok, "by_status": self.status_counts(),
                        "n_roots": len(self.roots), "exit_code": exit_code(self)},
        }
        return _merge_extra(d, self.extra)

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> "Report":
        """Read a report back from :meth:`to_json` output, or from any ``lar-prec.report/1``
        object (e.g. :func:`to_report_json`); ``summary`` is recomputed.

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
    return 1 if report.n_not_ok else 0


def auto_verdict(report: Report) -> str:
    """A one-line verdict from the counts and the first root, for reports built without one."""
    n = len(report.vars)
    bad = report.n_not_ok
    thr = fmt_err(report.threshold.value)
    if not bad:
        return f"no divergence: all {n} variables within threshold {thr}"
    text = f"divergence found: {bad} of {n} variables not ok (threshold {thr})"
    if report.roots:
        r = report.roots[0]
        more = f" (+{len(report.roots) - 1} more)" if len(report.roots) > 1 else ""
        text += f"; root: {r.name} ({r.opr_type}, var {r.id}){more}"
    return text


# ============================================================================ JSON


def dumps(report: Report, *, indent: Optional[int] = 2) -> str:
    """The report as strict JSON text (no NaN/Infinity tokens)."""
    return json.dumps(report.to_json(), indent=indent, allow_nan=False, ensure_ascii=False)


def write_json(report: Report, path_or_dash: Union[str, Path], *, stream: Optional[IO[str]] = None) -> Optional[Path]:
    """Write the report as JSON to a file, or to ``stream`` (default stdout) when ``-``.

    Returns:
        The path written, or None for ``-``.
    """
    text = dumps(report)
    if str(path_or_dash) == "-":
        out = stream if stream is not None else sys.stdout
        out.write(text + "\n")
        out.flush()
        return None
    from lar_prec.outputs import atomic_write_text  # temp file + rename: a full disk keeps the old file

    p = Path(path_or_dash)
    p.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_text(p, text + "\n", what="JSON report")
    log.info("wrote JSON report %s", p)
    return p


def read_json(path: Union[str, Path]) -> Report:
    """Read a report written by :func:`write_json`.

    Raises:
        UsageError: the file is missing, is not JSON, or is not a lar-prec report.
    """
    p = Path(path)
    try:
        data = json.loads(p.read_text(encoding="utf-8"))
    except OSError as e:
        raise UsageError(f"cannot read report {p}: {e.strerror or e}") from None
    except json.JSONDecodeError as e:
        raise UsageError(f"{p} is not JSON: {e.msg} at line {e.lineno} column {e.colno}") from None
    return Report.from_json(data)


# ============================================================================ builders


def run_from_result(result: "RunResult") -> ReportRun:
    """The :class:`ReportRun` of one :class:`lar_prec.runner.RunResult`."""
    extra: Dict[str, Any] = {"status": result.status}
    if result.signal:
        extra["signal"] = result.signal
    if result.dump_dir is not None:
        extra["dump_dir"] = str(result.dump_dir)
    if result.text_dump is not None:
        extra["text_dump"] = str(result.text_dump)
    if result.error:
        extra["error"] = result.error
    return ReportRun(
        label=result.label,
        dir=str(result.dir),
        argv=tuple(result.argv),
        # design.md wants an int; a run that never started or was killed has none
        returncode=-1 if result.returncode is None else int(result.returncode),
        seconds=float(result.seconds),
        env=dict(result.env_changes),
        config=result.config,
        extra=extra,
    )


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
) -> Report:
    """The :class:`Report` of a :class:`lar_prec.vartree.VarTree` (or a Comparison).

    Built from :func:`to_report_json`, so the JSON carries every field vartree
    writes, plus the path from a model input to each of the first ``max_paths`` roots.

    Args:
        tree: the analysed tree.
        command: ``naive-vs-default``, ``shake``, ``compare`` or ``tree``.
        runs: the runs, as :class:`ReportRun` or :class:`lar_prec.runner.RunResult`.
        verdict: the one-line answer; empty makes :func:`auto_verdict` decide.
        cause: the ``shake`` diagnosis.
        notes: remarks added after the comparison's own notes.
        model: the model path, for titles.
        extra: more top-level JSON fields.
        max_paths: how many roots get a path (each costs one graph search).
    """
    from lar_prec.vartree import VarTree

    if not isinstance(tree, VarTree):
        tree = VarTree.from_comparison(tree)
    rruns = tuple(r if isinstance(r, ReportRun) else run_from_result(r) for r in runs)
    rep = Report.from_json(to_report_json(tree, command=command, runs=[r.to_json() for r in rruns], extra=extra))
    roots = tuple(replace(r, path=tuple(tree.path(r.id))) if k < max_paths else r for k, r in enumerate(rep.roots))
    rep = replace(rep, roots=roots, runs=rruns, cause=cause, notes=rep.notes + tuple(notes), model=model)
    return replace(rep, verdict=verdict or auto_verdict(rep))


# ============================================================================ from a VarTree
# The design JSON, the plain-text table and the CSV of a tree (``lar-prec compare`` and the
# workflows build their Report from the JSON below).


def _num(x: Optional[float]) -> Optional[float]:
    """JSON has no NaN/Infinity: those become null."""
    if x is None:
        return None
    x = float(x)
    return x if math.isfinite(x) else None


def _var_json(d: VarDiff) -> Dict[str, Any]:
    return {
        "id": d.id,
        "name": d.name,
        "opr": d.opr,
        "opr_type": d.opr_type,
        "dtype": d.dtype,
        "shape": list(d.shape),
        "inputs": list(d.inputs),
        "status": d.status,
        "max_err": _num(d.max_err),
        "max_abs_err": _num(d.max_abs_err),
        "cosine": _num(d.cosine),
        # extras (design.md: more fields are welcome)
        "max_rel_err": _num(d.max_rel_err),
        "mean_abs_err": _num(d.mean_abs_err),
        "rmse": _num(d.rmse),
        "max_ulp": d.max_ulp,
        "n_over": d.n_over,
        "n_diff": d.n_diff,
        "n_nonfinite": d.n_nonfinite,
        "size": d.size,
        "scale": _num(d.scale),
        "norm_err": _num(d.norm_err),
        "threshold": _num(d.threshold),
        "worst_index": None if d.worst_index is None else list(d.worst_index),
        "worst_a": _num(d.worst_a),
        "worst_b": _num(d.worst_b),
        "scale_unknown": d.scale_unknown,
        "dtype_b": d.dtype_b,
        "shape_b": None if d.shape_b is None else list(d.shape_b),
        "only_in": d.only_in,
        "note": d.note,
    }


def _root_json(r: Root) -> Dict[str, Any]:
    return {
        "id": r.id,
        "name": r.name,
        "opr": r.opr,
        "opr_type": r.opr_type,
        "max_err": _num(r.max_err),
        "input_max_err": _num(r.input_max_err),
        # extras
        "status": r.status,
        "dtype": r.dtype,
        "amplification": _num(r.amplification),
        "inputs_equal": r.amplification is not None and math.isinf(r.amplification),
        "worst_input": r.worst_input,
        "note": r.note,
    }


def to_report_json(
    tree: Union[VarTree, Comparison],
    *,
    command: str = "compare",
    runs: Sequence[Mapping[str, Any]] = (),
    extra: Optional[Mapping[str, Any]] = None,
    lazy_vars: bool = False,
) -> Dict[str, Any]:
    """The ``lar-prec.report/1`` object of design.md for a tree (or a comparison).

    Args:
        tree: the analysed tree; a :class:`Comparison` is turned into one.
        command: ``"naive-vs-default"``, ``"shake"``, ``"compare"`` (or ``"tree"``).
        runs: the load_and_run runs, each with ``label``, ``dir``, ``argv``, ``returncode``,
            ``seconds`` (empty for ``compare``).
        extra: more top-level fields.
        lazy_vars: ``vars`` is an iterator that makes each var's dict as it is consumed,
            for a writer that streams them (with tens of thousands of vars, the list of
            dicts would be the biggest object of the command); not for ``json.dumps``.

    Returns:
        A dict ready for ``json.dumps`` (no NaN/Infinity anywhere).
    """
    from lar_prec.compare import Comparison
    from lar_prec.vartree import VarTree

    if isinstance(tree, Comparison):
        tree = VarTree.from_comparison(tree)
    thr = tree.threshold
    if thr is not None:
        tj = thr.to_json()
        tj["value"] = _num(thr.value)
    else:
        tj = {"value": None, "mode": "fixed", "metric": "megengine_rel"}
    out: Dict[str, Any] = {
        "schema": "lar-prec.report/1",
        "command": command,
        "threshold": tj,
        "vars": map(_var_json, tree.diffs) if lazy_vars else [_var_json(d) for d in tree.diffs],
        "roots": [_root_json(r) for r in tree.roots()],
        "runs": [dict(r) for r in runs],
        "counts": tree.counts(),
        "diverged": tree.diverged,
    }
    cmp = tree.comparison
    if cmp is not None:
        out["dirs"] = {"a": str(cmp.dir_a), "b": str(cmp.dir_b)}
        out["notes"] = list(cmp.notes)
    if tree.source and cmp is None:
        out["source"] = tree.source
    if extra:
        out.update(extra)
    return out


# ---------------------------------------------------------------------------- plain text and CSV


def _g(x: Optional[float], fmt: str = "{:.3g}") -> str:
    if x is None:
        return "-"
    if isinstance(x, float) and math.isinf(x):
        return "inf"
    return fmt.format(x)


def render_table(tree: VarTree, *, all_vars: bool = False, limit: int = 40) -> str:
    """A plain-text summary: threshold, counts, roots, then the vars that are not ok (all
    vars with ``all_vars``), at most ``limit`` rows."""
    lines: List[str] = []
    thr = tree.threshold
    if thr is not None:
        present = []
        for d in tree.diffs:
            if d.dtype in ("Float32", "Float16", "BFloat16") and d.dtype not in present:
                present.append(d.dtype)
        per = ", ".join(f"{n} {thr.for_dtype(n):.3g}" for n in present) or f"{thr.value:.3g}"
        lines.append(f"threshold ({thr.mode}, max_err): {per}")
        if thr.reason:
            lines.append(f"  why: {thr.reason}")
    counts = tree.counts()
    total = sum(counts.values())
    lines.append(f"{total} vars: " + ", ".join(f"{v} {k}" for k, v in counts.items() if v))
    if tree.comparison is not None:
        for n in tree.comparison.notes:
            lines.append(f"note: {n}")
    roots = tree.roots()
    if roots:
        lines.append(f"roots ({len(roots)}, most likely origin first):")
        for r in roots:
            amp = "-" if r.amplification is None else ("inputs equal" if math.isinf(r.amplification) else f"x{r.amplification:.3g}")
            lines.append(
                f"  var {r.id:<6} {r.status:<14} {r.opr_type:<20} {r.name!r}  max_err={_g(r.max_err)}  "
                f"input_max_err={_g(r.input_max_err)}  amplification={amp}" + (f"  ({r.note})" if r.note else "")
            )
    else:
        lines.append("no root: every var agrees within the threshold" if not tree.diverged else "no root found")
    rows = [d for d in tree.diffs if all_vars or d.status != "ok"]
    if rows:
        head = f"{'id':>6} {'status':<14} {'opr_type':<20} {'dtype':<10} {'max_err':>9} {'max_abs':>9} {'cosine':>10} {'ulp':>6} {'n_over':>8}  name"
        lines.append(head)
        for d in rows[:limit]:
            lines.append(
                f"{d.id:>6} {d.status:<14} {d.opr_type[:20]:<20} {d.dtype[:10]:<10} {_g(d.max_err):>9} {_g(d.max_abs_err):>9} "
                f"{_g(d.cosine, '{:.7f}'):>10} {_g(d.max_ulp, '{}'):>6} {_g(d.n_over, '{}'):>8}  {d.name}"
            )
        if len(rows) > limit:
            lines.append(f"... {len(rows) - limit} more (use --json for all)")
    return "\n".join(lines) + "\n"


CSV_FIELDS = (
    "id", "name", "opr", "opr_type", "dtype", "shape", "inputs", "status", "max_err", "max_abs_err", "max_rel_err",
    "mean_abs_err", "rmse", "cosine", "max_ulp", "n_over", "threshold", "worst_index", "worst_a", "worst_b", "note",
)


def render_csv(tree: Union[VarTree, Comparison]) -> str:
    """One CSV row per var (execution order), the columns of :data:`CSV_FIELDS`."""
    diffs = tree.diffs
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(CSV_FIELDS)
    for d in diffs:
        row = []
        for f in CSV_FIELDS:
            v = getattr(d, f)
            if isinstance(v, tuple):
                v = " ".join(str(x) for x in v)
            elif isinstance(v, float):
                v = repr(v) if math.isfinite(v) else str(v)
            elif v is None:
                v = ""
            row.append(v)
        w.writerow(row)
    return buf.getvalue()



# ============================================================================ terminal


_STATUS_STYLE = {
    "ok": "green",
    "divergent": "red",
    "nonfinite": "magenta",
    "shape_mismatch": "yellow",
    "dtype_mismatch": "yellow",
    "missing": "dim",
}


#: numeric columns: right-aligned and never wrapped or cut
_NUM: Dict[str, Any] = {"justify": "right", "no_wrap": True}


def _shape_text(shape: Sequence[int]) -> str:
    return "(" + ",".join(str(s) for s in shape) + ")"


def _amp_text(r: ReportRoot) -> str:
    if r.amplification is not None and math.isfinite(r.amplification):
        return f"{fmt_err(r.amplification)}x"
    if r.input_max_err == 0 and r.max_err:
        return "inputs exact"
    return "—"


def _root_err_text(err: Optional[float], status: str) -> str:
    """A root's error; a NaN/Inf origin has no finite error, so say what it is instead."""
    if (err is None or not math.isfinite(err)) and status != "divergent":
        return status.replace("_", " ")
    return fmt_err(err)


def _err_key(v: ReportVar) -> Tuple[int, float]:
    """Sort key, most divergent first: not-ok before ok, unknown error (missing, NaN) as infinite."""
    err = v.max_err if v.max_err is not None else math.inf
    return (0 if v.status != "ok" else 1, -err)


def _most_divergent(report: Report, top: int) -> List[ReportVar]:
    return sorted(report.vars, key=_err_key)[:top]


def _path_steps(path: Sequence[int], limit: int) -> List[Optional[int]]:
    """The path, shortened to ``limit`` steps: the first two, ``None`` for the gap, the rest."""
    if len(path) <= limit or limit < 4:
        return list(path)
    tail = limit - 3
    return list(path[:2]) + [None] + list(path[-tail:])


def render_terminal(report: Report, console: Optional["Console"] = None, *, top: int = 10,
                    path_limit: int = 10, show_runs: bool = True) -> None:
    """Write the human summary of ``report`` to ``console``.

    Sections: title, verdict, cause (shake), threshold and how it was chosen, status counts,
    the roots (operator, error, input error, amplification), the path from a model input to
    each root, the ``top`` most divergent variables, the runs and the notes.

    Args:
        report: what to show.
        console: a ``rich.console.Console``; the caller chooses stream, colour and width.
            None makes a default one on stdout.
        top: how many roots and variables to list.
        path_limit: longer paths are shortened to this many steps.
        show_runs: include the table of runs.
    """
    from rich import box
    from rich.console import Console
    from rich.table import Table
    from rich.text import Text

    con = console if console is not None else Console()
    narrow = con.width < 110
    vindex = report.var_index()
    bad = exit_code(report) != 0
    # Every piece of user data goes through Text(), never through markup: var names contain [ ].
    title = Text(f"lar-prec {report.command}", style="bold")
    if report.model:
        title.append(f"  {report.model}", style="dim")
    con.rule(title, align="left")

    verdict = report.verdict or auto_verdict(report)
    con.print(Text.assemble(("Verdict: ", "bold"), (verdict, "bold red" if bad else "bold green")))
    if report.cause:
        con.print(Text.assemble(("Cause: ", "bold"), (report.cause, "yellow")))

    th = report.threshold
    line = Text.assemble(("Threshold: ", "bold"), (fmt_err(th.value), "cyan"), f" ({th.mode}, metric {th.metric})")
    if th.reason:
        line.append(f": {th.reason}")
    con.print(line)
    if th.per_dtype:
        con.print(Text("  per dtype: " + ", ".join(f"{k} {fmt_err(v)}" for k, v in th.per_dtype.items())))

    counts = report.status_counts()
    con.print(Text.assemble(("Variables: ", "bold"), f"{len(report.vars)} compared",
                            *[(f", {n} {s}", _STATUS_STYLE.get(s, "")) for s, n in counts.items()]))

    if report.roots:
        t = Table(title=Text(f"Roots ({len(report.roots)}, most likely first)", style="bold"), box=box.SIMPLE_HEAD,
                  title_justify="left", show_edge=False)
        cols: List[Tuple[str, Dict[str, Any], Callable[[int, ReportRoot, str], Any]]] = [
            ("#", _NUM, lambda k, r, st: str(k)),
            ("var", _NUM, lambda k, r, st: str(r.id)),
            ("name", {"overflow": "fold", "ratio": 2}, lambda k, r, st: Text(r.name, style="bold")),
            ("operator", {"overflow": "fold", "ratio": 2}, lambda k, r, st: Text(r.opr)),
            ("type", {"overflow": "fold", "ratio": 1}, lambda k, r, st: Text(r.opr_type)),
            ("status", {"no_wrap": True}, lambda k, r, st: Text(st, style=_STATUS_STYLE.get(st, ""))),
            ("max_err", _NUM, lambda k, r, st: Text(_root_err_text(r.max_err, st), style=_STATUS_STYLE.get(st, "red"))),
            ("input err" if narrow else "input max_err", _NUM, lambda k, r, st: Text(fmt_err(r.input_max_err))),
            ("amplif." if narrow else "amplification", _NUM, lambda k, r, st: Text(_amp_text(r))),
        ]
        if narrow:  # numbers must never be cut: drop the long text columns instead
            cols = [c for c in cols if c[0] != "operator"]
        for head, kw, _ in cols:
            t.add_column(head, **kw)
        for k, r in enumerate(report.roots[:top], 1):
            st = r.status or (vindex[r.id].status if r.id in vindex else "divergent")
            t.add_row(*[get(k, r, st) for _, _, get in cols])
        con.print(t)
        if len(report.roots) > top:
            con.print(Text(f"  ... {len(report.roots) - top} more roots in the JSON/HTML report", style="dim"))
        for k, r in enumerate(report.roots[:top], 1):
            if r.note:
                con.print(Text(f"  root #{k}: {r.note}", style="yellow"))
        for k, r in enumerate(report.roots[: min(top, 3)], 1):
            if not r.path:
                continue
            con.print(Text.assemble((f"Path to root #{k} ", "bold"), (r.name, "bold"),
                                    f" ({len(r.path)} vars, from model input):"))
            steps = _path_steps(r.path, path_limit)
            for step in steps:
                if step is None:
                    con.print(Text(f"    ... {len(r.path) - len(steps) + 1} more ...", style="dim"))
                    continue
                v = vindex.get(step)
                if v is None:
                    con.print(Text(f"  -> var {step} (not in this report)", style="dim"))
                    continue
                mark = "  => " if step == r.id else "  -> "
                con.print(Text.assemble(mark, (v.name, "bold" if step == r.id else ""),
                                        (f"  [{v.opr_type}, var {v.id}] ", "dim"),
                                        (fmt_err(v.max_err), _STATUS_STYLE.get(v.status, ""))))
    elif bad:
        con.print(Text("No root found: every variable that is not ok has an input that is not ok either "
                       "(or its inputs were not compared).", style="yellow"))

    if report.vars:
        pos = {v.id: i for i, v in enumerate(report.vars)}
        roots = {r.id for r in report.roots}

        def cos_text(v: ReportVar) -> Text:
            return Text("—" if v.cosine is None or not math.isfinite(v.cosine) else f"{v.cosine:.6f}")

        vcols: List[Tuple[str, Dict[str, Any], Callable[[ReportVar], Any]]] = [
            ("#", _NUM, lambda v: str(v.exec_index if v.exec_index is not None else pos[v.id])),
            ("var", _NUM, lambda v: str(v.id)),
            ("name", {"overflow": "fold", "ratio": 3},
             lambda v: Text(v.name + ("  (root)" if v.id in roots else ""), style="bold" if v.id in roots else "")),
            ("type", {"overflow": "fold", "ratio": 1}, lambda v: Text(v.opr_type)),
            ("dtype shape", {"overflow": "fold", "ratio": 1}, lambda v: Text(f"{v.dtype} {_shape_text(v.shape)}")),
            ("status", {"no_wrap": True}, lambda v: Text(v.status, style=_STATUS_STYLE.get(v.status, ""))),
            ("max_err", _NUM, lambda v: Text(fmt_err(v.max_err), style=_STATUS_STYLE.get(v.status, ""))),
            ("max_abs_err", _NUM, lambda v: Text(fmt_err(v.max_abs_err))),
            ("cosine", _NUM, cos_text),
        ]
        if any(v.runs_differing is not None for v in report.vars):
            vcols.append(("runs differing", _NUM, lambda v: Text("—" if v.runs_differing is None else str(v.runs_differing))))
        if narrow:
            vcols = [c for c in vcols if c[0] not in ("dtype shape", "max_abs_err", "cosine")]
        t = Table(title=Text("Most divergent variables", style="bold"), box=box.SIMPLE_HEAD, title_justify="left",
                  show_edge=False)
        for head, kw, _ in vcols:
            t.add_column(head, **kw)
        for v in _most_divergent(report, top):
            t.add_row(*[get(v) for _, _, get in vcols])
        con.print(t)

    if show_runs and report.runs:
        t = Table(title=Text("Runs", style="bold"), box=box.SIMPLE_HEAD, title_justify="left", show_edge=False)
        for col, kw in (("label", {}), ("rc", {"justify": "right"}), ("seconds", {"justify": "right"}),
                        ("folder", {"overflow": "fold"})):
            t.add_column(col, **kw)
        for r in report.runs:
            t.add_row(Text(r.label), Text(str(r.returncode), style="" if r.returncode == 0 else "red"),
                      Text("—" if not math.isfinite(r.seconds) else f"{r.seconds:.2f}"), Text(str(r.dir)))
        con.print(t)

    for n in report.notes:
        con.print(Text.assemble(("Note: ", "bold yellow"), n))


# ============================================================================ HTML


def _json_for_script(obj: Any) -> str:
    """JSON safe inside ``<script type="application/json">``: ``<``, ``>`` and ``&`` only occur
    inside JSON strings, so escaping them as \\u00XX keeps it valid JSON that can never close
    the script element, whatever the var names contain."""
    text = json.dumps(obj, allow_nan=False, ensure_ascii=False, separators=(",", ":"))
    return (text.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")
            .replace("\u2028", "\\u2028").replace("\u2029", "\\u2029"))


def render_html(report: Report, *, title: Optional[str] = None) -> str:
    """The report as one self-contained HTML document (see :func:`write_html`)."""
    if title is None:
        title = f"lar-prec {report.command}" + (f": {report.model}" if report.model else "")
    parts = {
        "TITLE": html.escape(title, quote=True),
        "CSS": _CSS,
        "JS": _JS,
        "DATA": _json_for_script(report.to_json()),
    }
    # One pass over the template only, so user text that happens to contain "@@DATA@@" stays text.
    return re.sub(r"@@(TITLE|CSS|JS|DATA)@@", lambda m: parts[m.group(1)], _HTML_TEMPLATE)


def write_html(report: Report, path: Union[str, Path], *, title: Optional[str] = None) -> Path:
    """Write the interactive report as one offline HTML file.

    The file fetches nothing (inline CSS, JS and SVG; a Content-Security-Policy forbids any
    network access) and renders lazily, so 20,000 variables stay responsive: an error chart
    along execution order with roots and threshold marked, a sortable, filterable, paginated
    variable table, the graph neighbourhood of each root coloured by status, the path from
    the input to each root, and the runs with their command lines.

    Returns:
        The path written.
    """
    from lar_prec.outputs import atomic_write_text  # temp file + rename: never a truncated page

    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_text(p, render_html(report, title=title), what="HTML report")
    log.info("wrote HTML report %s", p)
    return p


_HTML_TEMPLATE = """<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta http-equiv="Content-Security-Policy" content="default-src 'none'; style-src 'unsafe-inline'; script-src 'unsafe-inline'; img-src data:">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>@@TITLE@@</title>
<style>@@CSS@@</style>
</head>
<body>
<div id="fatal" hidden></div>
<header>
  <h1 id="title">@@TITLE@@</h1>
  <p id="verdict" class="verdict"></p>
  <dl id="meta"></dl>
  <ul id="notes"></ul>
</header>
<noscript><p class="warn">This report is drawn by JavaScript; enable it, or read the JSON in the page source.</p></noscript>
<section id="roots-section"><h2>Roots <small>most likely origin first</small></h2><div id="roots"></div></section>
<section id="chart-section"><h2>Error along execution order <small>log scale; click a point for details</small></h2>
  <div class="chartbox"><svg id="chart" viewBox="0 0 1000 320" preserveAspectRatio="none" role="img" aria-label="error of every variable along execution order"></svg></div>
  <div id="chart-legend" class="legend"></div>
</section>
<section id="cards-section"><h2>Where each root sits <small>path from the model input, and the graph around the root coloured by status</small></h2><div id="cards"></div></section>
<section id="details-section" hidden><h2>Variable <span id="details-title"></span></h2><div id="details"></div></section>
<section id="table-section"><h2>Variables</h2>
  <div class="controls">
    <input id="filter" type="search" placeholder="filter: name, operator, type, status or var id" size="44">
    <label><input id="only-bad" type="checkbox"> only not ok</label>
    <label>rows per page <select id="page-size"><option>50</option><option selected>100</option><option>500</option></select></label>
    <span id="pager"><button id="prev" type="button">&lsaquo; prev</button> <span id="page-info"></span> <button id="next" type="button">next &rsaquo;</button></span>
  </div>
  <div class="tablewrap"><table id="vars"><thead><tr id="vars-head"></tr></thead><tbody id="vars-body"></tbody></table></div>
</section>
<section id="runs-section"><h2>Runs</h2><div id="runs"></div></section>
<script type="application/json" id="report-data">@@DATA@@</script>
<script>@@JS@@</script>
</body>
</html>
"""

_CSS = """
:root { --ok:#3a9a5b; --div:#d62d20; --nan:#8e44ad; --shape:#c67c00; --miss:#8a8a8a; --fg:#1d1d1f; --muted:#666; --line:#ddd; }
* { box-sizing: border-box; }
body { font: 14px/1.45 system-ui, -apple-system, "Segoe UI", Roboto, sans-serif; color: var(--fg); margin: 0 auto; padding: 12px 20px 40px; max-width: 1400px; }
h1 { font-size: 20px; margin: 6px 0; word-break: break-all; }
h2 { font-size: 16px; margin: 22px 0 8px; border-bottom: 1px solid var(--line); padding-bottom: 4px; }
h2 small { color: var(--muted); font-weight: normal; font-size: 12px; }
code, .mono, td.num { font-family: ui-monospace, "DejaVu Sans Mono", Menlo, Consolas, monospace; font-size: 12.5px; }
.verdict { font-size: 16px; font-weight: 600; padding: 8px 12px; border-radius: 6px; margin: 6px 0; }
.verdict.bad { background: #fdecea; color: #a31515; } .verdict.good { background: #e8f5ec; color: #1e6b37; }
dl#meta { display: grid; grid-template-columns: max-content auto; gap: 2px 14px; margin: 8px 0; }
dl#meta dt { color: var(--muted); } dl#meta dd { margin: 0; }
#notes li { color: #8a5a00; }
.warn, #fatal { background: #fff4d6; border: 1px solid #e0b84a; padding: 8px 12px; border-radius: 6px; }
#fatal { background: #fdecea; border-color: #d62d20; font-weight: 600; }
table { border-collapse: collapse; width: 100%; }
th, td { text-align: left; padding: 3px 8px; border-bottom: 1px solid #eee; vertical-align: top; }
td.num, th.num { text-align: right; white-space: nowrap; }
td.name { word-break: break-all; min-width: 160px; }
thead th { position: sticky; top: 0; background: #f6f6f6; cursor: pointer; user-select: none; white-space: nowrap; }
thead th.sorted-asc::after { content: " \\25B2"; font-size: 10px; } thead th.sorted-desc::after { content: " \\25BC"; font-size: 10px; }
tbody tr:hover { background: #f4f8ff; }
tr.root-row { background: #fff0ef; }
tr.selected { outline: 2px solid #4a7bd0; }
.tablewrap { max-height: 70vh; overflow: auto; border: 1px solid var(--line); }
.controls { display: flex; flex-wrap: wrap; gap: 12px; align-items: center; margin-bottom: 8px; }
.st { display: inline-block; padding: 0 6px; border-radius: 9px; font-size: 12px; color: #fff; white-space: nowrap; }
.st-ok { background: var(--ok); } .st-divergent { background: var(--div); } .st-nonfinite { background: var(--nan); }
.st-shape_mismatch, .st-dtype_mismatch { background: var(--shape); } .st-missing { background: var(--miss); }
a.var { color: #1a56b0; cursor: pointer; text-decoration: none; } a.var:hover { text-decoration: underline; }
.chartbox { border: 1px solid var(--line); }
svg#chart { width: 100%; height: 320px; display: block; }
.legend { font-size: 12px; color: var(--muted); margin-top: 4px; }
.legend span.sw { display: inline-block; width: 10px; height: 10px; border-radius: 5px; margin: 0 4px 0 12px; vertical-align: middle; }
.rootcard { border: 1px solid var(--line); border-radius: 6px; padding: 8px 12px; margin: 10px 0; }
.rootcard h3 { font-size: 15px; margin: 0 0 6px; word-break: break-all; }
.path { display: flex; flex-wrap: wrap; gap: 4px; align-items: center; margin: 6px 0; font-size: 12.5px; }
.chip { border: 1px solid var(--line); border-radius: 4px; padding: 1px 6px; max-width: 320px; overflow: hidden; text-overflow: ellipsis; white-space: nowrap; }
.chip.is-root { border-color: var(--div); font-weight: 600; }
.graphbox { overflow-x: auto; }
svg.graph text { font: 11px ui-monospace, "DejaVu Sans Mono", Menlo, monospace; }
svg.graph .node { cursor: pointer; }
.kv { display: grid; grid-template-columns: max-content auto; gap: 2px 14px; }
.kv div:nth-child(odd) { color: var(--muted); } .kv div { word-break: break-all; }
pre.cmd { white-space: pre-wrap; word-break: break-all; background: #f6f6f6; padding: 4px 8px; margin: 2px 0; border-radius: 4px; }
"""

# The page builds every node with createElement/textContent (never innerHTML with data), so
# var names are escaped by construction. The SVG namespace is read from the inline <svg>
# instead of being written as a URL, so the file contains no link of any kind.
_JS = r"""
(function () {
'use strict';
function fatal(msg) {
  var f = document.getElementById('fatal');
  f.hidden = false;
  f.textContent = 'The report script failed: ' + msg + ' (the JSON is in the page source).';
}
window.addEventListener('error', function (e) { fatal(e.message || String(e)); });
var t0 = (window.performance && performance.now) ? performance.now() : 0;

var R = JSON.parse(document.getElementById('report-data').textContent);
var SVGNS = document.getElementById('chart').namespaceURI;
var vars = R.vars || [], roots = R.roots || [], runs = R.runs || [];
var byId = new Map(), consumers = new Map(), rootRank = new Map();
vars.forEach(function (v, i) { v._i = (v.exec_index === undefined || v.exec_index === null) ? i : v.exec_index; v._p = i; byId.set(v.id, v); });
vars.forEach(function (v) { (v.inputs || []).forEach(function (u) { if (!consumers.has(u)) consumers.set(u, []); consumers.get(u).push(v.id); }); });
roots.forEach(function (r, k) { if (!rootRank.has(r.id)) rootRank.set(r.id, k + 1); });
var STATUS_COLOR = { ok: '#3a9a5b', divergent: '#d62d20', nonfinite: '#8e44ad', shape_mismatch: '#c67c00', dtype_mismatch: '#c67c00', missing: '#8a8a8a' };
var STATUS_FILL = { ok: '#e3f3e8', divergent: '#fbd5d1', nonfinite: '#ead8f3', shape_mismatch: '#fbe7c6', dtype_mismatch: '#fbe7c6', missing: '#eeeeee' };

function el(tag, attrs) {
  var e = document.createElement(tag);
  setAttrs(e, attrs);
  for (var i = 2; i < arguments.length; i++) add(e, arguments[i]);
  return e;
}
function sv(tag, attrs) {
  var e = document.createElementNS(SVGNS, tag);
  setAttrs(e, attrs);
  for (var i = 2; i < arguments.length; i++) add(e, arguments[i]);
  return e;
}
function setAttrs(e, attrs) {
  if (!attrs) return;
  Object.keys(attrs).forEach(function (k) {
    var val = attrs[k];
    if (val === undefined || val === null) return;
    if (k === 'class') e.setAttribute('class', val);
    else if (k === 'text') e.textContent = val;
    else if (k.slice(0, 2) === 'on') e.addEventListener(k.slice(2), val);
    else e.setAttribute(k, String(val));
  });
}
function add(e, c) {
  if (c === undefined || c === null) return;
  if (Array.isArray(c)) { c.forEach(function (x) { add(e, x); }); return; }
  e.appendChild(typeof c === 'object' ? c : document.createTextNode(String(c)));
}
function fmt(x) {
  if (x === null || x === undefined) return '\u2014';
  if (typeof x !== 'number') return String(x);
  if (x === 0) return '0';
  var a = Math.abs(x);
  if (a >= 1e-3 && a < 1e4) return String(Number(x.toPrecision(3)));
  return x.toExponential(2);
}
function shape(s) { return '(' + (s || []).join(',') + ')'; }
function statusBadge(s) { return el('span', { 'class': 'st st-' + s, text: s }); }
function varLink(id, label) {
  var v = byId.get(id);
  var text = label !== undefined ? label : (v ? v.name : 'var ' + id);
  return el('a', { 'class': 'var', title: v ? ('var ' + id + ' \u00b7 ' + v.opr_type + ' \u00b7 ' + v.status + ' \u00b7 max_err ' + fmt(v.max_err)) : ('var ' + id + ' (not compared)'),
                   onclick: function (ev) { ev.preventDefault(); select(id, true); } }, text);
}
function shq(s) { s = String(s); return /^[A-Za-z0-9_+=.,\/:@%^-]+$/.test(s) ? s : "'" + s.replace(/'/g, "'\\''") + "'"; }

// ---------------------------------------------------------------- header
function header() {
  var bad = vars.some(function (v) { return v.status !== 'ok'; });
  var vd = document.getElementById('verdict');
  vd.textContent = R.verdict || (bad ? 'divergence found' : 'no divergence');
  vd.className = 'verdict ' + (bad ? 'bad' : 'good');
  var meta = document.getElementById('meta');
  var th = R.threshold || {};
  function row(k, v) { if (v === undefined || v === null || v === '') return; meta.appendChild(el('dt', null, k)); meta.appendChild(el('dd', null, v)); }
  row('command', R.command);
  row('model', R.model);
  row('cause', R.cause);
  row('threshold', fmt(th.value) + ' (' + th.mode + ', metric ' + th.metric + ')' + (th.reason ? ': ' + th.reason : ''));
  if (th.per_dtype && Object.keys(th.per_dtype).length)
    row('per dtype', Object.keys(th.per_dtype).map(function (k) { return k + ' ' + fmt(th.per_dtype[k]); }).join(', '));
  var counts = {};
  vars.forEach(function (v) { counts[v.status] = (counts[v.status] || 0) + 1; });
  row('variables', [vars.length + ' compared: '].concat(Object.keys(counts).map(function (s) { return [statusBadge(s), ' ' + counts[s] + ' ']; })));
  row('roots', String(roots.length));
  var notes = document.getElementById('notes');
  (R.notes || []).forEach(function (n) { notes.appendChild(el('li', null, n)); });
}

// ---------------------------------------------------------------- roots
var ROOT_ROWS = 200, ROOT_CARDS = 10;
function rootsSection() {
  var box = document.getElementById('roots');
  if (!roots.length) {
    document.getElementById('cards-section').hidden = true;
    box.appendChild(el('p', null, vars.some(function (v) { return v.status !== 'ok'; })
      ? 'No root: every variable that is not ok has an input that is not ok (or was not compared).'
      : 'No root: no variable diverges.'));
    return;
  }
  var t = el('table', { id: 'roots-table' });
  t.appendChild(el('thead', null, el('tr', null, ['#', 'var', 'name', 'operator', 'type', 'status', 'max_err', 'input max_err', 'amplification'].map(function (h, i) {
    return el('th', { 'class': i === 0 || i === 1 || i >= 6 ? 'num' : null }, h); }))));
  var tb = el('tbody');
  var shown = Math.min(roots.length, ROOT_ROWS);
  roots.slice(0, shown).forEach(function (r, k) {
    var amp = r.amplification !== null && r.amplification !== undefined ? fmt(r.amplification) + '\u00d7'
            : (r.input_max_err === 0 && r.max_err ? 'inputs exact' : '\u2014');
    tb.appendChild(el('tr', { 'class': 'root-row' }, el('td', { 'class': 'num' }, String(k + 1)), el('td', { 'class': 'num' }, varLink(r.id, String(r.id))),
      el('td', { 'class': 'name' }, varLink(r.id, r.name)), el('td', { 'class': 'name mono' }, r.opr), el('td', null, r.opr_type),
      el('td', null, statusBadge(r.status || (byId.has(r.id) ? byId.get(r.id).status : 'divergent'))),
      el('td', { 'class': 'num' }, r.max_err === null && r.status && r.status !== 'divergent' ? r.status.replace('_', ' ') : fmt(r.max_err)),
      el('td', { 'class': 'num' }, fmt(r.input_max_err)), el('td', { 'class': 'num' }, amp)));
  });
  t.appendChild(tb);
  box.appendChild(t);
  if (roots.length > shown) box.appendChild(el('p', null, (roots.length - shown) + ' more roots: filter the variable table by name or id, or read the JSON.'));
  var cards = document.getElementById('cards'), next = 0;
  // Cards are drawn a few at a time: thousands of roots must not stall the page.
  function more() {
    var stop = Math.min(roots.length, next + ROOT_CARDS);
    for (; next < stop; next++) cards.insertBefore(rootCard(roots[next], next + 1), btn);
    btn.hidden = next >= roots.length;
    btn.textContent = 'show ' + Math.min(ROOT_CARDS, roots.length - next) + ' more roots (' + (roots.length - next) + ' left)';
  }
  var btn = el('button', { type: 'button', id: 'more-roots', onclick: more });
  cards.appendChild(btn);
  more();
}
function rootCard(r, rank) {
  var card = el('div', { 'class': 'rootcard', id: 'root-' + rank });
  card.appendChild(el('h3', null, 'Root #' + rank + ': ', varLink(r.id, r.name), ' ', el('span', { 'class': 'mono' }, '(' + r.opr_type + ', var ' + r.id + ')')));
  if (r.note) card.appendChild(el('p', null, r.note));
  if (r.path && r.path.length) {
    var p = el('div', { 'class': 'path' }, el('b', null, 'path from input: '));
    r.path.forEach(function (id, i) {
      var v = byId.get(id);
      if (i) p.appendChild(el('span', null, '\u2192'));
      p.appendChild(el('span', { 'class': 'chip' + (id === r.id ? ' is-root' : ''), style: 'border-left: 4px solid ' + (v ? STATUS_COLOR[v.status] : '#bbb') },
        varLink(id), ' ', el('span', { 'class': 'mono' }, v ? fmt(v.max_err) : '')));
    });
    card.appendChild(p);
  }
  card.appendChild(el('div', { 'class': 'graphbox' }, neighbourhood(r, rank)));
  return card;
}

// ---------------------------------------------------------------- neighbourhood graph
var MAX_PER_LAYER = 10;
function neighbourhood(r, rank) {
  // layer: -2 inputs of inputs, -1 inputs, 0 root, +1 consumers (+2 their consumers when listed)
  var layer = new Map([[r.id, 0]]);
  var given = (r.neighbourhood || []).length ? new Set(r.neighbourhood) : null;
  function inputsOf(id) { var v = byId.get(id); return v ? v.inputs || [] : []; }
  function usersOf(id) { return consumers.get(id) || []; }
  var frontier = [r.id];
  for (var d = 1; d <= 2; d++) {
    var next = [];
    frontier.forEach(function (id) { inputsOf(id).forEach(function (u) {
      if (!layer.has(u) && (!given || given.has(u))) { layer.set(u, -d); next.push(u); } }); });
    frontier = next;
  }
  frontier = [r.id];
  for (d = 1; d <= (given ? 2 : 1); d++) {
    next = [];
    frontier.forEach(function (id) { usersOf(id).forEach(function (u) {
      if (!layer.has(u) && (!given || given.has(u))) { layer.set(u, d); next.push(u); } }); });
    frontier = next;
  }
  var cols = new Map();
  layer.forEach(function (l, id) { if (!cols.has(l)) cols.set(l, []); cols.get(l).push(id); });
  var keys = Array.from(cols.keys()).sort(function (a, b) { return a - b; });
  var pos = new Map(), hidden = new Map();
  var W = 210, BW = 180, BH = 34, GAP = 44, PAD = 10;
  var maxRows = 1;
  keys.forEach(function (l, ci) {
    var ids = cols.get(l).sort(function (a, b) { var va = byId.get(a), vb = byId.get(b); return (va ? va._p : 1e12) - (vb ? vb._p : 1e12) || a - b; });
    if (ids.length > MAX_PER_LAYER) { hidden.set(ci, ids.length - MAX_PER_LAYER + 1); ids = ids.slice(0, MAX_PER_LAYER - 1); }
    ids.forEach(function (id, ri) { pos.set(id, { x: PAD + ci * W, y: PAD + ri * GAP }); });
    maxRows = Math.max(maxRows, ids.length + (hidden.has(ci) ? 1 : 0));
  });
  var width = PAD * 2 + (keys.length - 1) * W + BW, height = PAD * 2 + maxRows * GAP;
  var svg = sv('svg', { 'class': 'graph', id: 'graph-' + rank, width: width, height: height, viewBox: '0 0 ' + width + ' ' + height });
  var mid = 'arrow-' + rank;
  svg.appendChild(sv('defs', null, sv('marker', { id: mid, viewBox: '0 0 10 10', refX: 10, refY: 5, markerWidth: 7, markerHeight: 7, orient: 'auto-start-reverse' },
    sv('path', { d: 'M 0 0 L 10 5 L 0 10 z', fill: '#999' }))));
  pos.forEach(function (p, id) {
    inputsOf(id).forEach(function (u) {
      var q = pos.get(u);
      if (!q || q.x >= p.x) return;
      var x1 = q.x + BW, y1 = q.y + BH / 2, x2 = p.x, y2 = p.y + BH / 2, mx = (x1 + x2) / 2;
      svg.appendChild(sv('path', { d: 'M' + x1 + ' ' + y1 + ' C' + mx + ' ' + y1 + ' ' + mx + ' ' + y2 + ' ' + x2 + ' ' + y2,
        fill: 'none', stroke: '#999', 'stroke-width': 1.2, 'marker-end': 'url(#' + mid + ')' }));
    });
  });
  pos.forEach(function (p, id) {
    var v = byId.get(id);
    var st = v ? v.status : 'missing';
    var isRoot = id === r.id;
    var g = sv('g', { 'class': 'node', transform: 'translate(' + p.x + ',' + p.y + ')', onclick: function () { select(id, true); } });
    g.appendChild(sv('title', { text: v ? (v.name + '\nvar ' + id + ' \u00b7 ' + v.opr_type + ' \u00b7 ' + v.dtype + shape(v.shape) + '\n' + st + ' \u00b7 max_err ' + fmt(v.max_err)) : ('var ' + id + ' (not compared)') }));
    g.appendChild(sv('rect', { width: BW, height: BH, rx: 5, fill: STATUS_FILL[st] || '#eee', stroke: isRoot ? '#d62d20' : (STATUS_COLOR[st] || '#999'), 'stroke-width': isRoot ? 3 : 1 }));
    var name = v ? v.name : 'var ' + id;
    if (name.length > 25) name = name.slice(0, 24) + '\u2026';
    g.appendChild(sv('text', { x: 6, y: 14, text: name, 'font-weight': isRoot ? 'bold' : null }));
    g.appendChild(sv('text', { x: 6, y: 28, fill: '#555', text: (v ? (v.opr_type.length > 14 ? v.opr_type.slice(0, 13) + '\u2026' : v.opr_type) + ' ' + fmt(v.max_err) : 'not compared') }));
    svg.appendChild(g);
  });
  hidden.forEach(function (n, ci) {
    svg.appendChild(sv('text', { x: PAD + ci * W + 6, y: PAD + (MAX_PER_LAYER - 1) * GAP + 20, fill: '#666', text: '+' + n + ' more' }));
  });
  return svg;
}

// ---------------------------------------------------------------- chart
function chart() {
  var svg = document.getElementById('chart');
  var Wd = 1000, H = 320, L = 62, Rm = 12, T = 26, B = 40;
  var pw = Wd - L - Rm, ph = H - T - B;
  var n = vars.length;
  var th = R.threshold && typeof R.threshold.value === 'number' ? R.threshold.value : null;
  var lo = Infinity, hi = -Infinity;
  vars.forEach(function (v) { if (typeof v.max_err === 'number' && v.max_err > 0) { lo = Math.min(lo, v.max_err); hi = Math.max(hi, v.max_err); } });
  if (th && th > 0) { lo = Math.min(lo, th); hi = Math.max(hi, th); }
  if (!isFinite(lo)) { lo = 1e-8; hi = 1; }
  var l0 = Math.floor(Math.log10(lo)), l1 = Math.ceil(Math.log10(hi));
  if (l1 <= l0) l1 = l0 + 1;
  function X(i) { return L + (n > 1 ? i / (n - 1) : 0.5) * pw; }
  function Y(e) {
    if (e === null || e === undefined) return T - 12;            // no value (missing, shape mismatch): band above
    if (e <= 0) return T + ph + 12;                               // exact: band below the axis
    return T + ph - (Math.log10(e) - l0) / (l1 - l0) * ph;
  }
  svg.appendChild(sv('rect', { x: L, y: T, width: pw, height: ph, fill: '#fcfcfc', stroke: '#ccc' }));
  var step = Math.max(1, Math.ceil((l1 - l0) / 10));
  for (var k = l0; k <= l1; k += step) {
    var y = Y(Math.pow(10, k));
    svg.appendChild(sv('line', { x1: L, x2: L + pw, y1: y, y2: y, stroke: '#eee' }));
    svg.appendChild(sv('text', { x: L - 6, y: y + 4, 'text-anchor': 'end', 'font-size': 11, fill: '#555', text: '1e' + k }));
  }
  svg.appendChild(sv('text', { x: L - 6, y: T + ph + 16, 'text-anchor': 'end', 'font-size': 11, fill: '#555', text: '0' }));
  svg.appendChild(sv('text', { x: L - 6, y: T - 8, 'text-anchor': 'end', 'font-size': 11, fill: '#555', text: 'n/a' }));
  var xt = Math.max(1, Math.round(n / 10));
  for (var i = 0; i < n; i += xt) {
    svg.appendChild(sv('text', { x: X(i), y: H - 8, 'text-anchor': 'middle', 'font-size': 11, fill: '#555', text: String(i) }));
  }
  svg.appendChild(sv('text', { x: L + pw, y: H - 22, 'text-anchor': 'end', 'font-size': 11, fill: '#888', text: 'execution order \u2192' }));
  if (th && th > 0) {
    var ty = Y(th);
    svg.appendChild(sv('line', { x1: L, x2: L + pw, y1: ty, y2: ty, stroke: '#d62d20', 'stroke-dasharray': '6 4', 'stroke-width': 1 }));
    svg.appendChild(sv('text', { x: L + 4, y: ty - 4, 'font-size': 11, fill: '#d62d20', text: 'threshold ' + fmt(th) }));
  }
  // One column per pixel: keep its largest ok and largest not-ok variable, so 20,000 vars
  // draw as at most ~2 x 930 points while every spike stays visible.
  var cols = Math.max(1, Math.floor(pw));
  var best = new Array(cols * 2);
  vars.forEach(function (v, p) {
    var c = Math.min(cols - 1, Math.floor((n > 1 ? p / (n - 1) : 0.5) * (cols - 1) + 0.5));
    var slot = c * 2 + (v.status === 'ok' ? 0 : 1);
    var cur = best[slot];
    var e = v.max_err === null || v.max_err === undefined ? Infinity : v.max_err;
    if (!cur || e > (cur.max_err === null || cur.max_err === undefined ? Infinity : cur.max_err)) best[slot] = v;
  });
  var line = '';
  for (var c = 0; c < cols; c++) {
    var a = best[c * 2], b = best[c * 2 + 1];
    var top = a && b ? ((b.max_err === null ? Infinity : b.max_err) >= (a.max_err === null ? Infinity : a.max_err) ? b : a) : (a || b);
    if (top && typeof top.max_err === 'number') line += (line ? ' L' : 'M') + X(top._p).toFixed(1) + ' ' + Y(top.max_err).toFixed(1);
  }
  if (line) svg.appendChild(sv('path', { d: line, fill: 'none', stroke: '#9bb7e0', 'stroke-width': 1 }));
  var g = sv('g', { id: 'chart-points' });
  best.forEach(function (v) {
    if (!v) return;
    var ok = v.status === 'ok';
    g.appendChild(sv('circle', { cx: X(v._p).toFixed(1), cy: Y(v.max_err).toFixed(1), r: ok ? 2 : 3.2, fill: STATUS_COLOR[v.status] || '#999', 'class': 'pt',
      onclick: function () { select(v.id, true); } },
      sv('title', { text: '#' + v._i + ' ' + v.name + '\nvar ' + v.id + ' \u00b7 ' + v.opr_type + ' \u00b7 ' + v.status + ' \u00b7 max_err ' + fmt(v.max_err) })));
  });
  svg.appendChild(g);
  roots.slice(0, 30).forEach(function (r, k) {
    var v = byId.get(r.id);
    if (!v) return;
    var x = X(v._p);
    var mg = sv('g', { 'class': 'root-mark', onclick: function () { select(r.id, true); } });
    mg.appendChild(sv('line', { x1: x, x2: x, y1: T, y2: T + ph, stroke: '#d62d20', 'stroke-width': 1, 'stroke-dasharray': '2 3' }));
    mg.appendChild(sv('path', { d: 'M' + (x - 6) + ' ' + (T - 22) + ' L' + (x + 6) + ' ' + (T - 22) + ' L' + x + ' ' + (T - 12) + ' z', fill: '#d62d20' }));
    mg.appendChild(sv('text', { x: x + 8, y: T - 13, 'font-size': 11, fill: '#d62d20', text: '#' + (k + 1) }));
    mg.appendChild(sv('circle', { cx: x, cy: Y(v.max_err), r: 5, fill: 'none', stroke: '#d62d20', 'stroke-width': 2 }));
    mg.appendChild(sv('title', { text: 'root #' + (k + 1) + ': ' + r.name + ' (var ' + r.id + ') max_err ' + fmt(r.max_err) }));
    svg.appendChild(mg);
  });
  var lg = document.getElementById('chart-legend');
  Object.keys(STATUS_COLOR).forEach(function (s) { lg.appendChild(el('span', { 'class': 'sw', style: 'background:' + STATUS_COLOR[s] })); lg.appendChild(document.createTextNode(s)); });
  lg.appendChild(document.createTextNode('  \u00b7  red triangles: roots  \u00b7  dashed line: threshold' +
    (R.threshold && R.threshold.scaled ? ' (each var is held to it scaled by min(1, its largest |value|), so a var below the line can still diverge)' : '') +
    (n > cols ? '  \u00b7  ' + n + ' variables, largest error per pixel column shown' : '')));
}

// ---------------------------------------------------------------- table
var COLS = [
  { key: '_i', label: '#', num: true }, { key: 'id', label: 'var', num: true }, { key: 'name', label: 'name' },
  { key: 'opr_type', label: 'type' }, { key: 'opr', label: 'operator' }, { key: 'dtype', label: 'dtype' },
  { key: 'shape', label: 'shape' }, { key: 'status', label: 'status' }, { key: 'max_err', label: 'max_err', num: true },
  { key: 'max_abs_err', label: 'max_abs_err', num: true }, { key: 'cosine', label: 'cosine', num: true }
];
['max_rel_err', 'mean_abs_err', 'rmse', 'max_ulp', 'n_over', 'runs_differing'].forEach(function (k) {
  if (vars.some(function (v) { return v[k] !== undefined && v[k] !== null; })) COLS.push({ key: k, label: k.replace(/_/g, ' '), num: true });
});
if (vars.some(function (v) { return v.note; })) COLS.push({ key: 'note', label: 'note' });
var state = { sort: '_i', dir: 1, page: 0, size: 100, filter: '', onlyBad: false, rows: vars.slice(), selected: null };

function cmp(key, dir) {
  return function (a, b) {
    var x = a[key], y = b[key];
    if (key === 'shape') { x = (x || []).reduce(function (s, d) { return s * d; }, 1); y = (y || []).reduce(function (s, d) { return s * d; }, 1); }
    var xn = x === null || x === undefined, yn = y === null || y === undefined;
    if (xn || yn) return xn && yn ? a._p - b._p : (xn ? 1 : -1);   // unknown values last either way
    if (x < y) return -dir;
    if (x > y) return dir;
    return a._p - b._p;
  };
}
function refilter() {
  var q = state.filter.trim().toLowerCase();
  var idq = /^#?\d+$/.test(q) ? Number(q.replace('#', '')) : null;
  state.rows = vars.filter(function (v) {
    if (state.onlyBad && v.status === 'ok') return false;
    if (!q) return true;
    if (idq !== null && v.id === idq) return true;
    return v.name.toLowerCase().indexOf(q) >= 0 || v.opr.toLowerCase().indexOf(q) >= 0 ||
           v.opr_type.toLowerCase().indexOf(q) >= 0 || v.status === q || v.dtype.toLowerCase() === q;
  });
  resort();
}
function resort() { state.rows.sort(cmp(state.sort, state.dir)); draw(); }
function head() {
  var tr = document.getElementById('vars-head');
  tr.textContent = '';
  COLS.forEach(function (c) {
    var cls = (c.num ? 'num ' : '') + (state.sort === c.key ? (state.dir > 0 ? 'sorted-asc' : 'sorted-desc') : '');
    tr.appendChild(el('th', { 'class': cls, 'data-key': c.key, title: 'sort by ' + c.label, onclick: function () {
      if (state.sort === c.key) state.dir = -state.dir; else { state.sort = c.key; state.dir = c.num && c.key !== '_i' && c.key !== 'id' ? -1 : 1; }
      state.page = 0; head(); resort(); } }, c.label));
  });
}
function cell(v, c) {
  var x = v[c.key];
  if (c.key === 'name') return el('td', { 'class': 'name' }, varLink(v.id), rootRank.has(v.id) ? el('b', { style: 'color:#d62d20' }, '  root #' + rootRank.get(v.id)) : null);
  if (c.key === 'status') return el('td', null, statusBadge(x));
  if (c.key === 'shape') return el('td', { 'class': 'mono' }, shape(x));
  if (c.key === 'opr') return el('td', { 'class': 'name mono' }, x);
  if (c.key === 'cosine') return el('td', { 'class': 'num' }, x === null || x === undefined ? '\u2014' : x.toFixed(6));
  if (c.num) return el('td', { 'class': 'num' }, c.key === '_i' || c.key === 'id' ? String(x) : fmt(x));
  return el('td', null, x === undefined ? '' : x);
}
function draw() {
  var pages = Math.max(1, Math.ceil(state.rows.length / state.size));
  state.page = Math.min(state.page, pages - 1);
  var start = state.page * state.size, slice = state.rows.slice(start, start + state.size);
  var tb = document.getElementById('vars-body');
  var frag = document.createDocumentFragment();
  slice.forEach(function (v) {
    var tr = el('tr', { 'data-id': v.id, 'class': (rootRank.has(v.id) ? 'root-row' : '') + (state.selected === v.id ? ' selected' : '') });
    COLS.forEach(function (c) { tr.appendChild(cell(v, c)); });
    frag.appendChild(tr);
  });
  tb.textContent = '';
  tb.appendChild(frag);
  document.getElementById('page-info').textContent = state.rows.length
    ? 'rows ' + (start + 1) + '\u2013' + (start + slice.length) + ' of ' + state.rows.length + (state.rows.length !== vars.length ? ' (filtered from ' + vars.length + ')' : '')
    : 'no matching variables';
  document.getElementById('prev').disabled = state.page === 0;
  document.getElementById('next').disabled = state.page >= pages - 1;
}
function table() {
  head();
  var timer = null;
  document.getElementById('filter').addEventListener('input', function (e) {
    clearTimeout(timer);
    timer = setTimeout(function () { state.filter = e.target.value; state.page = 0; refilter(); }, 120);
  });
  document.getElementById('only-bad').addEventListener('change', function (e) { state.onlyBad = e.target.checked; state.page = 0; refilter(); });
  document.getElementById('page-size').addEventListener('change', function (e) { state.size = Number(e.target.value); state.page = 0; draw(); });
  document.getElementById('prev').addEventListener('click', function () { state.page--; draw(); });
  document.getElementById('next').addEventListener('click', function () { state.page++; draw(); });
  draw();
}

// ---------------------------------------------------------------- details of one var
function select(id, scroll) {
  state.selected = id;
  var v = byId.get(id);
  var sec = document.getElementById('details-section');
  var box = document.getElementById('details');
  sec.hidden = false;
  box.textContent = '';
  document.getElementById('details-title').textContent = v ? v.name + ' (var ' + id + ')' : 'var ' + id;
  if (!v) { box.appendChild(el('p', null, 'Var ' + id + ' was not compared (not dumped in both runs).')); }
  else {
    var kv = el('div', { 'class': 'kv' });
    function row(k, val) { kv.appendChild(el('div', null, k)); kv.appendChild(el('div', null, val)); }
    row('execution position', String(v._i));
    row('status', statusBadge(v.status));
    if (rootRank.has(id)) row('root', '#' + rootRank.get(id));
    row('operator', el('span', { 'class': 'mono' }, v.opr));
    row('operator type', v.opr_type);
    row('dtype, shape', v.dtype + ' ' + shape(v.shape));
    Object.keys(v).forEach(function (k) {
      if (['id', 'name', 'opr', 'opr_type', 'dtype', 'shape', 'inputs', 'status', 'exec_index', 'index'].indexOf(k) >= 0 || k[0] === '_') return;
      var x = v[k];
      if (x === '' || x === false) return;
      row(k, Array.isArray(x) ? '[' + x.join(', ') + ']' : (typeof x === 'number' ? (k === 'cosine' ? x.toFixed(8) : fmt(x))
        : (x === null ? '\u2014' : (typeof x === 'object' ? JSON.stringify(x) : String(x)))));
    });
    row('inputs', (v.inputs || []).length ? v.inputs.map(function (u, i) { return [i ? ', ' : '', varLink(u), ' ', el('span', { 'class': 'mono' }, byId.has(u) ? fmt(byId.get(u).max_err) : '(not compared)')]; }) : 'none (model input or constant)');
    var us = consumers.get(id) || [];
    row('consumers', us.length ? us.map(function (u, i) { return [i ? ', ' : '', varLink(u)]; }) : 'none (a model output)');
    box.appendChild(kv);
  }
  var rows = document.querySelectorAll('#vars-body tr');
  for (var i = 0; i < rows.length; i++) rows[i].classList.toggle('selected', Number(rows[i].getAttribute('data-id')) === id);
  if (scroll) {
    sec.scrollIntoView({ block: 'nearest' });
    try { history.replaceState(null, '', '#var=' + id); } catch (e) { /* some viewers forbid it; the link is a convenience */ }
  }
}

// ---------------------------------------------------------------- runs
function runsSection() {
  var box = document.getElementById('runs');
  if (!runs.length) { box.appendChild(el('p', null, 'No runs: the dumps were compared as given.')); return; }
  var t = el('table', { id: 'runs-table' });
  t.appendChild(el('thead', null, el('tr', null, el('th', null, 'label'), el('th', { 'class': 'num' }, 'exit'), el('th', { 'class': 'num' }, 'seconds'), el('th', null, 'folder and command'))));
  var tb = el('tbody');
  runs.forEach(function (r) {
    var keys = r.env ? Object.keys(r.env) : [];
    var unset = keys.filter(function (k) { return r.env[k] === null; });
    var env = (unset.length ? ['env'].concat(unset.map(function (k) { return '-u ' + shq(k); })) : [])
      .concat(keys.filter(function (k) { return r.env[k] !== null; }).map(function (k) { return k + '=' + shq(r.env[k]); }));
    var cmd = env.concat((r.argv || []).map(shq)).join(' ');
    var state = r.status && r.status !== 'ok' ? ' \u2014 ' + r.status + (r.signal ? ' (' + r.signal + ')' : '') : '';
    tb.appendChild(el('tr', null, el('td', null, r.label + (r.config && r.config !== r.label ? ' (' + r.config + ')' : ''), state ? el('b', { style: 'color:#d62d20' }, state) : null),
      el('td', { 'class': 'num', style: r.returncode ? 'color:#d62d20;font-weight:600' : null }, String(r.returncode)),
      el('td', { 'class': 'num' }, r.seconds === null ? '\u2014' : r.seconds.toFixed(2)),
      el('td', null, el('div', { 'class': 'mono' }, r.dir), el('pre', { 'class': 'cmd' }, cmd))));
  });
  t.appendChild(tb);
  box.appendChild(t);
}

// ---------------------------------------------------------------- deep links
// #var=37 selects a var; q=text filters; bad=1 keeps only vars that are not ok; sort=-max_err sorts.
function applyHash() {
  var h = (location.hash || '').replace(/^#/, '');
  if (!h) return;
  var sel = null;
  h.split('&').forEach(function (kv) {
    var i = kv.indexOf('='), k = i < 0 ? kv : kv.slice(0, i), val = '';
    try { val = i < 0 ? '' : decodeURIComponent(kv.slice(i + 1)); } catch (e) { return; }
    if (k === 'q') { state.filter = val; document.getElementById('filter').value = val; }
    else if (k === 'bad') { state.onlyBad = val !== '0'; document.getElementById('only-bad').checked = state.onlyBad; }
    else if (k === 'sort') {
      var key = val.replace(/^[-+]/, '');
      if (COLS.some(function (c) { return c.key === key; })) { state.sort = key; state.dir = val.charAt(0) === '-' ? -1 : 1; }
    }
    else if (k === 'var' && /^\d+$/.test(val)) sel = Number(val);
  });
  head();
  refilter();
  if (sel !== null) select(sel, false);
}

header();
rootsSection();
chart();
table();
runsSection();
applyHash();
document.body.setAttribute('data-rendered', String(vars.length));
if (t0 || t0 === 0) document.body.setAttribute('data-render-ms', String(Math.round(performance.now() - t0)));
})();
"""
