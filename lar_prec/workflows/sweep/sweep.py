"""``lar-prec sweep``: which load_and_run optimisation option changes the result, and where.

1. The **reference** runs once: naive kernels (``MGB_USE_MEGDNN_DBG=2``), plain graph.
2. Each **option** that applies to the model runs with the default kernels, in its own process
   with a timeout, up to ``jobs`` at once. A run that fails to load, crashes (a signal) or
   hangs (killed at the timeout) is a finding, reported; the sweep goes on.
3. Each option's dump is paired with the reference by var name (the rewritten graph has new
   ids), brought back to the plain layout and compared (:mod:`lar_prec.workflows.sweep.analysis`). It is
   ``ok`` when every paired var is within the tolerance its dtype allows (fp16 rounding for
   ``ioc16``/``io16xc32``), else ``diverges``, with the root where divergence starts in the
   rewritten graph.
4. Where an option diverges, the **naive kernels under that option** run too (same rewritten
   graph, so their dump pairs with the default one by id): naive-under-option against
   default-under-option differing means *a kernel is wrong under this option*;
   naive-under-option already differing from the reference means *the option changes the math*.
5. **Local error** (:mod:`lar_prec.workflows.sweep.local`, unless ``local=False``): the layerwise model
   of the plain model is built once (here) from the reference dump and run under each option
   that ran, where the options ran (the sweep's ``--lar``, its ``--remote`` device), fed with
   the reference's values; an operator whose
   local error exceeds its floor (float16 floors under the fp16 options) is a local root. The
   option's verdict and root then come from local error: a local root makes it diverge and is
   its root; none makes it ok even where accumulated error drifted (the dump-only root is kept
   as ``dump_root``).

Example::

    from lar_prec.workflows.sweep.sweep import sweep
    s = sweep("model.mge", ["data:x.npy"], options=["nhwcd4", "ioc16"], jobs=2, timeout=60)
    for o in s.options:
        print(o.option, o.status, o.verdict, o.root_name)
"""
from __future__ import annotations

import re
import threading
import time
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple, Union

from lar_prec.errors import AnalysisInterrupted, DumpFolderError, DumpFormatError, LarPrecError, RunError, UsageError
from lar_prec.run.config import LoadAndRun
from lar_prec.run.once import run_once
from lar_prec.run.inputs import PreparedInputs
from lar_prec.run.record import RunResult
from lar_prec.run.proc import interrupt_active_runs, reset_interrupt

from lar_prec.records import PathLike  # noqa: E402
from lar_prec.workflows.sweep.local import OptionLocal, SweepLayerwise  # noqa: E402
from lar_prec.dumps.folder import DumpFolder
from lar_prec.workflows.sweep.analysis import cross_graph, same_graph
from lar_prec.workflows.sweep.local import prepare, measure_option
from lar_prec.compare.namepair import skip_reason
from lar_prec.run.device import RemoteSessions
from lar_prec.diagnosis.local_analysis import off_reason
from lar_prec.workflows.sweep.options import DEFAULT_TIMEOUT, parse_options
from lar_prec.workflows.sweep.report import sweep_report
from lar_prec.report.sweep import STATUS_TEXT
from lar_prec.workflows.common import StageProgress, open_remote, prepare_analysis, write_reports
from lar_prec.workflows.sweep.options import CONV_OPRS, OptionResult, SweepOption, SweepResult

def _run_status(exc: BaseException) -> Tuple[str, str, Optional[RunResult]]:
    """(status, one short reason, record) of a run that failed; the run's folder is in the
    option's record and the whole message in its run.json."""
    rec: Optional[RunResult] = exc.result if isinstance(exc, LarPrecError) else None
    status = rec.status if rec is not None else "failed"
    kind = {"timeout": "hung", "stalled": "stalled", "crashed": "crashed"}.get(status, "load_failed")
    msg = str(exc).split(" -- hint:")[0]
    if kind == "hung" and rec is not None and rec.timeout:
        msg = f"did not finish within {rec.timeout:g} s (killed with its process group)"
    else:  # the run's folder is reported next to the reason: drop it from the message
        msg = re.sub(r" in run '[^']*' \([^)]*\)", "", msg)
    if kind == "load_failed":
        msg = plain_load_failure(msg)
    return kind, msg, rec


#: MegEngine's load failures a user can act on, in words: (pattern of its message, what it means)
_LOAD_FAILURES = (
    (re.compile(r"ConvertF32ToF16Pass|dtype\(\) == dtype::Float16\(\)"),
     "the float16 rewrite cannot convert this model's tensors (quantized or integer operators)"),
    (re.compile(r"(?i)nhwcd4.*group|group.*nhwcd4"), "nhwcd4 does not support this grouped convolution here"),
    (re.compile(r"(?i)nchw44.*group|group.*nchw44"), "nchw44 does not support this grouped convolution here"),
    (re.compile(r"(?i)unsupported|not support"), "MegEngine does not support this option for this model here"),
)


def plain_load_failure(msg: str) -> str:
    """A load failure in words a user acts on, with MegEngine's own line shortened after it
    (the whole message stays in the run's run.json)."""
    raw = msg.split(": ", 1)[-1] if msg.startswith("load_and_run failed") else msg
    short = raw if len(raw) <= 160 else raw[:157] + "..."
    for pattern, words in _LOAD_FAILURES:
        if pattern.search(msg):
            return f"{words} (MegEngine: {short}; all of it in run.json)"
    return f"the model did not load under this option (MegEngine: {short}; all of it in run.json)"


def _model_facts(ref: RunResult) -> Tuple[set, set]:
    """(operator types, dtype names) of the reference run's dump."""
    dumps = list(DumpFolder(ref.dump_dir))  # type: ignore[arg-type]
    return {d.var.opr_type for d in dumps}, {d.dtype.name for d in dumps}


def _applies(opt: SweepOption, oprs: set, dtypes: set = frozenset()) -> str:
    """Why ``opt`` cannot apply to a model with these operator types and dtypes ("" when it can)."""
    if opt.needs == "conv" and not (oprs & CONV_OPRS):
        return "the model has no convolution: this option rewrites convolutions only"
    if opt.fp16 and any(t.startswith("Quantized") for t in dtypes):
        return f"{opt.name} does not apply to a quantized model (its float32 to float16 rewrite has no int8 form): skipped"
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

    g = cross_graph(ref.dump_dir, rec.dump_dir, opt.tolerance, fmt=opt.fmt)  # type: ignore[arg-type]
    r = OptionResult(
        option=opt.name, flags=opt.flags, status="runs", tolerance=opt.tolerance,
        verdict="diverges" if g.diverges else "ok", vars_paired=g.n_paired, vars_total=g.n_computed_a,
        output_err=g.output_err, worst_err=g.worst, unpaired_a=g.unpaired_a, unpaired_b=g.unpaired_b,
        errors=tuple((e.name, e.max_err) for e in g.errs), over=tuple(e.name for e in g.errs if e.over),
        run_dir=str(rec.dir), seconds=rec.seconds)
    if g.outputs_total and g.output_err is None:
        # nothing to hold the model's output to: never an all-clear
        r = replace(r, verdict="diverges", output_unseen=True,
                    reason="the model's output was not dumped under this option "
                           f"({g.outputs_total} output(s), none paired with a dumped var)")
    if g.root is not None:
        r = replace(r, root_id=g.root.b, root_ref_id=g.root.a, root_name=g.root.name, root_opr_type=g.root.opr_type,
                    root_err=g.root.max_err)
    notes = [e for e in g.errs if e.note]
    if notes:
        r = replace(r, reason=_join(r.reason, f"{len(notes)} paired var(s) not compared: {notes[0].name}: {notes[0].note}"))
    return r, g


def _explain(opt: SweepOption, r: OptionResult, ref: RunResult, naive: Optional[RunResult], default: RunResult,
             status: str, msg: str) -> OptionResult:
    """Tell "kernel wrong under this option" from "option changes the math"."""

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
    is an operator local error did not measure or the model's output was not dumped (then the
    dump's verdict stands, with why)."""
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
    if r.output_unseen:  # local error speaks for operators, not for an output nobody compared
        return replace(r, root_rule="local", reason=_join(r.reason, "kept diverging: no operator's local error can "
                                                                   "stand for the output that was not compared"))
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

    if run_dir is None:
        return None
    try:
        ids = [d.id for d in DumpFolder(Path(run_dir) / "dump") if d.var.name == name]
    except LarPrecError:
        return None
    return ids[0] if len(ids) == 1 else None


def _prepare_local(model: Path, ref: RunResult, adir: Path, timeout: float, lar: Any = None,
                   remote: Any = None) -> Tuple[Optional[SweepLayerwise], str]:

    try:
        return prepare(model, Path(ref.dump_dir), adir / "local", timeout=timeout,  # type: ignore[arg-type]
                       lar=lar, remote=remote), ""
    except LarPrecError as exc:
        return None, f"local error could not be measured: building the layerwise model failed: {exc}"


def _measure_local(prep: SweepLayerwise, opt: SweepOption, r: OptionResult, adir: Path, extra_flags: Sequence[str],
                   timeout: float) -> OptionLocal:

    # the option's flags exactly as its run got them: the sweep's extra flags, then the option's
    return measure_option(prep, tuple(extra_flags) + opt.flags, adir / "local" / opt.name, fmt=opt.fmt,
                          compute_dtype=opt.compute_dtype, entire=dict(r.errors), timeout=timeout)


def _step(kind: str, opt: Optional[SweepOption]) -> str:
    """A step of the sweep, as its progress names it."""
    if opt is None:
        return "layerwise model"
    return {"default": opt.name, "naive": f"{opt.name} (naive kernels)", "local": f"{opt.name} (local error)"}[kind]


def _under_way(pending: Mapping[Future, Tuple[str, Optional[SweepOption]]], jobs: int) -> Tuple[str, ...]:
    """The steps under way: the pool takes them in the order they were queued, ``jobs`` at once."""
    return tuple(_step(k, o) for k, o in list(pending.values())[:max(1, jobs)])


def _finished(kind: str, opt: Optional[SweepOption], results: Mapping[str, OptionResult],
              locals_: Mapping[str, OptionLocal], local_off: Optional[str]) -> str:
    """What a finished step found, in a few words (one line of the progress in a log)."""
    if opt is None:
        return f"{_step(kind, opt)}: {local_off or 'built'}"
    r = results[opt.name]
    if kind == "local":
        loc = locals_[opt.name]
        found = f"{len(loc.roots)} local root(s)" if loc.measured else (loc.why or "not measured")
    elif kind == "naive":
        found = r.cause or "told apart"
    else:
        found = STATUS_TEXT.get(r.status, r.status) + (f", {r.verdict}" if r.verdict else "")
    return f"{_step(kind, opt)}: {found}"


def run_sweep(model: Path, prepared: PreparedInputs, adir: Path, options: Sequence[SweepOption], *,
              lar: LoadAndRun, timeout: float, extra_flags: Sequence[str] = (), jobs: int = 1,
              progress: Optional[StageProgress] = None, remote: Any = None,
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
        if progress:
            progress("steps", 0, 1 + len(options), running=("reference",))
        ref_rec, status, msg, error = runner.submit("naive", "reference", ()).result()
        if error is not None:  # exit 3 (2 for an input the model lacks): the sweep has no reference
            raise error
        ta = time.monotonic()
        oprs, dtypes = _model_facts(ref_rec)  # type: ignore[arg-type]
        results: Dict[str, OptionResult] = {}
        pending: Dict[Future, Tuple[str, Optional[SweepOption]]] = {}
        if local_off is None:  # first in the pool's queue: ready before most options finish
            pending[runner.pool.submit(_prepare_local, model, ref_rec, adir, timeout, lar,
                                       layerwise_remote)] = ("build", None)
        for opt in options:
            why = _applies(opt, oprs, dtypes)
            if why:
                results[opt.name] = OptionResult(opt.name, opt.flags, "skipped", opt.tolerance, reason=why)
            else:
                pending[runner.submit("default", opt.name, opt.flags)] = ("default", opt)
        analysis += time.monotonic() - ta
        total, done = 1 + len(pending), 1  # the reference is done
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
            progress("steps", done, total, running=_under_way(pending, jobs),
                     finished=f"reference (naive kernels, plain graph) ok in {ref_rec.seconds:.1f} s")
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
                        try:
                            r, _g = _analyse(opt, ref_rec, rec)  # type: ignore[arg-type]
                        except (DumpFormatError, DumpFolderError) as exc:
                            # one option's bad dump: that option's finding, not the end of the sweep
                            r = OptionResult(opt.name, opt.flags, "bad_dump", opt.tolerance,
                                             reason=f"its dump cannot be read: {exc}", run_dir=str(rec.dir),
                                             seconds=rec.seconds)
                        results[opt.name] = r
                        if r.status == "runs":
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
                    progress("steps", done, total, running=_under_way(pending, jobs),
                             finished=_finished(kind, opt, results, locals_, local_off))
    except KeyboardInterrupt:
        interrupt_active_runs()
        runner.pool.shutdown(wait=True, cancel_futures=True)
        reset_interrupt()
        raise AnalysisInterrupted(
            f"interrupted; runs were stopped and every run folder is kept in {adir} (see each run.json)",
            analysis_dir=adir) from None
    finally:
        runner.pool.shutdown(wait=True, cancel_futures=True)

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
    progress: Optional[StageProgress] = None,
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
            :mod:`lar_prec.workflows.sweep.local`).

    Raises:
        UsageError: bad model, inputs, options or flags (exit 2).
        RunError: the reference run failed (exit 3); options failing are findings.
        AnalysisInterrupted: Ctrl-C (exit 130).
    """

    opts = parse_options(options)
    timeout = DEFAULT_TIMEOUT if timeout is None else timeout
    model_path, adir, prepared, lar_obj = prepare_analysis(model, inputs, out, "sweep", seed, lar, timeout, extra_flags,
                                                   remote)

    # the layerwise model runs where the options ran (local.run_option_layerwise)
    off = off_reason(local=local)
    sessions = open_remote(remote, model_path, prepared)
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

    report = sweep_report(result, model=str(model_path), extra={"analysis_dir": str(adir),
                                                                "inputs": prepared.to_json()})
    json_path, html_path = write_reports(report, adir, html)
    return SweepAnalysis(adir, result, report, json_path, html_path)
