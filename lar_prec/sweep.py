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
5. **Local error** (:mod:`lar_prec.sweep_local`, unless ``local=False``): the layerwise model
   of the plain model is built once (here) from the reference dump and run under each option
   that ran, where the options ran (the sweep's ``--lar``, its ``--remote`` device), fed with
   the reference's values; an operator whose
   local error exceeds its floor (float16 floors under the fp16 options) is a local root. The
   option's verdict and root then come from local error: a local root makes it diverge and is
   its root; none makes it ok even where accumulated error drifted (the dump-only root is kept
   as ``dump_root``).

Example::

    from lar_prec.sweep import sweep
    s = sweep("model.mge", ["data:x.npy"], options=["nhwcd4", "ioc16"], jobs=2, timeout=60)
    for o in s.options:
        print(o.option, o.status, o.verdict, o.root_name)
"""
from __future__ import annotations

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
from lar_prec.sweep_local import OptionLocal, SweepLayerwise  # noqa: E402

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

    @property
    def compute_dtype(self) -> Optional[str]:
        """The dtype float operators compute in under this option (None: the model's own)."""
        return "float16" if self.fp16 else None


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
    ``local``: local error under the option (:class:`lar_prec.sweep_local.OptionLocal`; None
    when the option did not run). ``root_rule``: ``local`` when the root and verdict come from
    local error, ``dump`` when from the dumps alone; ``dump_root`` keeps the dump-only root
    (id in the rewritten graph, reference id, name, operator type, max_err).
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
    local: Optional[OptionLocal] = None
    root_rule: str = "dump"
    dump_root: Optional[Tuple[Optional[int], Optional[int], str, str, Optional[float]]] = None

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
        dr = self.dump_root
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
            "naive_run_dir": self.naive_run_dir, "seconds": self.seconds, "root_rule": self.root_rule,
            "dump_root": None if dr is None else {"id": dr[0], "reference_id": dr[1], "name": dr[2],
                                                  "opr_type": dr[3], "max_err": dr[4], "nonfinite": _nonfinite(dr[4])},
            "local": None if self.local is None else self.local.to_json(),
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
    #: seconds in building and running the layerwise model (0 when local error is off)
    local_seconds: float = 0.0
    #: why local error was not measured in this sweep (None: it was, per option)
    local_off: Optional[str] = None

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


def _with_local(r: OptionResult, loc: OptionLocal) -> OptionResult:
    """The option's root and verdict by local error when it was measured: a local root makes
    the option diverge and is its root; no local root makes it ok, unless the dump-only root
    is an operator local error did not measure (then the dump's verdict stands, with why)."""
    dump_root = None if r.root_name is None else (r.root_id, r.root_ref_id, r.root_name, r.root_opr_type or "",
                                                  r.root_err)
    r = replace(r, local=loc, dump_root=dump_root)
    if not loc.measured:
        return r
    if loc.roots:
        top = loc.roots[0]
        errs = dict(r.errors)
        return replace(r, verdict="diverges", root_rule="local", root_id=_rewritten_id(r.run_dir, top.name),
                       root_ref_id=top.id, root_name=top.name, root_opr_type=top.opr_type,
                       root_err=errs.get(top.name, top.entire_err))
    if r.verdict != "diverges":
        return replace(r, root_rule="local")
    if r.root_name is not None and r.root_name not in loc.measured_names():
        why = dict(loc.not_measured).get(r.root_name, "not measured")
        return replace(r, reason=_join(r.reason, f"kept diverging by the dumps: local error did not measure "
                                                  f"its root {r.root_name} ({why})"))
    return replace(r, verdict="ok", root_rule="local", root_id=None, root_ref_id=None, root_name=None,
                   root_opr_type=None, root_err=None, cause=None,
                   reason=_join(r.reason, "accumulated error drifts past the tolerance "
                                          f"({'at ' + dump_root[2] if dump_root else 'somewhere'}) but every "
                                          "operator's local error is within its floor"))


def _join(a: str, b: str) -> str:
    return f"{a}; {b}" if a else b


def _rewritten_id(run_dir: Optional[str], name: str) -> Optional[int]:
    """The id of var ``name`` in an option's (rewritten) dump, when one var has that name."""
    from lar_prec.iodump import DumpFolder

    if run_dir is None:
        return None
    try:
        ids = [d.id for d in DumpFolder(Path(run_dir) / "dump") if d.var.name == name]
    except LarPrecError:
        return None
    return ids[0] if len(ids) == 1 else None


def _prepare_local(model: Path, ref: RunResult, adir: Path, timeout: float, lar: Any = None,
                   remote: Any = None) -> Tuple[Optional[SweepLayerwise], str]:
    from lar_prec.sweep_local import prepare

    try:
        return prepare(model, Path(ref.dump_dir), adir / "local", timeout=timeout,  # type: ignore[arg-type]
                       lar=lar, remote=remote), ""
    except LarPrecError as exc:
        return None, f"local error could not be measured: building the layerwise model failed: {exc}"


def _measure_local(prep: SweepLayerwise, opt: SweepOption, r: OptionResult, adir: Path, extra_flags: Sequence[str],
                   timeout: float) -> OptionLocal:
    from lar_prec.sweep_local import measure_option

    # the option's flags exactly as its run got them: the sweep's extra flags, then the option's
    return measure_option(prep, tuple(extra_flags) + opt.flags, adir / "local" / opt.name, fmt=opt.fmt,
                          compute_dtype=opt.compute_dtype, entire=dict(r.errors), timeout=timeout)


def run_sweep(model: Path, prepared: PreparedInputs, adir: Path, options: Sequence[SweepOption], *,
              lar: LoadAndRun, timeout: float, extra_flags: Sequence[str] = (), jobs: int = 1,
              progress: Optional[Callable[[str, int, int], None]] = None, remote: Any = None,
              local_off: Optional[str] = None, layerwise_remote: Any = None) -> SweepResult:
    """The runs and the analysis of a sweep in an analysis folder already made (see
    :func:`lar_prec.workflows.sweep` for the whole workflow). Ctrl-C kills every run under
    way and raises AnalysisInterrupted. The reference failing raises its RunError (exit 3).

    One loop drives the runs: it waits for whichever finishes, analyses it at once (while
    the others still run) and, for an option that diverges, queues its naive run. With local
    error on (``local_off`` None) the layerwise model is built once after the reference, in the
    same pool, and run under each option that ran; an option with a local root also gets its
    naive run. ``layerwise_remote``: for a device, the one RemoteSessions every layerwise run
    of the sweep shares (its files are removed when the caller closes it, not after each
    option: options run at once would lose them mid-run). (Over 80 lines: the loop, its
    interrupt handling and its bookkeeping share the pending runs.)
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
        pending: Dict[Future, Tuple[str, Optional[SweepOption]]] = {}
        if local_off is None:  # first in the pool's queue: ready before most options finish
            pending[runner.pool.submit(_prepare_local, model, ref_rec, adir, timeout, lar,
                                       layerwise_remote)] = ("build", None)
        for opt in options:
            why = _applies(opt, oprs)
            if why:
                results[opt.name] = OptionResult(opt.name, opt.flags, "skipped", opt.tolerance, reason=why)
            else:
                pending[runner.submit("default", opt.name, opt.flags)] = ("default", opt)
        analysis += time.monotonic() - ta
        total, done = len(pending), 0
        defaults: Dict[str, RunResult] = {}
        locals_: Dict[str, OptionLocal] = {}
        naive_queued: set = set()
        prep: Optional[SweepLayerwise] = None
        build_done = local_off is not None
        waiting: List[SweepOption] = []  # options that ran before the layerwise model was built

        def queue_local(o: SweepOption) -> None:
            nonlocal total
            pending[runner.pool.submit(_measure_local, prep, o, results[o.name], adir, extra_flags, timeout)] = (
                "local", o)
            total += 1

        def queue_naive(o: SweepOption) -> None:
            nonlocal total
            naive_queued.add(o.name)
            pending[runner.submit("naive", f"{o.name}-naive", o.flags)] = ("naive", o)
            total += 1

        if progress:
            progress("runs", 0, total)
        while pending:
            finished, _ = wait(list(pending), return_when=FIRST_COMPLETED)
            for fut in finished:
                kind, opt = pending.pop(fut)
                ta = time.monotonic()
                if kind == "build":
                    prep, local_off = fut.result()
                    local_off = local_off or None
                    build_done = True
                    for o in waiting if prep is not None else ():
                        queue_local(o)
                    waiting.clear()
                elif kind == "local":
                    assert opt is not None
                    locals_[opt.name] = loc = fut.result()
                    if loc.roots and opt.name not in naive_queued:  # tell kernel from math for it too
                        queue_naive(opt)
                elif kind == "default":
                    assert opt is not None
                    rec, status, msg, _err = fut.result()
                    if status != "runs":
                        results[opt.name] = OptionResult(opt.name, opt.flags, status, opt.tolerance, reason=msg,
                                                         run_dir=str(rec.dir), seconds=rec.seconds)
                    else:
                        r, _g = _analyse(opt, ref_rec, rec)  # type: ignore[arg-type]
                        results[opt.name] = r
                        defaults[opt.name] = rec  # type: ignore[assignment]
                        if r.verdict == "diverges":
                            queue_naive(opt)
                        if prep is not None:
                            queue_local(opt)
                        elif not build_done:
                            waiting.append(opt)
                else:
                    assert opt is not None
                    rec, status, msg, _err = fut.result()
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

    ta = time.monotonic()
    for name in defaults:
        why = local_off or "local error not measured"
        results[name] = _with_local(results[name], locals_.get(name) or OptionLocal(False, why=why))
    analysis += time.monotonic() - ta
    names = tuple(d.var.name for d in DumpFolder(ref_rec.dump_dir) if not skip_reason(d.var))  # type: ignore[arg-type]
    ordered = sorted((results[o.name] for o in options), key=lambda r: r.severity())
    runs = sorted(runner.runs, key=lambda r: r.started)
    local_seconds = (prep.seconds if prep is not None else 0.0) + sum(x.seconds for x in locals_.values())
    return SweepResult(ref_rec, tuple(ordered), tuple(runs), names,  # type: ignore[arg-type]
                       run_seconds=sum(r.seconds for r in runs), analysis_seconds=analysis,
                       wall_seconds=time.monotonic() - t0, local_seconds=local_seconds, local_off=local_off)


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
    local: bool = True,
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
        local: measure the local error of every operator under each option that ran (the
            layerwise model built once, run once per option where the options ran:
            :mod:`lar_prec.sweep_local`).

    Raises:
        UsageError: bad model, inputs, options or flags (exit 2).
        RunError: the reference run failed (exit 3); options failing are findings.
        AnalysisInterrupted: Ctrl-C (exit 130).
    """
    from lar_prec.runremote import RemoteSessions
    from lar_prec.workflows import _open_remote, _prepare, _write_reports

    opts = parse_options(options)
    timeout = DEFAULT_TIMEOUT if timeout is None else timeout
    model_path, adir, prepared, lar_obj = _prepare(model, inputs, out, "sweep", seed, lar, timeout, extra_flags,
                                                   remote)
    from lar_prec.localwire import off_reason

    # the layerwise model runs where the options ran (sweep_local.run_option_layerwise)
    off = off_reason(local=local)
    sessions = _open_remote(remote, model_path, prepared)
    # the layerwise files go to the device once for all options, and are removed at the end
    lw_sessions = RemoteSessions(remote, transient=True) if remote is not None and off is None else None
    try:
        result = run_sweep(model_path, prepared, adir, opts, lar=lar_obj, timeout=timeout, extra_flags=extra_flags,
                           jobs=jobs, progress=progress, remote=sessions, local_off=off,
                           layerwise_remote=lw_sessions)
    finally:
        for s in (sessions, lw_sessions):
            if s is not None:
                s.close()
    from lar_prec.report_sweep import sweep_report

    report = sweep_report(result, model=str(model_path), extra={"analysis_dir": str(adir),
                                                                "inputs": prepared.to_json()})
    json_path, html_path = _write_reports(report, adir, html)
    return SweepAnalysis(adir, result, report, json_path, html_path)
