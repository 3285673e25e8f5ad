"""What an analysis leaves when its dumps are gone: the run's identity and one row per operator
output (:class:`Summary`), made from its report (a :class:`lar_prec.report.model.Report`, or
the JSON of ``quant``/``mixed``) and the ``run.json`` files of its runs.

Per-var summaries only: no dump value ever goes into a summary. A summary is what the store
writes (:mod:`lar_prec.store.db`) and what ``check`` and ``history`` read back. No SQLAlchemy.

The **series** of a run is what its history is made of: the same model and input (sha256),
the same command, configuration and options, on the same kind of device (CPU model and
architecture, or the phone's model). Builds (load_and_run path + sha256 + ``--version``,
MegEngine version) and time vary along it.
"""
from __future__ import annotations

import dataclasses
import datetime as _dt
import hashlib
import json
import os
import re
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Dict, Iterable, List, Mapping, Optional, Sequence, Tuple

from lar_prec import __version__
from lar_prec.compare.records import AGREEING
from lar_prec.dumps.keys import dump_keys
from lar_prec.errors import LarPrecError
from lar_prec.opkey import is_generated_name, operator_keys, var_role
from lar_prec.outputs import sha256_file
from lar_prec.report.model import exit_code
from lar_prec.run.record import read_run_json

#: flags whose value is a path of this analysis (not part of the options a series compares)
_PATH_FLAGS = frozenset({"--input", "--bin-io-dump", "--io-dump", "--bin-out-dump", "--fast-run-algo-policy",
                         "--iter", "--warmup-iter"})


@dataclass(frozen=True)
class RunSummary:
    """The identity of one analysis and its result (one row of the store's ``runs``)."""

    uid: str
    created: str
    command: str
    config: str
    options: Tuple[str, ...]
    seed: Optional[int]
    lar_prec_version: str
    lar_path: Optional[str]
    lar_sha256: Optional[str]
    lar_version: Optional[str]
    megengine_version: Optional[str]
    host: Optional[str]
    device: str
    device_kind: str
    cpu_model: Optional[str]
    cpu_features: Tuple[str, ...]
    model_name: Optional[str]
    model_sha256: Optional[str]
    input_sha256: Optional[str]
    verdict: str
    exit_code: int
    n_vars: int
    n_not_ok: int
    n_roots: int
    output_err: Optional[float]
    analysis_dir: Optional[str]
    argv: Tuple[str, ...] = ()
    settings: Mapping[str, Any] = field(default_factory=dict)

    @property
    def series(self) -> str:
        """The history this run belongs to (see the module docstring), 24 hex digits."""
        return series_key(self.model_sha256, self.input_sha256, self.command, self.config, self.options,
                          self.device_kind)

    @property
    def build(self) -> str:
        """A short name of the build: load_and_run's version and sha256, MegEngine's version."""
        sha = f" @{self.lar_sha256[:12]}" if self.lar_sha256 else ""
        mge = f" (MegEngine {self.megengine_version})" if self.megengine_version else ""
        return f"{self.lar_version or self.lar_path or 'unknown'}{sha}{mge}"


@dataclass(frozen=True)
class OpSummary:
    """One operator output of one run (one row of the store's ``ops``). ``part`` names the
    option (sweep) a row belongs to, "" for the analysis' own comparison."""

    part: str
    op_key: str
    var_id: int
    name: str
    opr_type: str
    dtype: Optional[str]
    shape: str
    status: str
    max_err: Optional[float]
    max_abs_err: Optional[float] = None
    cosine: Optional[float] = None
    max_ulp: Optional[float] = None
    n_nonfinite: Optional[int] = None
    local_err: Optional[float] = None
    floor: Optional[float] = None
    algorithm: Optional[str] = None
    jitter_band: Optional[float] = None
    is_root: bool = False
    root_rank: Optional[int] = None
    cause: Optional[str] = None
    #: the keys of its inputs (what check walks to name the root among regressed operators)
    inputs: Tuple[str, ...] = ()


@dataclass(frozen=True)
class SpeedSummary:
    """One timed part of a run (one row of the store's ``speeds``): the plain default run
    (``part`` "") or an option, timed ``rounds`` rounds of fresh processes without any dump
    (:mod:`lar_prec.workflows.sweep.speed`). ``median_ms``: the median time per iteration over
    every timed iteration; ``round_ms``: each round's median; ``spread_lo``..``spread_hi``: from
    the lowest lower quartile of a round's iterations to the highest upper quartile. Speed is
    comparable only on one :attr:`machine`: the CPU model, the threads and the load_and_run."""

    part: str
    status: str
    median_ms: Optional[float]
    round_ms: Tuple[float, ...]
    spread_lo: Optional[float]
    spread_hi: Optional[float]
    rounds: int
    iters: int
    warmup_iter: int
    threads: int
    device: str
    cpu_model: Optional[str]
    #: which load_and_run: the bundled runner, or the binary's path (a new build at the same path
    #: is the same load_and_run: its history is what a slower build is judged against)
    lar: str
    reason: Optional[str] = None
    speedup: Optional[float] = None
    speedup_lo: Optional[float] = None
    speedup_hi: Optional[float] = None
    measurable: bool = False

    @property
    def machine(self) -> str:
        """What timings are comparable across: CPU model, threads, load_and_run (24 hex digits)."""
        return hashlib.sha256(self.machine_words.encode()).hexdigest()[:24]

    @property
    def machine_words(self) -> str:
        return machine_words(self.cpu_model, self.threads, self.lar)


def machine_words(cpu_model: Optional[str], threads: int, lar: str) -> str:
    """``Intel(R) Xeon(R) ..., 1 thread, bundled lar_prec.lar``: a speed's machine in words."""
    return f"{cpu_model or 'unknown CPU'}, {threads} thread{'s' * (threads != 1)}, {lar}"


@dataclass(frozen=True)
class Summary:
    run: RunSummary
    ops: Tuple[OpSummary, ...]
    #: its timed parts (none when it was not timed)
    speeds: Tuple[SpeedSummary, ...] = ()


def lar_identity(lar_path: Optional[str]) -> str:
    """Which load_and_run a run used, as speed keys it: the binary's path, or the bundled one."""
    return lar_path or "bundled lar_prec.lar"


def speed_rows(speed: Mapping[str, Any], options: Mapping[str, Mapping[str, Any]], run: RunSummary
               ) -> Tuple[SpeedSummary, ...]:
    """The speed rows of a timing: ``speed`` how it was timed (a sweep report's ``speed``:
    rounds, warmup_iter, iter, threads, device, ``default`` the default run's times, ``off``
    when not timed), ``options`` each option's times (:meth:`OptionSpeed.to_json`); the CPU
    and load_and_run are the run's (timed runs are made where the analysis ran)."""
    if not isinstance(speed, Mapping) or speed.get("off") or not speed.get("rounds"):
        return ()
    parts = [("", speed.get("default"))] + [(str(k), v) for k, v in options.items()]
    out = []
    for part, t in parts:
        if not isinstance(t, Mapping):
            continue
        spread = t.get("spread_ms") or (None, None)
        interval = t.get("speedup_interval") or (None, None)
        out.append(SpeedSummary(
            part=part, status=str(t.get("status") or "timed"), median_ms=_num(t.get("median_ms")),
            round_ms=tuple(x for x in (_num(v) for v in t.get("round_ms") or ()) if x is not None),
            spread_lo=_num(spread[0]), spread_hi=_num(spread[1]), rounds=int(speed.get("rounds") or 0),
            iters=int(speed.get("iter") or 0), warmup_iter=int(speed.get("warmup_iter") or 0),
            threads=int(speed.get("threads") or 1), device=str(speed.get("device") or ""), cpu_model=run.cpu_model,
            lar=lar_identity(run.lar_path), reason=t.get("reason") or None, speedup=_num(t.get("speedup")),
            speedup_lo=_num(interval[0]), speedup_hi=_num(interval[1]), measurable=bool(t.get("measurable"))))
    return tuple(out)


def _report_speeds(report: Any, run: RunSummary) -> Tuple[SpeedSummary, ...]:
    """A sweep report's timed runs (``sweep --speed-runs``), as speed rows."""
    extra = getattr(report, "extra", None) or {}
    opts = {str(o.get("option")): o.get("speed") for o in extra.get("options") or () if isinstance(o, Mapping)}
    return speed_rows(extra.get("speed") or {}, {k: v for k, v in opts.items() if isinstance(v, Mapping)}, run)


def series_key(model_sha256: Optional[str], input_sha256: Optional[str], command: str, config: str,
               options: Sequence[str], device_kind: str) -> str:
    """The series hash (the store's ``runs.series``; migration 0002 computes the same)."""
    text = "\x1f".join([model_sha256 or "", input_sha256 or "", command, config, " ".join(options), device_kind])
    return hashlib.sha256(text.encode()).hexdigest()[:24]


def now_iso() -> str:
    return _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")


def _utc(text: Optional[str]) -> str:
    """A run.json time in UTC (the store orders runs by this text), now when unknown."""
    try:
        t = _dt.datetime.fromisoformat(str(text))
    except ValueError:
        return now_iso()
    return (t if t.tzinfo else t.astimezone()).astimezone(_dt.timezone.utc).isoformat(timespec="seconds")


# --------------------------------------------------------------------------- run identity


def _num(x: Any) -> Optional[float]:
    if isinstance(x, bool) or not isinstance(x, (int, float)):
        return None
    f = float(x)
    return f if f == f and abs(f) != float("inf") else None


def _run_jsons(runs: Iterable[Any]) -> List[Dict[str, Any]]:
    """The run.json of each run still on disk (a run folder that is gone counts as unknown)."""
    out = []
    for r in runs:
        if isinstance(r, Mapping) and str(r.get("schema", "")).startswith("lar-prec.run/"):
            out.append(dict(r))  # quant and mixed carry their runs' records whole
            continue
        try:
            out.append(read_run_json(getattr(r, "dir", None) or r["dir"]))
        except (LarPrecError, KeyError, TypeError):
            continue
    return out


#: the label of a run made again to see whether its result repeats (sweep, mixed, zoo)
_RERUN = re.compile(r"-again(?:-\d+)?\Z")


def _options(argv: Sequence[str], prefix: int, model_path: Optional[str]) -> Tuple[str, ...]:
    """The load_and_run flags of a run (after the ``prefix`` words that start load_and_run),
    canonical (sorted), without its paths."""
    out: List[str] = []
    it = iter(argv[max(1, prefix):])
    for a in it:
        if a == model_path or not a.startswith("-"):
            continue
        name = a.split("=", 1)[0]
        if name in _PATH_FLAGS:
            if "=" not in a:
                next(it, None)
            continue
        out.append(a)
    return tuple(sorted(set(out)))


def _lar_sha256(path: Optional[str]) -> Optional[str]:
    if not path or not os.path.isabs(path) or not os.path.isfile(path):
        return None  # the bundled runner (named by its version), or a binary on a device
    try:
        return sha256_file(path)
    except OSError:
        return None


def _inputs_sha(inputs: Any) -> Optional[str]:
    items = inputs.get("inputs") if isinstance(inputs, Mapping) else inputs
    if not isinstance(items, list) or not items:
        return None
    text = ";".join(f"{i.get('name')}={i.get('sha256')}" for i in items if isinstance(i, Mapping))
    return hashlib.sha256(text.encode()).hexdigest()


def run_summary(command: str, verdict: str, exit_code: int, *, runs: Sequence[Mapping[str, Any]],
                analysis_dir: Optional[str], n_vars: int, n_not_ok: int, n_roots: int,
                output_err: Optional[float], inputs: Any = None, model: Optional[str] = None,
                argv: Sequence[str] = (), settings: Optional[Mapping[str, Any]] = None) -> RunSummary:
    """A run's identity from its runs' run.json records (``runs``; the test run is the last
    one not under the naive reference configuration)."""
    # a second run of a wrong option or side (``nchw44-again``) asks whether it repeats: the
    # analysis is not about it, and its flags must not name the series
    tests = [r for r in runs if (r.get("config") or {}).get("name") != "naive"
             and not _RERUN.search(str(r.get("label") or ""))] or list(runs)
    test = tests[-1] if tests else {}
    env = test.get("environment") or {}
    lar = test.get("load_and_run") or {}
    model_rec = test.get("model") or {}
    model_path = model_rec.get("path") or model
    cfg = test.get("config") or {}
    uname = str(env.get("uname") or "").split()
    arch = uname[-2] if len(uname) >= 2 else ""
    cpu = env.get("android_model") or env.get("cpu_model") or "unknown"
    host = env.get("host")
    lar_path = lar.get("path") or env.get("load_and_run")
    created = _utc(next((r.get("started") for r in runs if r.get("started")), None))
    uid = uuid.uuid4().hex  # summarize() gives it the analysis' content identity (content_uid)
    input_sha = _inputs_sha(inputs) or _inputs_sha(test.get("inputs"))
    return RunSummary(
        uid=uid, created=created, command=command, config=str(cfg.get("name") or ""),
        options=_options(test.get("argv") or (), len(lar.get("argv_prefix") or ()), model_path), seed=(settings or {}).get("seed"),
        lar_prec_version=__version__, lar_path=lar_path,
        lar_sha256=_lar_sha256(lar.get("path")) if host in (None, "local") else None,
        lar_version=lar.get("version") or env.get("load_and_run_version"),
        megengine_version=test.get("megengine_version"), host=host,
        device=" ".join(x for x in (str(host or "local"), str(cpu), arch) if x),
        device_kind=f"{cpu} {arch}".strip(), cpu_model=env.get("cpu_model"),
        cpu_features=tuple(env.get("cpu_features") or ()),
        model_name=Path(model_path).name if model_path else None, model_sha256=model_rec.get("sha256"),
        input_sha256=input_sha, verdict=verdict, exit_code=int(exit_code), n_vars=n_vars, n_not_ok=n_not_ok,
        n_roots=n_roots, output_err=output_err, analysis_dir=analysis_dir, argv=tuple(argv),
        settings=dict(settings or {}))


# --------------------------------------------------------------------------- operator rows


def _dump_keys(dump_dir: Optional[str]) -> Optional[Dict[int, str]]:
    """Keys from the reference dump (constants hashed from their bytes), or None when it is gone."""
    if not dump_dir or not os.path.isdir(dump_dir):
        return None
    try:
        return dump_keys(dump_dir)
    except (LarPrecError, OSError):
        return None


def _algorithm(extra: Mapping[str, Any]) -> Optional[str]:
    algos = extra.get("algorithms")
    if isinstance(algos, Mapping) and algos:
        return " | ".join(sorted({str(a) for a in algos.values()}))
    a = extra.get("algorithm")
    return str(a) if a else None


def report_ops(report: Any, reference_dump: Optional[str] = None) -> Tuple[OpSummary, ...]:
    """One row per computed var of a Report (and, for a sweep, one per var and option)."""
    vars_ = list(report.vars)
    keys = _dump_keys(reference_dump) or {}
    missing = [v for v in vars_ if int(v.id) not in keys]
    if missing:
        keys = {**operator_keys(vars_), **keys}
    roots = {int(r.id): (k, r) for k, r in enumerate(report.roots, 1)}
    shake = report.command == "shake"
    rows: List[OpSummary] = []
    for v in vars_:
        if var_role(v) != "computed":
            continue
        ex = v.extra or {}
        rank_root = roots.get(int(v.id))
        root_extra = rank_root[1].extra if rank_root else {}
        cause = (root_extra.get("cause") or root_extra.get("wrong_side") or ex.get("cause")) if rank_root else None
        base = OpSummary(
            part="", op_key=keys[int(v.id)], var_id=int(v.id), name=v.name, opr_type=v.opr_type, dtype=v.dtype,
            shape="x".join(str(d) for d in v.shape or ()), status=v.status, max_err=v.max_err,
            max_abs_err=v.max_abs_err, cosine=v.cosine, max_ulp=_num(v.max_ulp), n_nonfinite=v.n_nonfinite,
            local_err=_num(ex.get("local_err")), floor=_num(ex.get("floor")), algorithm=_algorithm(ex),
            jitter_band=v.max_err if shake else None, is_root=rank_root is not None,
            root_rank=rank_root[0] if rank_root else None, cause=None if cause is None else str(cause),
            inputs=tuple(keys[int(u)] for u in v.inputs or () if int(u) in keys))
        rows.append(base)
        per_option = ex.get("options") if report.command == "sweep" else None
        if isinstance(per_option, Mapping):
            local = ex.get("local") if isinstance(ex.get("local"), Mapping) else {}
            for opt, err in per_option.items():
                rows.append(OpSummary(part=str(opt), op_key=base.op_key, var_id=base.var_id, name=v.name,
                                      opr_type=v.opr_type, dtype=v.dtype, shape=base.shape,
                                      status="ok", max_err=_num(err), local_err=_num(local.get(opt)),
                                      inputs=base.inputs))
    return tuple(rows)


def _output_err(report: Any) -> Optional[float]:
    """The largest error among the graph's outputs (vars no other var reads)."""
    read = {int(u) for v in report.vars for u in (v.inputs or ())}
    errs = [v.max_err for v in report.vars if int(v.id) not in read and v.max_err is not None]
    return max(errs) if errs else None


def summary_from_report(report: Any, *, argv: Sequence[str] = (), settings: Optional[Mapping[str, Any]] = None
                        ) -> Summary:
    """The summary of a finished analysis' Report (its run folders read when still on disk)."""
    runs = _run_jsons(report.runs)
    ref_dump = next((str(r.extra.get("dump_dir")) for r in report.runs if r.extra.get("dump_dir")), None)
    if ref_dump is None and isinstance(report.extra.get("dirs"), Mapping):
        ref_dump = report.extra["dirs"].get("a")
    ops = report_ops(report, ref_dump)
    graph = None
    if not runs:  # compare: no run records; its series is the reference graph's structure
        graph = hashlib.sha256(" ".join(sorted({o.op_key for o in ops})).encode()).hexdigest()
    run = run_summary(report.command, report.verdict, exit_code(report), runs=runs,  # type: ignore[arg-type]
                      analysis_dir=report.extra.get("analysis_dir") or (str(Path(ref_dump).parent) if ref_dump else None),
                      n_vars=len(report.vars), n_not_ok=report.n_not_ok, n_roots=len(report.roots),
                      output_err=_output_err(report), inputs=report.extra.get("inputs"), model=report.model,
                      argv=argv, settings=settings)
    if graph is not None and run.model_sha256 is None:
        run = dataclasses.replace(run, model_sha256=graph, model_name=run.model_name or "graph of " + Path(ref_dump or "?").name)
    return Summary(run, ops, _report_speeds(report, run) if report.command == "sweep" else ())


def summary_from_result_json(data: Mapping[str, Any], exit_code: int, *, argv: Sequence[str] = ()) -> Summary:
    """The summary of ``quant`` or ``mixed`` (their own JSON, no Report): one row per layer
    (quant: accumulated error and cosine, local error) or per measured operator (mixed)."""
    schema = str(data.get("schema") or "")
    rows: List[OpSummary] = []
    if schema.startswith("lar-prec.quant"):
        command = "quant"
        for i, l in enumerate(data.get("layers") or ()):
            acc, loc = l.get("accumulated") or {}, l.get("local") or {}
            # the int8 layer's own name: unique (several int8 layers may pair with one float var) and
            # the name keep_in_float lists
            name = str(l.get("name") or l.get("float_name"))
            rows.append(OpSummary("", _name_key(name, i), int(l.get("id") or i), name, str(l.get("opr_type")),
                                  l.get("dtype"), "", "divergent" if name in (data.get("keep_in_float") or ())
                                  else "ok", _num(acc.get("max_err")), cosine=_num(acc.get("cosine")),
                                  local_err=_num(loc.get("max_err"))))
        verdict = f"{len(data.get('keep_in_float') or ())} layer(s) should stay in float"
        out_err = None
    else:
        command = "mixed"
        for i, op in enumerate(data.get("operators") or ()):
            name = str(op.get("name"))
            rows.append(OpSummary("", _name_key(name, i), i, name, str(op.get("opr_type")), None, "",
                                  "divergent" if op.get("float32") else "ok", None, local_err=_num(op.get("local_err")),
                                  floor=_num(op.get("floor"))))
        verdict = str(data.get("verdict") or "")
        out_err = _num(data.get("output_err"))
    runs = _run_jsons(data.get("runs") or ())
    run = run_summary(command, verdict, exit_code, runs=runs, analysis_dir=data.get("analysis_dir"),
                      n_vars=len(rows), n_not_ok=sum(r.status not in AGREEING for r in rows), n_roots=0, output_err=out_err,
                      argv=argv)
    return Summary(run, tuple(rows))


def _name_key(name: str, index: int) -> str:
    # these results name operators but carry no graph: the name is the key where it is stable
    return f"n/{name}" if not is_generated_name(name) else f"i/{index}"


def summarize(result: Any, *, argv: Sequence[str] = (), exit_code: Optional[int] = None) -> Summary:
    """The summary of a finished analysis: a Report, or the JSON of ``quant``/``mixed`` (their
    exit code given: the JSON does not carry it)."""
    if isinstance(result, Mapping):
        s = summary_from_result_json(result, int(exit_code or 0), argv=argv)
    else:
        s = summary_from_report(result, argv=argv)
    return Summary(dataclasses.replace(s.run, uid=content_uid(s.run.analysis_dir, result)), s.ops, s.speeds)


def content_uid(analysis_dir: Optional[str], result: Any) -> str:
    """A run's identity is its content: its analysis folder and the hash of its result (the
    report's JSON, or quant's/mixed's), so the same analysis written by ``--store``, by
    ``store add`` and by several of them at once is one run of the store, and another analysis
    (another folder, or other numbers) another run."""
    data = result if isinstance(result, Mapping) else result.to_json()
    text = json.dumps(data, sort_keys=True, default=str, separators=(",", ":"))
    h = hashlib.sha256(f"{analysis_dir or ''}\x00".encode())
    h.update(text.encode())
    dirs = data.get("dirs") if isinstance(data, Mapping) else None
    if isinstance(dirs, Mapping):  # a compare of dump folders: dumps written again are another analysis
        h.update(" ".join(_dump_stamp(str(d)) for _, d in sorted(dirs.items())).encode())
    return h.hexdigest()[:32]


def _dump_stamp(path: str) -> str:
    """When a dump folder's files were last written (ns), or ``-`` when it is gone."""
    try:
        with os.scandir(path) as it:
            return str(max((e.stat(follow_symlinks=False).st_mtime_ns for e in it), default=0))
    except OSError:
        return "-"
