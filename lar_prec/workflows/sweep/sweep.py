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
   Where an option (or the default run) diverges, its run is also **made once more** and the two
   dumps compared bit for bit (:mod:`lar_prec.workflows.common.nondeterminism`): the same bits (a
   deterministic bug) or values that differ run to run, from which operator on.
5. **Local error** (:mod:`lar_prec.workflows.sweep.local`, unless ``local=False``): the layerwise model
   of the plain model is built once (here) from the reference dump and run under each option
   that ran, where the options ran (the sweep's ``--lar``, its ``--remote`` device), fed with
   the reference's values (an option whose dump has the same bits as the default run's, or as an
   option measured by its own layerwise run, takes that run's local error instead:
   :mod:`lar_prec.workflows.sweep.samebits`); an operator whose
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

import time
from concurrent.futures import FIRST_COMPLETED, Future, wait
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple, Union

from lar_prec.errors import AnalysisInterrupted, DumpFolderError, DumpFormatError, LarPrecError, UsageError
from lar_prec.run.config import LoadAndRun, resolve_load_and_run
from lar_prec.run.probe import lar_flags
from lar_prec.run.record import RunResult
from lar_prec.run.proc import interrupt_active_runs, reset_interrupt

from lar_prec.records import PathLike  # noqa: E402
from lar_prec.workflows.sweep.local import OptionLocal, SweepLayerwise  # noqa: E402
from lar_prec.dumps.folder import DumpFolder
from lar_prec.workflows.sweep.analysis import cross_graph, model_outputs, run_algorithms, same_graph
from lar_prec.workflows.sweep.runs import Runner
from lar_prec.workflows.sweep.samebits import DumpPrint, print_of, reads_alike, safe_same_bits, taken_words
from lar_prec.workflows.sweep.local import prepare, measure_option
from lar_prec.compare.namepair import skip_reason
from lar_prec.run.device import RemoteSessions, open_sessions
from lar_prec.run.settings import Prepared, Settings
from lar_prec.diagnosis.local_plan import off_reason
from lar_prec.workflows.sweep.options import DEFAULT_TIMEOUT, parse_options
from lar_prec.workflows.sweep.speed import (DEFAULT_SPEED_BUDGET, DEFAULT_SPEED_RUNS, check_speed_budget,
                                            check_speed_runs, time_sweep)
from lar_prec.workflows.sweep.report import sweep_report
from lar_prec.report.sweep import STATUS_TEXT
from lar_prec.workflows.common.analysis import StageProgress, with_inputs, write_reports
from lar_prec.workflows.common.analysis import prepare as prepare_analysis_of  # sweep.local has its own prepare
from lar_prec.workflows.sweep.options import CONV_OPRS, PLAIN_DEFAULT, OptionResult, SweepOption, SweepResult
from lar_prec.workflows.sweep.verdict import against_default, join, with_local
from lar_prec.workflows.common.nondeterminism import Nondeterminism, not_told, rerun_compare
from lar_prec.compare.threshold import band
from lar_prec.compare.tolerance import OutputTolerance, output_tolerance


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


def _output_dtypes(ref: RunResult) -> Tuple[str, ...]:
    """The dtype names of the reference run's outputs (computed vars nothing reads)."""
    folder = DumpFolder(ref.dump_dir)  # type: ignore[arg-type]
    return tuple(folder.var_info(i).dtype for i in model_outputs(folder))


def _analyse(opt: SweepOption, ref: RunResult, rec: RunResult, tol: OutputTolerance,
             default_dir: Optional[str], var_tol: Optional[Mapping[str, float]] = None) -> OptionResult:
    """One option's run against the reference (by name), every paired var held to the outputs'
    tolerance ``tol`` (``var_tol``: the same rule with each var's own level); and against the
    plain default run's dump ``default_dir`` when given."""
    g = cross_graph(ref.dump_dir, rec.dump_dir, tol.value, fmt=opt.fmt, var_tol=var_tol)  # type: ignore[arg-type]
    r = OptionResult(
        option=opt.name, flags=opt.flags, status="runs", tolerance=tol.value, output_tolerance=tol,
        verdict="diverges" if g.diverges else "ok", vars_paired=g.n_paired, vars_total=g.n_computed_a,
        output_err=g.output_err, worst_err=g.worst, unpaired_a=g.unpaired_a, unpaired_b=g.unpaired_b,
        errors=tuple((e.name, e.max_err) for e in g.errs), over=tuple(e.name for e in g.errs if e.over),
        run_dir=str(rec.dir), seconds=rec.seconds, algorithms=run_algorithms(rec))
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
        r = replace(r, reason=join(r.reason, f"{len(notes)} paired var(s) not compared: {notes[0].name}: "
                                              f"{notes[0].note}"))
    if default_dir is not None:
        d = cross_graph(default_dir, rec.dump_dir, tol.value, fmt=opt.fmt, var_tol=var_tol)  # type: ignore[arg-type]
        root = d.root
        r = replace(r, default_err=d.output_err, default_diverges=d.diverges,
                    default_root=None if root is None else (root.b, root.a, root.name, root.opr_type, root.max_err))
    return r


def _explain(opt: SweepOption, r: OptionResult, ref: RunResult, naive: RunResult, default: RunResult) -> OptionResult:
    """Tell "kernel wrong under this option" from "option changes the math"."""
    kernel = same_graph(naive.dump_dir, default.dump_dir, r.tolerance)  # type: ignore[arg-type]
    math = cross_graph(ref.dump_dir, naive.dump_dir, r.tolerance, fmt=opt.fmt)  # type: ignore[arg-type]
    causes = []
    if kernel.diverges:
        first = f" (naive and default kernels first differ at {kernel.root.name})" if kernel.root else ""
        causes.append("kernel wrong under this option" + first)
    if math.diverges:
        causes.append("option changes the math")
    cause = " and ".join(causes) or "neither alone: naive under the option agrees with both sides"
    return replace(r, cause=cause, naive_vs_default_err=kernel.worst, naive_vs_reference_err=math.worst,
                   kernel_root_name=kernel.root.name if kernel.root else None, naive_run_dir=str(naive.dir))


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


@dataclass
class _Entry:
    """The bookkeeping of one option (or of the plain default run) while its runs go on."""

    opt: SweepOption
    run: Optional[Tuple[RunResult, str, str]] = None  # its run: record, status, message
    naive: Optional[Tuple[RunResult, str, str]] = None  # the naive kernels under it
    naive_queued: bool = False
    checked: bool = False  # whether it adds something over the default run was decided
    local_queued: bool = False
    local: Optional[OptionLocal] = None
    result: Optional[OptionResult] = None
    again: Optional[Tuple[RunResult, str, str]] = None  # its run made once more, where it diverges
    shares: Optional["_Entry"] = None  # whose layerwise run it takes: the same bits (samebits)

    @property
    def ran(self) -> bool:
        return self.result is not None and self.result.status == "runs"


class _Sweep:
    """The runs of a sweep and what depends on what: an option is analysed once its run, the
    plain default run and (float16 options: the level of their tolerance) its naive run are in;
    its local error is measured once it is analysed and the layerwise model is built; once its
    verdict can be told and it diverges, its naive run is queued (to tell kernel from math) and
    its run once more (to tell a deterministic wrong value from one that differs run to run)."""

    def __init__(self, runner: Runner, ref: RunResult, options: Sequence[SweepOption], adir: Path, *,
                 extra_flags: Sequence[str], timeout: float, local_off: Optional[str],
                 unavailable: Mapping[str, str] = {}) -> None:
        self.runner, self.ref, self.adir = runner, ref, adir
        self.extra_flags, self.timeout, self.local_off = tuple(extra_flags), timeout, local_off
        self.out_dtypes = _output_dtypes(ref)
        self.pending: Dict[Future, Tuple[str, _Entry]] = {}
        self.prep: Optional[SweepLayerwise] = None
        self.build_done = local_off is not None
        self.total = 0
        oprs, dtypes = _model_facts(ref)
        self.plain = _Entry(PLAIN_DEFAULT)
        self.entries: Dict[str, _Entry] = {}
        self.skipped: Dict[str, OptionResult] = {}
        self.prints: Dict[str, Optional[DumpPrint]] = {}  # each run's dump, headers and value hashes
        for opt in options:
            why = unavailable.get(opt.name) or _applies(opt, oprs, dtypes)
            if why:
                self.skipped[opt.name] = OptionResult(opt.name, opt.flags, "skipped", self.tolerance(opt, None)[0].value,
                                                      reason=why)
            else:
                self.entries[opt.name] = _Entry(opt)

    def tolerance(self, opt: SweepOption, e: Optional[_Entry]) -> Tuple[OutputTolerance, Optional[Dict[str, float]]]:
        """The one rule (compare.tolerance) for the outputs, and for each var by the same rule with
        its own level (None: the outputs' tolerance for every var). A float16 option's level is
        what its naive run (correct float16) reaches: on the outputs, and on each var."""
        dtype = opt.arithmetic(self.out_dtypes)
        if not opt.fp16:
            return output_tolerance(dtype, 0.0), None
        naive = e.naive if e is not None else None
        if naive is None or naive[1] != "runs":
            why = f"the naive kernels under {opt.name}: {naive[1].replace('_', ' ')}" if naive else "not run"
            return output_tolerance(dtype, None, why), None
        try:
            level = cross_graph(self.ref.dump_dir, naive[0].dump_dir, band(dtype)[1],  # type: ignore[arg-type]
                                fmt=opt.fmt)
        except (DumpFormatError, DumpFolderError) as exc:
            return output_tolerance(dtype, None, f"the naive run's dump under {opt.name} cannot be read: {exc}"), None
        if level.output_err is None:
            return output_tolerance(dtype, None, f"the naive run under {opt.name} dumped no output"), None
        per_var = {x.name: output_tolerance(dtype, x.max_err).value for x in level.errs if x.max_err is not None}
        return output_tolerance(dtype, level.output_err), per_var

    def submit(self, kind: str, e: _Entry, fut: Future) -> None:
        self.pending[fut] = (kind, e)
        self.total += 1

    def start(self, model: Path, lar: Any, layerwise_remote: Any) -> None:
        if self.local_off is None:  # first in the pool's queue: ready before most options finish
            self.submit("build", self.plain, self.runner.pool.submit(_prepare_local, model, self.ref, self.adir,
                                                                     self.timeout, lar, layerwise_remote))
        self.submit("run", self.plain, self.runner.submit("default", self.plain.opt.name, self.plain.opt.flags))
        # the longest chains first: a float16 option is analysed only once its naive run is in too
        # (its tolerance's level: float16 done by the naive kernels), then its layerwise run follows
        for e in sorted(self.entries.values(), key=lambda e: not e.opt.fp16):
            self.submit("run", e, self.runner.submit("default", e.opt.name, e.opt.flags))
            if e.opt.fp16:
                self.queue_naive(e)

    def queue_naive(self, e: _Entry) -> None:
        e.naive_queued = True
        self.submit("naive", e, self.runner.submit("naive", f"{e.opt.name}-naive", e.opt.flags))

    def queue_again(self, e: _Entry) -> None:
        """The same run once more (a fresh process, same flags): is its wrong value the same bits?"""
        self.submit("again", e, self.runner.submit("default", f"{e.opt.name}-again", e.opt.flags))

    def finished(self, kind: str, e: _Entry, value: Any) -> None:
        """Record what finished, then start whatever it unblocked."""
        if kind == "build":
            self.prep, why = value
            self.local_off = why or None
            self.build_done = True
        elif kind == "local":
            e.local = value
        elif kind == "naive":
            e.naive = value[:3]
        elif kind == "again":
            e.again = value[:3]
        else:
            e.run = value[:3]
        for x in (self.plain, *self.entries.values()):
            self.advance(x)

    def advance(self, e: _Entry) -> None:
        if e.result is None and e.run is not None and (e is self.plain or self.plain.run is not None) and (
                not e.opt.fp16 or e.naive is not None):
            e.result = self.analyse(e)
        if e.ran and self.prep is not None and not e.local_queued:
            e.local_queued = True
            e.shares = None if e is self.plain else self.same_as(e)
            if e.shares is None:
                self.submit("local", e, self.runner.pool.submit(_measure_local, self.prep, e.opt, e.result, self.adir,
                                                                self.extra_flags, self.timeout))
        src = e.shares
        if src is not None and e.local is None and src.local is not None:
            e.local = replace(src.local, seconds=0.0, same_as=src.opt.name,
                              same_words=taken_words("the default run" if src is self.plain else src.opt.name))
        if e.ran and not e.checked and self.known(e):
            e.checked = True  # once: its verdict needs only what is in now
            if self.judge(e).verdict == "diverges":
                if e is not self.plain and not e.naive_queued:
                    self.queue_naive(e)
                self.queue_again(e)

    def dump_print(self, e: _Entry) -> Optional[DumpPrint]:
        if e.opt.name not in self.prints:
            self.prints[e.opt.name] = print_of(e.run[0].dump_dir if e.run is not None else None)
        return self.prints[e.opt.name]

    def same_as(self, e: _Entry) -> Optional[_Entry]:
        """The run whose layerwise run ``e`` takes instead of its own (None: it gets its own): the
        plain default run, else an option measured by its own layerwise run, whose dump has the
        same bits as ``e``'s and that reads a layerwise dump as ``e`` does (:mod:`samebits`)."""
        for src in (self.plain, *self.entries.values()):
            if src is e or not src.ran or not src.local_queued or src.shares is not None or not reads_alike(
                    src.opt.fmt, src.opt.compute_dtype, e.opt.fmt, e.opt.compute_dtype):
                continue
            if not safe_same_bits(self.dump_print(src), self.dump_print(e)):
                return src
        return None

    def analyse(self, e: _Entry) -> OptionResult:
        rec, status, msg = e.run  # type: ignore[misc]
        tol, var_tol = self.tolerance(e.opt, e)
        if status != "runs":
            return OptionResult(e.opt.name, e.opt.flags, status, tol.value, reason=msg, run_dir=str(rec.dir),
                                seconds=rec.seconds, output_tolerance=tol)
        plain = self.plain.run
        default_dir = plain[0].dump_dir if e is not self.plain and plain is not None and self.plain.ran else None
        try:
            return _analyse(e.opt, self.ref, rec, tol, default_dir, var_tol)
        except (DumpFormatError, DumpFolderError) as exc:
            # one option's bad dump: that option's finding, not the end of the sweep
            return OptionResult(e.opt.name, e.opt.flags, "bad_dump", tol.value, reason=f"its dump cannot be read: {exc}",
                                run_dir=str(rec.dir), seconds=rec.seconds, output_tolerance=tol)

    def known(self, e: _Entry) -> bool:
        """Whether ``e``'s verdict can be told now: its local error and the default run's are in
        (or local error is off, or the layerwise model could not be built)."""
        measuring = self.local_off is None and (not self.build_done or self.prep is not None)
        return not measuring or (e.local is not None and (not self.plain.ran or self.plain.local is not None))

    def judge(self, e: _Entry) -> OptionResult:
        why = self.local_off or "local error not measured"
        r = with_local(e.result, e.local or OptionLocal(False, why=why))  # type: ignore[arg-type]
        if e is self.plain:
            return r
        return against_default(r, self.judge(self.plain) if self.plain.ran else self.plain.result)

    def rerun(self, e: _Entry) -> Optional[Nondeterminism]:
        """Its run against the same run made once more, bit for bit (None: not made)."""
        if e.again is None or e.run is None:
            return None
        rec, status, msg = e.again
        first = e.run[0].dump_dir
        if status != "runs":
            return not_told(first, rec.dir, f"its second run {STATUS_TEXT.get(status, status)}"
                                            f"{': ' + msg if msg else ''}")
        try:
            return rerun_compare(first, rec.dump_dir)  # type: ignore[arg-type]
        except (DumpFormatError, DumpFolderError) as exc:
            return not_told(first, rec.dir, f"a dump of the two runs cannot be read: {exc}")

    def results(self) -> Tuple[Optional[OptionResult], List[OptionResult]]:
        """The default run's record and every option's, judged, divergent ones explained."""
        out = dict(self.skipped)
        for name, e in self.entries.items():
            r = self.judge(e) if e.ran else e.result
            assert r is not None
            r = replace(r, nondeterminism=self.rerun(e))
            naive = e.naive
            if r.verdict == "diverges" and naive is not None and e.run is not None:
                if naive[1] == "runs":
                    r = _explain(e.opt, r, self.ref, naive[0], e.run[0])
                else:
                    r = replace(r, cause=f"not told apart: the naive run under this option {naive[1].replace('_', ' ')}"
                                         f"{': ' + naive[2] if naive[2] else ''}", naive_run_dir=str(naive[0].dir))
            elif naive is not None and naive[1] == "runs":
                r = replace(r, naive_run_dir=str(naive[0].dir))
            out[name] = r
        plain = self.judge(self.plain) if self.plain.ran else self.plain.result
        if plain is not None:
            plain = replace(plain, nondeterminism=self.rerun(self.plain))
        return plain, list(out.values())

    def local_seconds(self) -> float:
        return (self.prep.seconds if self.prep is not None else 0.0) + sum(
            e.local.seconds for e in (self.plain, *self.entries.values()) if e.local is not None)


def _step(kind: str, e: _Entry) -> str:
    """A step of the sweep, as its progress names it."""
    if kind == "build":
        return "layerwise model"
    return {"run": e.opt.name, "naive": f"{e.opt.name} (naive kernels)", "local": f"{e.opt.name} (local error)",
            "again": f"{e.opt.name} (once more: the same bits?)"}[kind]


def _under_way(pending: Mapping[Future, Tuple[str, _Entry]], jobs: int) -> Tuple[str, ...]:
    """The steps under way: the pool takes them in the order they were queued, ``jobs`` at once."""
    return tuple(_step(k, e) for k, e in list(pending.values())[:max(1, jobs)])


def _finished(kind: str, e: _Entry, sw: _Sweep) -> str:
    """What a finished step found, in a few words (one line of the progress in a log)."""
    if kind == "build":
        return f"{_step(kind, e)}: {sw.local_off or 'built'}"
    if kind == "local" and e.local is not None:
        found = f"{len(e.local.roots)} local root(s)" if e.local.measured else (e.local.why or "not measured")
    elif kind == "naive" and e.naive is not None:
        found = STATUS_TEXT.get(e.naive[1], e.naive[1])
    elif kind == "again" and e.again is not None:
        found = STATUS_TEXT.get(e.again[1], e.again[1])
    elif e.result is not None:
        found = STATUS_TEXT.get(e.result.status, e.result.status) + (f", {e.result.verdict}" if e.result.verdict else "")
    else:
        found = STATUS_TEXT.get(e.run[1], e.run[1]) if e.run is not None else "done"
    return f"{_step(kind, e)}: {found}"


def _unavailable(options: Sequence[SweepOption], lar: Optional[LoadAndRun], named: bool) -> Dict[str, str]:
    """Option name -> why the binary cannot run it: a flag its ``--helpfull`` does not list
    (MegEngine's own load_and_run has no ``--enable-io16xc32``, the bundled runner's own). An
    option asked for by name is refused instead (UsageError, exit 2)."""
    if lar is None:
        return {}
    out: Dict[str, str] = {}
    for opt in options:
        for f in opt.flags:
            if f.startswith("-") and lar_flags(lar).has(f) is False:
                why = (f"load_and_run {lar.describe()} has no {f} (its --helpfull does not list it; "
                       f"{'the bundled runner implements it (--lar bundled)' if opt.name == 'io16xc32' else 'another build may'})")
                if named:
                    raise UsageError(f"sweep option {opt.name}: {why}")
                out[opt.name] = why + ": skipped"
                break
    return out


def run_sweep(prep: Prepared, options: Sequence[SweepOption], *, remote: Any = None,
              local_off: Optional[str] = None, layerwise_remote: Any = None,
              unavailable: Optional[Mapping[str, str]] = None, speed_runs: int = 0,
              speed_budget: Optional[float] = DEFAULT_SPEED_BUDGET) -> SweepResult:
    """The runs and the analysis of a sweep in an analysis folder already made (see
    :func:`lar_prec.workflows.sweep` for the whole workflow), with the prepared analysis'
    load_and_run, timeout, flags, ``jobs`` and progress hook; ``remote``: its RemoteSessions.
    Ctrl-C kills every run under way and raises AnalysisInterrupted. The reference failing
    raises its RunError (exit 3).

    One loop drives the runs (:class:`_Sweep` says what each finished one unblocks): the plain
    default run and every option, the naive run under each float16 option (its tolerance's
    level) and, with local error on (``local_off`` None), the layerwise model built once after
    the reference and run under the default run and each option; an option that adds something
    over the default run also gets its naive run, and each row that diverges its run once more.
    ``layerwise_remote``: for a device, the one
    RemoteSessions every layerwise run of the sweep shares (its files are removed when the
    caller closes it, not after each option: options run at once would lose them mid-run).
    ``speed_runs``: rounds of timed runs of the default run and each option that loaded, after
    every other run (:mod:`lar_prec.workflows.sweep.speed`; 0: none), within ``speed_budget``
    (a fraction of the sweep's wall time until then; None: no budget).
    """
    t0 = time.monotonic()
    model, adir, lar = prep.model, prep.dir, prep.lar
    timeout, extra_flags, jobs, progress = prep.settings.timeout, prep.settings.extra_flags, prep.settings.jobs, \
        prep.settings.progress
    runner = Runner(model, prep.inputs, adir, lar, timeout, extra_flags, jobs, remote)  # remote: RemoteSessions
    analysis = 0.0
    try:
        if progress:
            progress("steps", 0, 2 + len(options), running=("reference",))
        ref_rec, status, msg, error = runner.submit("naive", "reference", ()).result()
        if error is not None:  # exit 3 (2 for an input the model lacks): the sweep has no reference
            raise error
        ta = time.monotonic()
        sw = _Sweep(runner, ref_rec, options, adir, extra_flags=extra_flags, timeout=timeout, local_off=local_off,
                    unavailable=unavailable or {})
        sw.start(model, lar, layerwise_remote)
        analysis += time.monotonic() - ta
        done = 1  # the reference
        if progress:
            progress("steps", done, 1 + sw.total, running=_under_way(sw.pending, jobs),
                     finished=f"reference (naive kernels, plain graph) ok in {ref_rec.seconds:.1f} s")
        while sw.pending:
            finished, _ = wait(list(sw.pending), return_when=FIRST_COMPLETED)
            for fut in finished:
                kind, entry = sw.pending.pop(fut)
                value = fut.result()
                ta = time.monotonic()
                sw.finished(kind, entry, value)
                analysis += time.monotonic() - ta
                done += 1
                if progress:
                    progress("steps", done, 1 + sw.total, running=_under_way(sw.pending, jobs),
                             finished=_finished(kind, entry, sw))
        loaded = [(e.opt.name, e.opt.flags) for e in sw.entries.values() if e.run and e.run[1] in ("runs", "skipped")]
        speed = time_sweep(prep, loaded, speed_runs, remote, speed_budget, time.monotonic() - t0)
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
    plain, results = sw.results()
    results = [replace(r, speed=speed.of(r.option)) for r in results]
    plain = plain if plain is None else replace(plain, speed=speed.default)
    analysis += time.monotonic() - ta
    names = tuple(d.var.name for d in DumpFolder(ref_rec.dump_dir) if not skip_reason(d.var))  # type: ignore[arg-type]
    by_name = {r.option: r for r in results}
    ordered = sorted((by_name[o.name] for o in options), key=lambda r: r.severity())
    runs = sorted(runner.runs, key=lambda r: r.started)
    return SweepResult(ref_rec, tuple(ordered), tuple(runs), names,  # type: ignore[arg-type]
                       run_seconds=sum(r.seconds for r in runs), analysis_seconds=analysis,
                       wall_seconds=time.monotonic() - t0, local_seconds=sw.local_seconds(),
                       local_off=sw.local_off, default=plain, speed=speed)


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
    speed_runs: int = DEFAULT_SPEED_RUNS,
    speed_budget: Union[float, str, None] = DEFAULT_SPEED_BUDGET,
) -> SweepAnalysis:
    """Run the reference once and every option that applies; compare, root and explain.

    Args:
        model: the ``.mge`` model.
        inputs: ``--input`` items, as for :func:`lar_prec.workflows.naive_vs_default.naive_vs_default`.
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
        speed_runs: rounds of timed runs (no dump) of the default run and each option that
            loaded, interleaved (:mod:`lar_prec.workflows.sweep.speed`); 0 or 2 to 50.
        speed_budget: what the timed runs may cost, a fraction of the sweep's wall time before
            timing (default 0.15); ``"none"`` or None: no budget.

    Raises:
        UsageError: bad model, inputs, options or flags (exit 2).
        RunError: the reference run failed (exit 3); options failing are findings.
        AnalysisInterrupted: Ctrl-C (exit 130).
    """
    return analyse(Settings(model=model, inputs=inputs, out=out, lar=lar, timeout=timeout,
                            extra_flags=tuple(extra_flags), seed=seed, jobs=jobs, remote=remote, local=local,
                            html=html, progress=progress), options=options, speed_runs=speed_runs,
                   speed_budget=speed_budget)


def analyse(settings: Settings, *, options: Union[str, Sequence[str], None] = None,
            speed_runs: int = DEFAULT_SPEED_RUNS,
            speed_budget: Union[float, str, None] = DEFAULT_SPEED_BUDGET) -> SweepAnalysis:
    """:func:`sweep` from one :class:`~lar_prec.run.settings.Settings` record (the CLI's way in);
    its ``threshold`` is not read (each option is held to its tolerance), a ``timeout`` of None
    is :data:`DEFAULT_TIMEOUT`."""
    s = settings if settings.timeout is not None else replace(settings, timeout=DEFAULT_TIMEOUT)
    remote = s.remote

    opts, speed_runs = parse_options(options), check_speed_runs(speed_runs)
    budget = check_speed_budget(speed_budget)
    unavailable = _unavailable(opts, resolve_load_and_run(s.lar) if remote is None else None, named=options is not None)
    prep = prepare_analysis_of(s, "sweep")

    # the layerwise model runs where the options ran (local.run_option_layerwise)
    off = off_reason(local=s.local)
    sessions = open_sessions(remote, prep.model, prep.inputs)
    # the layerwise files go to the device once for all options, and are removed at the end
    lw_sessions = RemoteSessions(remote, transient=True) if remote is not None and off is None else None
    try:
        result = run_sweep(prep, opts, remote=sessions, local_off=off, layerwise_remote=lw_sessions,
                           unavailable=unavailable, speed_runs=speed_runs, speed_budget=budget)
    finally:
        for sess in (sessions, lw_sessions):
            if sess is not None:
                sess.close()

    report = sweep_report(result, model=str(prep.model), extra={"analysis_dir": str(prep.dir),
                                                                "inputs": prep.inputs.to_json()})
    report = with_inputs(report, prep.inputs)
    json_path, html_path = write_reports(report, prep.dir, s.html)
    return SweepAnalysis(prep.dir, result, report, json_path, html_path)
