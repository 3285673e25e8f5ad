"""The records of a report: one variable, root, run and threshold, and their JSON objects.

Each record is a frozen dataclass with ``to_json``/``from_json``. A variable is described
once, by :data:`VAR_FIELDS` (key, kind, always written, meaning): it gives the JSON keys of
``vars[]`` in order, the fields of :class:`ReportVar`, and what :func:`var_from_diff` takes
from a compare ``VarDiff`` (same attribute names). :data:`ROOT_FIELDS` does the same for
roots. :class:`lar_prec.report.Report` holds these records; import them from there.
"""
from __future__ import annotations

import math
import shlex
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable, Dict, Iterable, Mapping, Optional, Sequence, Tuple, Union

from lar_prec.errors import UsageError
from lar_prec.records import VarKey, frozen_record
from lar_prec.compare.records import STATUSES, VarDiff

if TYPE_CHECKING:
    from lar_prec.run.record import RunResult
    from lar_prec.diagnosis.tree import Root

SCHEMA = "lar-prec.report/1"
#: every value a variable's ``status`` may take (design.md)
COMMANDS = ("naive-vs-default", "shake", "compare", "tree", "sweep", "devices", "diff")

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


def over_floor(err: Optional[float], floor: Optional[float]) -> str:
    """``local error E > its floor F (xM)`` with as many digits as tell E from F (3 to 8): never
    "8.76e-07 > floor 8.76e-07 (x1)"; "at its floor" when they agree to 8 digits."""
    if err is None or not math.isfinite(err):
        e, f, m = "NaN/Inf", fmt_err(floor), ""
    elif not floor:
        e, f, m = fmt_err(err), "0", ""
    else:
        digits = next((k for k in range(3, 9) if f"{err:.{k}g}" != f"{floor:.{k}g}"), None)
        if digits is None:
            return f"local error {fmt_err(err)}, at its floor"
        ratio = err / floor
        mdig = next((k for k in range(3, 9) if abs(float(f"{ratio:.{k}g}") - 1) > 0 or k == 8), 8)
        e, f, m = f"{err:.{digits}g}", f"{floor:.{digits}g}", f"x{ratio:.{max(mdig, 3)}g}"
    return f"local error {e} > its floor {f}" + (f" ({m})" if m else "")


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


# ============================================================================ field tables
# A kind says how a value is normalised (field), written (JSON) and read back:
#   int, str, bool; float (NaN/Inf -> None); num (an int stays an int); ints (tuple of ints).


def _as_int(v: Any, where: str) -> int:
    try:
        return int(v)
    except (TypeError, ValueError):
        raise UsageError(f"report JSON: {where} must be an integer, got {v!r:.80}") from None


def _as_num(v: Any) -> Optional[Number]:
    return int(v) if isinstance(v, int) and not isinstance(v, bool) else _finite(v)


def _read(v: Any, kind: str, where: str) -> Any:
    """A field value from a JSON (or VarDiff) value; None stays None."""
    if v is None:
        return None
    if kind == "float":
        return _finite(v)
    if kind == "num":
        return _as_num(v)
    if kind == "int":
        return _as_int(v, where)
    if kind == "ints":
        return _ints(v, where)
    if kind == "bool":
        return bool(v)
    return str(v)


#: JSON writers per kind (the value is not None; fields are already normalised)
_WRITE: Dict[str, Callable[[Any], Any]] = {
    "int": int, "str": str, "bool": bool, "float": _finite, "num": _as_num,
    "ints": lambda v: [int(x) for x in v],
}

#: One variable, one description: (key, kind, always written, meaning). It defines the JSON
#: keys of ``vars[]`` (in this order), the fields of :class:`ReportVar`, and what
#: :func:`var_from_diff` takes from a compare ``VarDiff`` (same attribute names). The first
#: eleven are the design.md contract. "always" keys are written even when null.
VAR_FIELDS: Tuple[Tuple[str, str, bool, str], ...] = (
    ("id", "int", True, "var id, as in the dump file names"),
    ("name", "str", True, "var name"),
    ("opr", "str", True, "name of the operator that writes it"),
    ("opr_type", "str", True, "operator type, e.g. ConvolutionForward"),
    ("dtype", "str", True, "MegEngine dtype (of A when they differ)"),
    ("shape", "ints", True, "shape (of A when they differ)"),
    ("inputs", "ints", True, "var ids of the operator's inputs"),
    ("status", "str", True, "ok, index_equivalent, divergent, nonfinite, shape_mismatch, dtype_mismatch or missing"),
    ("max_err", "float", True, "MegEngine's max |a-b| / max(|a|, |b|, 1); for shake: largest over the runs"),
    ("max_abs_err", "float", True, "max |a-b|"),
    ("cosine", "float", True, "cosine similarity of a and b"),
    ("max_rel_err", "float", True, "max |a-b| / max(|a|, |b|) over elements not both zero"),
    ("mean_abs_err", "float", True, "mean |a-b|"),
    ("rmse", "float", True, "root mean square of a-b"),
    ("max_ulp", "num", True, "largest distance in units in the last place"),
    ("n_over", "int", True, "elements whose error is above the var's threshold"),
    ("n_diff", "int", True, "elements that differ at all (null: not counted)"),
    ("n_nonfinite", "int", True, "positions NaN/Inf on one side only"),
    ("size", "int", True, "number of elements"),
    ("scale", "float", True, "largest |value| on either side, what the auto threshold scales by"),
    ("norm_err", "float", True, "max_err over min(1, scale): what the auto threshold is compared with"),
    ("threshold", "float", True, "the threshold this var was held to"),
    ("within_share", "float", True, "share of its elements within that threshold (CANN's 99% rule counts this)"),
    ("pass_threshold", "float", True, "smallest threshold at which it passes: max_err, or with --pass-ratio R the "
     "R-quantile of its error"),
    ("err_p50", "float", True, "median of its elements' error (max_err's metric; float vars; quantiles are at most "
     "6.25% above the exact one)"),
    ("err_p90", "float", True, "90th percentile of its elements' error"),
    ("err_p99", "float", True, "99th percentile of its elements' error"),
    ("err_p999", "float", True, "99.9th percentile of its elements' error"),
    ("rel_err_p50", "float", True, "median of its elements' relative error |a-b| / max(|a|, |b|) (compare --stats)"),
    ("rel_err_p90", "float", True, "90th percentile of the relative error"),
    ("rel_err_p99", "float", True, "99th percentile of the relative error"),
    ("rel_err_p999", "float", True, "99.9th percentile of the relative error"),
    ("abs_err_p50", "float", True, "median of its elements' absolute error |a-b| (compare --stats)"),
    ("abs_err_p90", "float", True, "90th percentile of the absolute error"),
    ("abs_err_p99", "float", True, "99th percentile of the absolute error"),
    ("abs_err_p999", "float", True, "99.9th percentile of the absolute error"),
    ("worst_index", "ints", True, "index of the element with the largest max_err"),
    ("worst_a", "float", True, "its value in A"),
    ("worst_b", "float", True, "its value in B"),
    ("scale_unknown", "bool", True, "the scale could not be read (e.g. all values non-finite)"),
    ("dtype_b", "str", True, "dtype in B when it differs"),
    ("shape_b", "ints", True, "shape in B when it differs"),
    ("only_in", "str", True, "for missing: 'a' or 'b', the only folder that has the var"),
    ("note", "str", True, "why the status is what it is, when it needs saying"),
    ("runs_differing", "int", False, "shake: how many runs differ from run 1"),
    ("exec_index", "int", False, "position in execution order, when it is not the list position"),
)
_VAR_REQUIRED = ("id", "name", "opr", "opr_type", "dtype", "shape", "inputs", "status", "max_err")

#: The roots' JSON keys, as :data:`VAR_FIELDS` for the vars.
ROOT_FIELDS: Tuple[Tuple[str, str, bool, str], ...] = (
    ("id", "int", True, "var id of the root"),
    ("name", "str", True, "var name"),
    ("opr", "str", True, "operator name"),
    ("opr_type", "str", True, "operator type"),
    ("max_err", "float", True, "the root's max_err"),
    ("input_max_err", "float", True, "largest max_err among its compared inputs"),
    ("amplification", "float", True, "max_err / input_max_err (null: unknown, or the inputs are exact)"),
    ("path", "ints", True, "var ids from a model input to the root (root last)"),
    ("neighbourhood", "ints", True, "var ids the HTML graph draws (empty: inputs, their inputs, consumers)"),
    ("status", "str", False, "the root's status"),
    ("dtype", "str", False, "the root's dtype"),
    ("inputs_equal", "bool", False, "its compared inputs are bitwise equal"),
    ("worst_input", "int", True, "the input with the largest error"),
    ("note", "str", False, "why it is a root, when it needs saying"),
    ("module", "str", False, "the module of the user's network its operator is in (from its constants', own or "
     "consumer's name; first roots)"),
    ("module_how", "str", False, "how that module was told, or why it cannot be (a name made from its input's)"),
)
_ROOT_REQUIRED = ("id", "name", "opr", "opr_type", "max_err", "input_max_err")


def _fields_json(obj: Any, table: Tuple[Tuple[str, str, bool, str], ...]) -> Dict[str, Any]:
    """The JSON object of ``obj`` (a record, or a VarDiff: same attribute names) per ``table``."""
    d: Dict[str, Any] = {}
    for key, kind, always, _ in table:
        v = getattr(obj, key, None)
        if v is not None:
            d[key] = _WRITE[kind](v)
        elif always:
            d[key] = None
    extra = getattr(obj, "extra", None)
    return _merge_extra(d, extra) if extra else d


def _fields_from_json(d: Mapping[str, Any], table: Tuple[Tuple[str, str, bool, str], ...],
                      required: Sequence[str], where: str) -> Dict[str, Any]:
    """Keyword arguments of a record from its JSON object; unknown keys go to ``extra``."""
    if not isinstance(d, Mapping):
        raise UsageError(f"report JSON: {where} must be an object, got {type(d).__name__}")
    kw: Dict[str, Any] = {}
    for key, kind, _, _ in table:
        if key in required:
            v = _req(d, key, where)
            kw[key] = _read(v, kind, f"{where}.{key}") if kind != "ints" else _ints(v, f"{where}.{key}")
        elif d.get(key) is not None:
            kw[key] = _read(d[key], kind, f"{where}.{key}")
    kw["extra"] = _unknown(d, (k for k, _, _, _ in table))
    return kw


# ============================================================================ records


class _TableRecord:
    """JSON of a record whose fields a table describes (``_TABLE``, ``_REQUIRED``, ``_WHAT``):
    one ``to_json``/``from_json`` for vars and roots."""

    _TABLE: Tuple[Tuple[str, str, bool, str], ...] = ()
    _REQUIRED: Tuple[str, ...] = ()
    _WHAT = "record"

    def to_json(self) -> Dict[str, Any]:
        """The design.md object: the table's keys in its order, then ``extra`` (flat)."""
        return _fields_json(self, self._TABLE)

    @classmethod
    def _check(cls, d: Mapping[str, Any], where: str) -> None:
        """Checks beyond the table's types (none by default)."""

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> Any:
        """Inverse of :meth:`to_json` (NaN written as null comes back as None; unknown keys
        go to ``extra``).

        Raises:
            UsageError: a required key is missing or has the wrong type.
        """
        where = f"{cls._WHAT} {d.get('id', '?')}" if isinstance(d, Mapping) else cls._WHAT
        kw = _fields_from_json(d, cls._TABLE, cls._REQUIRED, where)
        cls._check(d, where)
        return cls(**kw)  # type: ignore[call-arg]


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


@dataclass(frozen=True)
class ReportVar(VarKey, _TableRecord):
    """One compared variable, in execution order: the fields of :data:`VAR_FIELDS`
    (meanings there), in its order, then ``extra`` (further keys, written flat in the JSON).

    NaN and Inf never appear: they are None, as in the JSON.
    """

    max_err: Optional[float]
    max_abs_err: Optional[float] = None
    cosine: Optional[float] = None
    max_rel_err: Optional[float] = None
    mean_abs_err: Optional[float] = None
    rmse: Optional[float] = None
    max_ulp: Optional[Number] = None
    n_over: Optional[int] = None
    n_diff: Optional[int] = None
    n_nonfinite: Optional[int] = None
    size: Optional[int] = None
    scale: Optional[float] = None
    norm_err: Optional[float] = None
    threshold: Optional[float] = None
    within_share: Optional[float] = None
    pass_threshold: Optional[float] = None
    err_p50: Optional[float] = None
    err_p90: Optional[float] = None
    err_p99: Optional[float] = None
    err_p999: Optional[float] = None
    rel_err_p50: Optional[float] = None
    rel_err_p90: Optional[float] = None
    rel_err_p99: Optional[float] = None
    rel_err_p999: Optional[float] = None
    abs_err_p50: Optional[float] = None
    abs_err_p90: Optional[float] = None
    abs_err_p99: Optional[float] = None
    abs_err_p999: Optional[float] = None
    worst_index: Optional[Tuple[int, ...]] = None
    worst_a: Optional[float] = None
    worst_b: Optional[float] = None
    scale_unknown: Optional[bool] = None
    dtype_b: Optional[str] = None
    shape_b: Optional[Tuple[int, ...]] = None
    only_in: Optional[str] = None
    note: Optional[str] = None
    runs_differing: Optional[int] = None
    exec_index: Optional[int] = None
    extra: Mapping[str, Any] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        """True when the variable is within the threshold."""
        return self.status == "ok"

    _TABLE, _REQUIRED, _WHAT = VAR_FIELDS, _VAR_REQUIRED, "var"

    @classmethod
    def _check(cls, d: Mapping[str, Any], where: str) -> None:
        status = str(_req(d, "status", where))
        if status not in STATUSES:
            raise UsageError(f"report JSON: {where} has status {status!r}; expected one of {', '.join(STATUSES)}")


def var_from_diff(d: "VarDiff") -> ReportVar:
    """The :class:`ReportVar` of one compare ``VarDiff``: every field of :data:`VAR_FIELDS`
    taken by name, normalised as the JSON reads it (NaN/Inf -> None)."""
    return ReportVar(**{key: _read(getattr(d, key, None), kind, key) for key, kind, _, _ in VAR_FIELDS})


@dataclass(frozen=True)
class ReportRoot(_TableRecord):
    """A variable where divergence starts: not ``ok`` while every input it depends on is ``ok``.

    Fields as :data:`ROOT_FIELDS`. ``amplification`` is None when unknown or when the inputs
    are exact (then ``inputs_equal``); ``path`` runs from a model input to this root;
    ``extra`` keeps further keys, written flat in the JSON.
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
    dtype: Optional[str] = None
    inputs_equal: Optional[bool] = None
    worst_input: Optional[int] = None
    note: Optional[str] = None
    module: Optional[str] = None
    module_how: Optional[str] = None
    extra: Mapping[str, Any] = field(default_factory=dict)

    _TABLE, _REQUIRED, _WHAT = ROOT_FIELDS, _ROOT_REQUIRED, "root"


def root_from_tree(r: "Root", path: Sequence[int] = (), module: Optional[Tuple[Optional[str], str]] = None) -> ReportRoot:
    """The :class:`ReportRoot` of a vartree ``Root`` (an infinite amplification, i.e. exact
    inputs, becomes None with ``inputs_equal``); ``module``: (its module, how it was told)."""
    amp = r.amplification
    return frozen_record(ReportRoot, {
        "id": int(r.id), "name": r.name, "opr": r.opr, "opr_type": r.opr_type, "max_err": _finite(r.max_err),
        "input_max_err": _finite(r.input_max_err), "amplification": _finite(amp), "path": tuple(path),
        "neighbourhood": (), "status": r.status, "dtype": r.dtype, "inputs_equal": amp is not None and math.isinf(amp),
        "worst_input": None if r.worst_input is None else int(r.worst_input), "note": r.note,
        "module": module[0] if module else None, "module_how": module[1] if module else None, "extra": {}})


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
    env = getattr(result, "environment", None)
    if env:
        extra["environment"] = dict(env)
    if getattr(result, "versions_from", None):  # the MegEngine the run ran: its stderr, or the wheel (bundled)
        extra.update(megengine_version=result.megengine_version, megdnn_version=result.megdnn_version,
                     versions_from=result.versions_from)
    remote = getattr(result, "remote", None)
    if remote:
        extra["remote"] = {k: remote.get(k) for k in ("transport", "target", "remote_dir") if k in remote}
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
