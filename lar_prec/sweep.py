"""``lar-prec sweep``: which load_and_run optimisation option changes the result, and where.

1. The **reference** runs once: naive kernels (``MGB_USE_MEGDNN_DBG=2``), plain graph.
2. Each **option** that applies to the model runs with the default kernels, in its own process
   with a timeout, up to ``jobs`` at once. A run that fails to load, crashes (a signal) or
   hangs (killed at the timeout) is a finding, reported; the sweep goes on.
3. Each option's dump is paired with the reference by var name (the rewritten graph has new
   ids), brought back to the plain layout and compared (:mod:`lar_prec.sweep_analysis`). It is
   ``ok`` when every paired var is within the tolerance its dtype allows (fp16 rounding for
   ``ioc16``/``io16xc32``), else ``diverges``, with the root where divergence starts in the
   rewritten graph.
4. Where an option diverges, the **naive kernels under that option** run too (same rewritten
   graph, so their dump pairs with the default one by id): naive-under-option against
   default-under-option differing means *a kernel is wrong under this option*;
   naive-under-option already differing from the reference means *the option changes the math*.

Example::

    from lar_prec.sweep import sweep
    s = sweep("model.mge", ["data:x.npy"], options=["nhwcd4", "ioc16"], jobs=2, timeout=60)
    for o in s.options:
        print(o.option, o.status, o.verdict, o.root_name)
"""
from __future__ import annotations

import os
import platform
import threading
import time
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple, Union

from lar_prec.errors import AnalysisInterrupted, LarPrecError, RunError, UsageError
from lar_prec.runner import (
    LoadAndRun,
    PreparedInputs,
    RunResult,
    interrupt_active_runs,
    reset_interrupt,
    run_once,
)

from lar_prec.records import PathLike  # noqa: E402

#: seconds a run may take in a sweep unless told otherwise (some options hang at load)
DEFAULT_TIMEOUT = 120.0
#: tolerance of ``max_err`` for options that keep float32 (kernel and reassociation rounding)
TOL_FLOAT32 = 1e-4
#: tolerance for options that compute or store in float16 (its rounding is ~1e-3 relative);
#: the same as sweep_analysis.TOL_HALF, which float16 vars of the reference get under any option
TOL_FLOAT16 = 1e-2


@dataclass(frozen=True)
class SweepOption:
    """One load_and_run option a sweep can try.

    ``group``: layout, fp16, fusion or runtime. ``needs``: what the model must have for the
    option to do anything (``conv``: it only rewrites convolutions), "" when always applies.
    ``fmt``: the operator format the option lays tensors out in (settles ambiguous shapes).
    """

    name: str
    flags: Tuple[str, ...]
    group: str
    needs: str = ""
    fmt: Optional[str] = None

    @property
    def fp16(self) -> bool:
        return self.group == "fp16"

    @property
    def tolerance(self) -> float:
        return TOL_FLOAT16 if self.fp16 else TOL_FLOAT32


def _layout(name: str, fmt: Optional[str]) -> SweepOption:
    return SweepOption(name, (f"--enable-{name}",), "layout", "conv", fmt)


#: every option a sweep knows, by the name ``--options`` takes
OPTIONS: Dict[str, SweepOption] = {o.name: o for o in (
    _layout("nchw88", "NCHW88"),
    _layout("nchw44", "NCHW44"),
    _layout("nchw44-dot", "NCHW44_DOT"),
    _layout("nhwcd4", "NHWCD4"),
    _layout("nchw4", "NCHW4"),
    _layout("nchw32", "NCHW32"),
    _layout("nchw64", "NCHW64"),
    _layout("chwn4", "CHWN4"),
    SweepOption("layout-transform", ("--layout-transform", "cpu"), "layout", "conv"),
    SweepOption("ioc16", ("--enable-ioc16",), "fp16"),
    SweepOption("io16xc32", ("--enable-io16xc32",), "fp16"),
    SweepOption("fuse-conv-bias-nonlinearity", ("--enable-fuse-conv-bias-nonlinearity",), "fusion", "conv"),
    SweepOption("fuse-conv-bias-with-z", ("--enable-fuse-conv-bias-with-z",), "fusion", "conv"),
    SweepOption("optimize-for-inference", ("--optimize-for-inference",), "fusion"),
    SweepOption("fuse-grain", ("--fuse-grain",), "fusion"),
    SweepOption("weight-preprocess", ("--weight-preprocess",), "runtime"),
    SweepOption("fuse-preprocess", ("--enable-fuse-preprocess",), "runtime"),
    SweepOption("const-shape", ("--const-shape",), "runtime"),
    SweepOption("record-comp-seq", ("--record-comp-seq",), "runtime"),
    SweepOption("record-comp-seq2", ("--record-comp-seq2", "--no-sanity-check"), "runtime"),
)}

_COMMON = ("ioc16", "io16xc32", "fuse-conv-bias-nonlinearity", "fuse-conv-bias-with-z", "weight-preprocess",
           "fuse-preprocess", "const-shape", "record-comp-seq")
#: the default set per CPU family: its layouts, then fp16, fusion and runtime options
DEFAULT_OPTIONS: Dict[str, Tuple[str, ...]] = {
    "x86": ("nchw88", "nchw44", "nchw44-dot", "nhwcd4", "layout-transform") + _COMMON,
    "arm": ("nchw44", "nchw44-dot", "nhwcd4", "layout-transform") + _COMMON,
}

#: operator types that make ``needs="conv"`` options apply
CONV_OPRS = frozenset({"ConvolutionForward", "ConvBiasForward", "ConvBias", "Convolution"})


def cpu_family() -> str:
    """``x86`` or ``arm``, for the default option set."""
    m = platform.machine().lower()
    return "arm" if m.startswith(("arm", "aarch")) else "x86"


def parse_options(spec: Union[str, Sequence[str], None]) -> Tuple[SweepOption, ...]:
    """``--options`` (comma-separated names, or a list; None: the default set of this CPU).

    Raises UsageError naming the unknown option and listing the known ones.
    """
    if spec is None:
        names: List[str] = list(DEFAULT_OPTIONS[cpu_family()])
    else:
        items = [spec] if isinstance(spec, str) else list(spec)
        names = [n.strip().lstrip("-") for item in items for n in str(item).split(",") if n.strip()]
        names = [n[len("enable-"):] if n.startswith("enable-") else n for n in names]
        names = [n.replace("_", "-") for n in names]
    if not names:
        raise UsageError("--options is empty; expected names such as nhwcd4,ioc16 (see lar-prec sweep --help)")
    out: List[SweepOption] = []
    for n in names:
        if n not in OPTIONS:
            raise UsageError(f"unknown sweep option {n!r}; expected one of {', '.join(OPTIONS)}")
        if OPTIONS[n] not in out:
            out.append(OPTIONS[n])
    return tuple(out)


def _nonfinite(x: Optional[float]) -> bool:
    return x is not None and not (x == x and abs(x) != float("inf"))


@dataclass(frozen=True)
class OptionResult:
    """What one option did.

    ``status``: ``runs``, ``load_failed``, ``crashed`` (a signal), ``hung`` (killed at the
    timeout) or ``skipped`` (does not apply: ``reason``). ``verdict``: ``ok``, ``diverges`` or
    None (did not run). ``cause``: for a divergent option, ``kernel wrong under this option``,
    ``option changes the math``, both joined by ``and``, or why it could not be told.
    ``errors``: reference var name -> max_err (the option-by-variable view).
    """

    option: str
    flags: Tuple[str, ...]
    status: str
    tolerance: float
    verdict: Optional[str] = None
    reason: str = ""
    vars_paired: int = 0
    vars_total: int = 0
    output_err: Optional[float] = None
    worst_err: Optional[float] = None
    root_id: Optional[int] = None  # var id in the option's (rewritten) graph
    root_ref_id: Optional[int] = None  # the same var's id in the reference graph
    root_name: Optional[str] = None
    root_opr_type: Optional[str] = None
    root_err: Optional[float] = None
    cause: Optional[str] = None
    naive_vs_default_err: Optional[float] = None
    naive_vs_reference_err: Optional[float] = None
    kernel_root_name: Optional[str] = None
    unpaired_a: Tuple[Tuple[int, str, str], ...] = ()
    unpaired_b: Tuple[Tuple[int, str, str], ...] = ()
    errors: Tuple[Tuple[str, Optional[float]], ...] = ()
    run_dir: Optional[str] = None
    naive_run_dir: Optional[str] = None
    seconds: float = 0.0

    @property
    def finding(self) -> bool:
        """True when this option is something to act on: diverges, crashed or hung."""
        return self.verdict == "diverges" or self.status in ("crashed", "hung")

    def severity(self) -> Tuple[int, float]:
        """Sort key, worst first: diverges, crashed, hung, load failed, ok, skipped."""
        rank = {"crashed": 1, "hung": 2, "load_failed": 3, "skipped": 5}.get(self.status, 4)
        if self.verdict == "diverges":
            rank = 0
        err = self.output_err if self.output_err is not None else (self.worst_err or 0.0)
        return rank, -float(err)

    def to_json(self) -> Dict[str, Any]:
        return {
            "option": self.option, "flags": list(self.flags), "status": self.status, "verdict": self.verdict,
            "reason": self.reason, "tolerance": self.tolerance, "vars_paired": self.vars_paired,
            "vars_total": self.vars_total, "output_err": self.output_err, "worst_err": self.worst_err,
            # JSON has no Inf (null instead): these say "NaN/Inf where the reference is finite"
            "output_nonfinite": _nonfinite(self.output_err), "worst_nonfinite": _nonfinite(self.worst_err),
            "root": None if self.root_name is None else {"id": self.root_id, "reference_id": self.root_ref_id,
                                                          "nonfinite": _nonfinite(self.root_err),
                                                          "name": self.root_name,
                                                          "opr_type": self.root_opr_type, "max_err": self.root_err},
            "cause": self.cause, "naive_vs_default_err": self.naive_vs_default_err,
            "naive_vs_reference_err": self.naive_vs_reference_err, "kernel_root": self.kernel_root_name,
            "unpaired_reference": [{"id": i, "name": n, "reason": r} for i, n, r in self.unpaired_a],
            "unpaired_option": [{"id": i, "name": n, "reason": r} for i, n, r in self.unpaired_b],
            "errors": {n: e for n, e in self.errors}, "run_dir": self.run_dir,
            "naive_run_dir": self.naive_run_dir, "seconds": self.seconds,
        }


@dataclass(frozen=True)
class SweepResult:
    """A finished sweep: options sorted worst first, every run, the reference's var names in
    execution order (rows of the option-by-variable view), and time spent."""

    reference: RunResult
    options: Tuple[OptionResult, ...]
    runs: Tuple[RunResult, ...]
    var_names: Tuple[str, ...]
    run_seconds: float
    analysis_seconds: float
    wall_seconds: float

    @property
    def exit_code(self) -> int:
        """1 when any option diverges, crashes or hangs; else 0."""
        return 1 if any(o.finding for o in self.options) else 0


def _run_status(exc: BaseException) -> Tuple[str, str, Optional[RunResult]]:
    """(status, one short reason, record) of a run that failed; the run's folder is in the
    option's record and the whole message in its run.json."""
    import re

    rec: Optional[RunResult] = getattr(exc, "result", None)
    status = rec.status if rec is not None else "failed"
    kind = {"timeout": "hung", "crashed": "crashed"}.get(status, "load_failed")
    msg = str(exc).split(" -- hint:")[0]
    if kind == "hung" and rec is not None and rec.timeout:
        msg = f"did not finish within {rec.timeout:g} s (killed with its process group)"
    else:  # the run's folder is reported next to the reason: drop it from the message
        msg = re.sub(r" in run '[^']*' \([^)]*\)", "", msg)
    return kind, msg, rec


def _model_oprs(ref: RunResult) -> set:
    from lar_prec.iodump import DumpFolder

    return {d.var.opr_type for d in DumpFolder(ref.dump_dir)}  # type: ignore[arg-type]


def _applies(opt: SweepOption, oprs: set) -> str:
    """Why ``opt`` cannot apply to a model with these operator types ("" when it can)."""
    if opt.needs == "conv" and not (oprs & CONV_OPRS):
        return "the model has no convolution: this option rewrites convolutions only"
    return ""


class _Runner:
    """Runs of one sweep: a thread pool, each run a fresh process; failures become results."""

    def __init__(self, model: Path, prepared: PreparedInputs, adir: Path, lar: LoadAndRun,
                 timeout: float, extra_flags: Sequence[str], jobs: int, remote: Any = None) -> None:
        self.model, self.prepared, self.adir, self.lar, self.remote = model, prepared, adir, lar, remote
        self.timeout, self.extra_flags = timeout, tuple(extra_flags)
        self.pool = ThreadPoolExecutor(max_workers=max(1, jobs), thread_name_prefix="lar-prec-sweep")
        self.runs: List[RunResult] = []
        self.lock = threading.Lock()

    def submit(self, config: str, label: str, flags: Sequence[str]) -> Future:
        return self.pool.submit(self._one, config, label, tuple(flags))

    def _one(self, config: str, label: str, flags: Tuple[str, ...]) -> Tuple[RunResult, str, str, Optional[LarPrecError]]:
        """(record, status, message, the run's error); an error without a record (the
        folder could not be made) is raised."""
        error: Optional[LarPrecError] = None
        try:
            rec = run_once(self.model, self.prepared, config, self.adir, lar=self.lar, timeout=self.timeout,
                           extra_flags=self.extra_flags + flags, label=label, remote=self.remote)
            status, msg = "runs", ""
        except (RunError, UsageError) as exc:
            status, msg, found = _run_status(exc)
            if found is None:
                raise
            rec, error = found, exc
        with self.lock:
            self.runs.append(rec)
        return rec, status, msg, error


def _analyse(opt: SweepOption, ref: RunResult, rec: RunResult) -> Tuple[OptionResult, Any]:
    from lar_prec.sweep_analysis import cross_graph

    g = cross_graph(ref.dump_dir, rec.dump_dir, opt.tolerance, fmt=opt.fmt)  # type: ignore[arg-type]
    r = OptionResult(
        option=opt.name, flags=opt.flags, status="runs", tolerance=opt.tolerance,
        verdict="diverges" if g.diverges else "ok", vars_paired=g.n_paired, vars_total=g.n_computed_a,
        output_err=g.output_err, worst_err=g.worst, unpaired_a=g.unpaired_a, unpaired_b=g.unpaired_b,
        errors=tuple((e.name, e.max_err) for e in g.errs), run_dir=str(rec.dir), seconds=rec.seconds)
    if g.root is not None:
        r = replace(r, root_id=g.root.b, root_ref_id=g.root.a, root_name=g.root.name, root_opr_type=g.root.opr_type,
                    root_err=g.root.max_err)
    notes = [e for e in g.errs if e.note]
    if notes:
        r = replace(r, reason=f"{len(notes)} paired var(s) not compared: {notes[0].name}: {notes[0].note}")
    return r, g


def _explain(opt: SweepOption, r: OptionResult, ref: RunResult, naive: Optional[RunResult], default: RunResult,
             status: str, msg: str) -> OptionResult:
    """Tell "kernel wrong under this option" from "option changes the math"."""
    from lar_prec.sweep_analysis import cross_graph, same_graph

    if naive is None or status != "runs":
        return replace(r, cause=f"not told apart: the naive run under this option {status.replace('_', ' ')}"
                                f"{': ' + msg if msg else ''}", naive_run_dir=str(naive.dir) if naive else None)
    kernel = same_graph(naive.dump_dir, default.dump_dir, opt.tolerance)  # type: ignore[arg-type]
    math = cross_graph(ref.dump_dir, naive.dump_dir, opt.tolerance, fmt=opt.fmt)  # type: ignore[arg-type]
    causes = []
    if kernel.diverges:
        first = f" (naive and default kernels first differ at {kernel.root.name})" if kernel.root else ""
        causes.append("kernel wrong under this option" + first)
    if math.diverges:
        causes.append("option changes the math")
    cause = " and ".join(causes) or "neither alone: naive under the option agrees with both sides"
    return replace(r, cause=cause, naive_vs_default_err=kernel.worst, naive_vs_reference_err=math.worst,
                   kernel_root_name=kernel.root.name if kernel.root else None, naive_run_dir=str(naive.dir))


def run_sweep(model: Path, prepared: PreparedInputs, adir: Path, options: Sequence[SweepOption], *,
              lar: LoadAndRun, timeout: float, extra_flags: Sequence[str] = (), jobs: int = 1,
              progress: Optional[Callable[[str, int, int], None]] = None, remote: Any = None) -> SweepResult:
    """The runs and the analysis of a sweep in an analysis folder already made (see
    :func:`lar_prec.workflows.sweep` for the whole workflow). Ctrl-C kills every run under
    way and raises AnalysisInterrupted. The reference failing raises its RunError (exit 3).

    One loop drives the runs: it waits for whichever finishes, analyses it at once (while
    the others still run) and, for an option that diverges, queues its naive run. (Over 80
    lines: the loop, its interrupt handling and its bookkeeping share the pending runs.)
    """
    t0 = time.monotonic()
    runner = _Runner(model, prepared, adir, lar, timeout, extra_flags, jobs, remote)  # remote: RemoteSessions
    analysis = 0.0
    try:
        ref_rec, status, msg, error = runner.submit("naive", "reference", ()).result()
        if error is not None:  # exit 3 (2 for an input the model lacks): the sweep has no reference
            raise error
        ta = time.monotonic()
        oprs = _model_oprs(ref_rec)  # type: ignore[arg-type]
        results: Dict[str, OptionResult] = {}
        pending: Dict[Future, Tuple[str, SweepOption]] = {}
        for opt in options:
            why = _applies(opt, oprs)
            if why:
                results[opt.name] = OptionResult(opt.name, opt.flags, "skipped", opt.tolerance, reason=why)
            else:
                pending[runner.submit("default", opt.name, opt.flags)] = ("default", opt)
        analysis += time.monotonic() - ta
        total, done = len(pending), 0
        defaults: Dict[str, RunResult] = {}
        if progress:
            progress("runs", 0, total)
        while pending:
            finished, _ = wait(list(pending), return_when=FIRST_COMPLETED)
            for fut in finished:
                kind, opt = pending.pop(fut)
                rec, status, msg, _err = fut.result()
                ta = time.monotonic()
                if kind == "default":
                    if status != "runs":
                        results[opt.name] = OptionResult(opt.name, opt.flags, status, opt.tolerance, reason=msg,
                                                         run_dir=str(rec.dir), seconds=rec.seconds)
                    else:
                        r, _g = _analyse(opt, ref_rec, rec)  # type: ignore[arg-type]
                        results[opt.name] = r
                        if r.verdict == "diverges":
                            defaults[opt.name] = rec  # type: ignore[assignment]
                            pending[runner.submit("naive", f"{opt.name}-naive", opt.flags)] = ("naive", opt)
                            total += 1
                else:
                    results[opt.name] = _explain(opt, results[opt.name], ref_rec, rec, defaults[opt.name],
                                                 status, msg)
                analysis += time.monotonic() - ta
                done += 1
                if progress:
                    progress("runs", done, total)
    except KeyboardInterrupt:
        interrupt_active_runs()
        runner.pool.shutdown(wait=True, cancel_futures=True)
        reset_interrupt()
        raise AnalysisInterrupted(
            f"interrupted; runs were stopped and every run folder is kept in {adir} (see each run.json)",
            analysis_dir=adir) from None
    finally:
        runner.pool.shutdown(wait=True, cancel_futures=True)
    from lar_prec.iodump import DumpFolder
    from lar_prec.namepair import skip_reason

    names = tuple(d.var.name for d in DumpFolder(ref_rec.dump_dir) if not skip_reason(d.var))  # type: ignore[arg-type]
    ordered = sorted((results[o.name] for o in options), key=lambda r: r.severity())
    runs = sorted(runner.runs, key=lambda r: r.started)
    return SweepResult(ref_rec, tuple(ordered), tuple(runs), names,  # type: ignore[arg-type]
                       run_seconds=sum(r.seconds for r in runs), analysis_seconds=analysis,
                       wall_seconds=time.monotonic() - t0)


@dataclass(frozen=True)
class SweepAnalysis:
    """A finished ``lar-prec sweep``: its folder, the result, the report and where it is."""

    dir: Path
    result: SweepResult
    report: Any  # lar_prec.report.Report
    json_path: Path
    html_path: Optional[Path]

    @property
    def exit_code(self) -> int:
        return self.result.exit_code


def sweep(
    model: PathLike,
    inputs: Union[str, Sequence[str]],
    *,
    options: Union[str, Sequence[str], None] = None,
    out: Optional[PathLike] = None,
    lar: Union[LoadAndRun, str, None] = None,
    timeout: Optional[float] = DEFAULT_TIMEOUT,
    extra_flags: Sequence[str] = (),
    jobs: int = 1,
    html: bool = True,
    seed: int = 0,
    progress: Optional[Callable[[str, int, int], None]] = None,
    remote: Any = None,
) -> SweepAnalysis:
    """Run the reference once and every option that applies; compare, root and explain.

    Args:
        model: the ``.mge`` model.
        inputs: ``--input`` items, as for :func:`lar_prec.workflows.naive_vs_default`.
        options: names (``nhwcd4,ioc16`` or a list; see :data:`OPTIONS`); None: the default
            set of this CPU (:data:`DEFAULT_OPTIONS`).
        out: the analysis folder (default ``./lar-prec-out/sweep-N``).
        timeout: seconds per run (a hang at load is a finding: the run is killed).
        extra_flags: load_and_run flags for every run, the reference too.
        jobs: runs at once.
        remote: a :class:`lar_prec.runremote.RemoteSpec`: every run on that device (model and
            inputs pushed once, dumps pulled back; the analysis runs here).

    Raises:
        UsageError: bad model, inputs, options or flags (exit 2).
        RunError: the reference run failed (exit 3); options failing are findings.
        AnalysisInterrupted: Ctrl-C (exit 130).
    """
    from lar_prec.workflows import _open_remote, _prepare, _write_reports

    opts = parse_options(options)
    timeout = DEFAULT_TIMEOUT if timeout is None else timeout
    model_path, adir, prepared, lar_obj = _prepare(model, inputs, out, "sweep", seed, lar, timeout, extra_flags,
                                                   remote)
    sessions = _open_remote(remote, model_path, prepared)
    try:
        result = run_sweep(model_path, prepared, adir, opts, lar=lar_obj, timeout=timeout, extra_flags=extra_flags,
                           jobs=jobs, progress=progress, remote=sessions)
    finally:
        if sessions is not None:
            sessions.close()
    from lar_prec.report_sweep import sweep_report

    report = sweep_report(result, model=str(model_path), extra={"analysis_dir": str(adir),
                                                                "inputs": prepared.to_json()})
    json_path, html_path = _write_reports(report, adir, html)
    return SweepAnalysis(adir, result, report, json_path, html_path)
