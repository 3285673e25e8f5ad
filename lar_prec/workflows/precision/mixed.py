"""A verified mixed-precision list (``lar-prec mixed MODEL --option ioc16|io16xc32``, issues 23, 34).

1. The naive float32 run of the plain model is the reference; the plain model under the option
   with the default kernels is what a user would deploy (its output error is the baseline);
   the naive kernels under the option are **correct float16**: their output error is the level
   the tolerance is relative to (:mod:`lar_prec.compare.tolerance`: ``max(band, 2 x level)``,
   the rule sweep and naive-vs-default print too), unless ``--tolerance`` gives one.
2. Every operator's local error under the option (the sweep's measuring,
   :mod:`lar_prec.workflows.sweep.local`): its local roots are the proposal. Each is told apart by
   the float64 oracle on the reference's inputs (:func:`lar_prec.diagnosis.oracle.classify_fp16`):
   float16 rounding, float16 accumulation or a **kernel bug** (the default kernel wrong).
3. Verification: the mixed model (:func:`lar_prec.diagnosis.mixed.write_mixed_model`: listed
   operators in float32, the rest as the option runs them) runs with the default kernels and its
   outputs are held against the reference. The kernel bugs are kept first, as their own step
   (what is left is float16's own error); then the other local roots; then, while an output is
   out of tolerance, the list widens greedily, worst local error first, in doubling batches
   (1, 2, 4, ... operators), so a list that needs k more operators costs about log2(k) + 1 runs;
   the last step keeps every operator (the plain float32 model). The list is not minimised
   after it holds.
4. Every model tried is a point (:mod:`lar_prec.workflows.precision.mixed_points`): output error, share of
   MACs and of float operators left in float16, top-1/top-5 agreement of a classifier's scores.
   Where the tolerance cannot be met without losing most of the float16 MACs, the knee of that
   curve is proposed.
   Where the option alone is out of tolerance it is run **once more** and the two dumps compared
   bit for bit (:mod:`lar_prec.workflows.common.nondeterminism`): a wrong value that is the same bits
   (a deterministic bug) or one that differs run to run, from which operator on.
5. For each kept operator: why, by the oracle (step 2; one more layerwise run under the option's
   naive kernels and, under ioc16, one under io16xc32: float32 compute on float16 storage).
6. With ``speed_runs`` (issue 55), float32, the option alone and every verification's model are
   timed in interleaved rounds (:mod:`lar_prec.workflows.precision.mixed_speed`): each point's
   speed-up against float32 beside its error and float16 share.

An empty proposal that the plain option's run already satisfies costs no verification run:
that run is the empty list's verification.
"""
from __future__ import annotations

import math
import shutil
import time
from dataclasses import replace
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence, Tuple, Union

from lar_prec._lazy import numpy as np
from lar_prec.compare.metrics import max_megengine_err
from lar_prec.compare.tolerance import OutputTolerance, output_tolerance
from lar_prec.diagnosis.graphinfo import GraphInfo, describe_model
from lar_prec.diagnosis.local import output_ids, run_layerwise
from lar_prec.diagnosis.mixed import float_operators, fp16_fraction, write_mixed_model
from lar_prec.diagnosis.oracle import (
    KERNEL_WRONG,
    OracleUnsupported,
    classify_fp16,
    evaluate,
    golden_inputs,
    reduction_terms,
)
from lar_prec.dumps.folder import DumpFolder
from lar_prec.errors import LarPrecError, RunError, RunTimeout, UsageError
from lar_prec.lar.mixed_rewrite import KEEP_SCHEMA, MODES, KeepList, MixedModel
from lar_prec.outputs import atomic_write_text, json_text
from lar_prec.run.dirs import finish_analysis_dir
from lar_prec.run.inputs import input_summary
from lar_prec.records import PathLike
from lar_prec.report.html import write_html
from lar_prec.report.records import over_floor
from lar_prec.run.config import get_config, resolve_load_and_run
from lar_prec.run.probe import check_flags
from lar_prec.run.record import RunResult
from lar_prec.run.settings import Prepared, Settings
from lar_prec.workflows.common.analysis import prepare as prepare_analysis_of, run_one  # sweep.local has its own prepare
from lar_prec.workflows.common.nondeterminism import Nondeterminism, not_told, rerun_compare
from lar_prec.workflows.precision.mixed_points import SCHEMA, Agreement, Attempt, KeptOperator, MixedAnalysis, Point, classifier_agreement
from lar_prec.workflows.precision.mixed_speed import time_points
from lar_prec.workflows.sweep.speed import DEFAULT_SPEED_BUDGET, DEFAULT_SPEED_RUNS, check_speed_budget, check_speed_runs
from lar_prec.workflows.sweep.local import OptionLocal, measure_option, prepare

__all__ = ["SCHEMA", "MAX_ATTEMPTS", "Attempt", "KeptOperator", "MixedAnalysis", "analyse", "mixed_analysis"]

#: verification runs at most (the last keeps every operator)
MAX_ATTEMPTS = 12


def _point(g: GraphInfo, ref: DumpFolder, test: DumpFolder, label: str, keep: KeepList) -> Point:
    """The point of a model tried: MegEngine's max error of each model output (paired by name:
    the last var of that name, the conversion back to float32 in a float16 run), the share of
    the model ``keep`` leaves in float16, and the agreement of each classifier output."""
    def last(folder: DumpFolder) -> Dict[str, Any]:
        return {d.var.name: d for d in folder}

    a, b = last(ref), last(test)
    errs: List[Tuple[str, float]] = []
    agree: List[Agreement] = []
    for vid in g.outputs:
        name = g.vars[vid].name
        if name not in a or name not in b:
            raise RunError(f"{test.path}: expected the model output {name!r} in the dump of the run")
        x, y = np.asarray(a[name].array()), np.asarray(b[name].array())
        errs.append((name, max_megengine_err(x, y)))
        top = classifier_agreement(name, x, y)
        if top is not None:
            agree.append(top)
    return Point(label, _worst(errs), tuple(errs), fp16_fraction(g, keep), tuple(agree))


def _worst(errs: Sequence[Tuple[str, float]]) -> float:
    return max((e for _, e in errs), default=0.0)


def _candidates(local: OptionLocal, kept: Sequence[str]) -> List[Tuple[str, float]]:
    """Operators not yet kept, worst local error first (non-finite first); zero errors last out."""
    have = set(kept)
    rows = [(n, e) for n, e in local.errors if e is not None and n not in have and (e > 0 or math.isnan(e))]
    return sorted(rows, key=lambda r: (-(math.inf if not math.isfinite(r[1]) else r[1]), r[0]))


def _classify(g: GraphInfo, lw: Any, ref: DumpFolder, names: Sequence[str],
              dumps: Dict[str, Optional[DumpFolder]]) -> Dict[str, Tuple[Optional[str], Dict[str, Any]]]:
    """The oracle's verdict for each kept operator (name -> (kind, record)); numpy only."""
    by_name = {m.name: m for m in lw.measured}
    outs = {k: (d, output_ids(d)) for k, d in dumps.items() if d is not None}
    res: Dict[str, Tuple[Optional[str], Dict[str, Any]]] = {}
    for name in names:
        m = by_name.get(name)
        if m is None or m.ref_id is None or m.ref_id not in ref or "default" not in outs:
            res[name] = (None, {"why": "not measured by the layerwise run"})
            continue
        opr = g.producer(m.id)
        if opr is None or not g.vars[m.id].is_float:
            res[name] = (None, {"why": "not a float operator of the model's graph"})
            continue
        try:
            o16 = evaluate(g, opr, golden_inputs(g, opr, ref), fp16_io=True)[list(opr.outputs).index(m.id)]
        except (OracleUnsupported, ValueError) as exc:
            res[name] = (None, {"why": f"the oracle does not compute it: {exc}"})
            continue

        def got(label: str) -> Any:
            d, o = outs.get(label, (None, {}))
            return None if d is None or m.id not in o else np.asarray(d[o[m.id]].array(), np.float64)

        default = got("default")
        if default is None:
            res[name] = (None, {"why": "its output is not in the layerwise run's dump under the option"})
            continue
        v = classify_fp16(np.asarray(ref[m.ref_id].array(), np.float64), default, o16, naive=got("naive"),
                          f32_compute=got("f32"), terms=reduction_terms(g, opr))
        res[name] = (v.kind, v.to_json())
    return res


class _Oracle:
    """The oracle's verdicts on operators (``classify``), its layerwise runs under the option's
    naive kernels and, under ioc16, float32 compute on float16 storage made once, when first
    needed."""

    def __init__(self, g: GraphInfo, prep: Any, ref: DumpFolder, local: OptionLocal, option: str, adir: Path,
                 timeout: float, rewritten: Dict[str, Path]) -> None:
        self.g, self.prep, self.ref, self.local, self.option = g, prep, ref, local, option
        self.adir, self.timeout, self.rewritten = adir, timeout, rewritten
        self.dumps: Optional[Dict[str, Optional[DumpFolder]]] = None
        self.causes: Dict[str, Tuple[Optional[str], Dict[str, Any]]] = {}

    def classify(self, names: Sequence[str]) -> Dict[str, Tuple[Optional[str], Dict[str, Any]]]:
        todo = [n for n in names if n not in self.causes]
        if todo and self.local.measured:
            if self.dumps is None:
                self.dumps = {"default": DumpFolder(Path(self.local.dir or "") / "dump")}
                for label in ("naive", "f32") if self.option == "ioc16" else ("naive",):
                    try:
                        self.dumps[label] = _run_lw(self.prep, label, self.option, self.adir / "local" /
                                                    f"oracle-{label}" / "dump", self.timeout, self.rewritten)
                    except LarPrecError:
                        self.dumps[label] = None  # the verdict then says what it lacked
            self.causes.update(_classify(self.g, self.prep.layerwise, self.ref, todo, self.dumps))
        return {n: self.causes[n] for n in names if n in self.causes}


def _plain_and_level(ready: Prepared, option: str, g: GraphInfo, ref: DumpFolder, tmo: float,
                     say: Any) -> Tuple[Point, str, Optional[Point], str, List[RunResult]]:
    """The option alone with the default kernels (what a user would deploy) and with the naive
    kernels (correct float16: the tolerance's level): (plain point, why it failed, level point,
    why it was not measured, the runs). Where MegEngine's pass refuses the model, the level
    comes from the rewritten model with nothing kept, under the naive kernels."""
    model, adir = ready.model, ready.dir
    flags = (f"--enable-{option}",)
    runs: List[RunResult] = []
    nothing = KeepList()

    def one(config: str, label: str, path: Path, extra: Tuple[str, ...]) -> Tuple[Optional[Point], str]:
        try:
            run = run_one(ready, config, label, model=path, extra_flags=extra)
        except RunError as exc:  # MegEngine's own pass may refuse the model: the rewrite may still run it
            if getattr(exc, "result", None) is None:
                raise
            runs.append(exc.result)
            return None, str(exc).split(" -- hint:")[0]
        runs.append(run)
        return _point(g, ref, DumpFolder(run.dump_dir), label, nothing), ""

    say(f"the option alone: default kernels, {flags[0]}")
    plain, plain_failed = one("default", option, model, flags)
    say(f"correct float16: the naive kernels under {flags[0]}")
    level, level_failed = one("naive", f"{option}-naive", model, flags)
    if level is None and plain is None:
        try:
            rewritten = write_mixed_model(model, adir / "level.mge", nothing, option, timeout=tmo)
            level, level_failed = one("naive", f"{option}-naive-rewritten", rewritten.path, ())
        except (RunError, UsageError) as exc:
            level_failed = f"{level_failed}; the rewritten model: {exc}"
    if plain is None:
        plain = Point(f"the option alone ({flags[0]})", math.inf, (), fp16_fraction(g, nothing))
    else:
        plain = replace(plain, label=f"the option alone ({flags[0]})")
    if level is not None:
        level = replace(level, label=f"correct float16 (naive kernels under {flags[0]})")
    return plain, plain_failed, level, level_failed, runs


def _tolerance(level: Optional[Point], level_failed: str, given: Optional[float]) -> OutputTolerance:
    err = level.output_err if level is not None else None
    return output_tolerance("float16", err, level_failed, given)


def mixed_analysis(model: PathLike, inputs: Union[str, Sequence[str]], *, option: str = "ioc16",
                   tolerance: Optional[float] = None, out: Optional[PathLike] = None, seed: int = 0,
                   lar: Any = None, timeout: Optional[float] = None,
                   progress: Any = None, speed_runs: int = DEFAULT_SPEED_RUNS,
                   speed_budget: Union[float, str, None] = DEFAULT_SPEED_BUDGET) -> MixedAnalysis:
    """See the module docstring. ``tolerance``: the largest output error allowed; None: the
    one rule, relative to correct float16's level. ``progress(message)``: told each step.
    ``speed_runs``: rounds of timed runs of each point (0: none; else 2 to 50); ``speed_budget``:
    what they may cost, a fraction of mixed's wall time before timing (None or ``"none"``: no limit).
    The keywords make one :class:`~lar_prec.run.settings.Settings` record; :func:`analyse` runs it.

    Raises:
        UsageError (exit 2): bad model, inputs, option or tolerance; RunError (exit 3): the
        reference, a needed run or a rewrite failed.
    """
    return analyse(Settings(model=model, inputs=inputs, out=out, seed=seed, lar=lar, timeout=timeout),
                   option=option, tolerance=tolerance, progress=progress, speed_runs=speed_runs,
                   speed_budget=speed_budget)


def analyse(settings: Settings, *, option: str = "ioc16", tolerance: Optional[float] = None,
            progress: Any = None, speed_runs: int = DEFAULT_SPEED_RUNS,
            speed_budget: Union[float, str, None] = DEFAULT_SPEED_BUDGET) -> MixedAnalysis:
    """:func:`mixed_analysis` from one :class:`~lar_prec.run.settings.Settings` record (the CLI's
    way in): its model, inputs, folder, seed, load_and_run and timeout. ``progress`` is mixed's
    own: ``progress(message)``, a line a step."""
    s = settings
    if option not in MODES:
        raise UsageError(f"--option {option!r}: expected one of {', '.join(MODES)}")
    if tolerance is not None and not (isinstance(tolerance, (int, float)) and math.isfinite(tolerance)
                                      and tolerance >= 0):
        raise UsageError(f"--tolerance {tolerance!r}: expected a finite number >= 0")
    check_speed_runs(speed_runs)
    fraction = check_speed_budget(speed_budget)
    t0 = time.monotonic()
    say = progress or (lambda msg: None)
    # MegEngine's own load_and_run has no --enable-io16xc32 (the bundled runner's own): exit 2 before any run
    check_flags(resolve_load_and_run(s.lar), (f"--enable-{option}",), f"mixed --option {option} needs", s.timeout)
    ready = prepare_analysis_of(s, "mixed")
    model_path, adir, lar_obj = ready.model, ready.dir, ready.lar
    tmo = s.timeout if s.timeout is not None else 600.0
    flags = (f"--enable-{option}",)
    g = describe_model(model_path, adir / "graph.json")
    say("reference: naive kernels, float32")
    ref_run = run_one(ready, "naive", "reference")
    ref = DumpFolder(ref_run.dump_dir)
    plain, plain_failed, level, level_failed, option_runs = _plain_and_level(ready, option, g, ref, tmo, say)
    runs: List[RunResult] = [ref_run, *option_runs]
    tol = _tolerance(level, level_failed, None if tolerance is None else float(tolerance))
    again = None
    if not plain_failed and not tol.holds(plain.output_err):  # wrong: the same bits in a second run?
        say(f"the option alone once more: {flags[0]}, the same bits?")
        again = _again(ready, flags, option_runs[0], runs)

    say("local error of every operator under the option")
    try:
        prep = prepare(model_path, Path(ref_run.dump_dir), adir / "local", timeout=tmo, lar=lar_obj)
    except LarPrecError as exc:
        raise RunError(f"cannot build the layerwise model of {model_path}: {exc}") from None
    local = measure_option(prep, flags, adir / "local" / option, fmt=None, compute_dtype="float16", entire={},
                           timeout=tmo)
    rewritten: Dict[str, Path] = {}  # the layerwise model as each mode's rewrite runs it, written once
    if not local.measured and plain_failed:  # the layerwise model as the rewrite runs it, nothing kept
        local = measure_option(replace(prep, layerwise=_layerwise_as(prep, option, tmo, rewritten)), (),
                               adir / "local" / f"{option}-rewritten", fmt=None, compute_dtype="float16", entire={},
                               timeout=tmo)
    proposal = tuple(r.name for r in local.roots)
    note = "; ".join(x for x in (f"{flags[0]} alone does not run: {plain_failed}" if plain_failed else "",
                                 "" if local.measured else local.why) if x)
    oracle = _Oracle(g, prep, ref, local, option, adir, tmo, rewritten)
    if proposal:
        say("which local roots are kernel bugs (the float64 oracle)")
    causes = oracle.classify(proposal)
    bugs = tuple(n for n in proposal if causes.get(n, (None,))[0] == KERNEL_WRONG)
    listed: Dict[str, str] = {r.name: f"{'kernel bug' if r.name in bugs else 'local root'} under {option}: "
                                      f"{over_floor(r.local_err, r.floor)}" for r in local.roots}
    groups = [(kind, list(names)) for kind, names in (("kernel bugs", bugs),
                                                       ("local roots", [n for n in proposal if n not in bugs])) if names]
    if plain_failed and not groups:
        groups = [("nothing kept", [])]  # the rewrite alone may run where MegEngine's pass does not
    attempts, final_model, verified = _verify(ready, g, ref, option, local, groups, tol, plain, tmo, listed, runs,
                                              say)
    speed = time_points(ready, option, not plain_failed, attempts, speed_runs, say,
                        budget=None if fraction is None else fraction * (time.monotonic() - t0))

    if final_model is not None:  # the last verified (or best tried) model under one name, beside its attempts
        deploy = adir / "mixed.mge"
        try:
            shutil.copyfile(final_model.path, deploy)
        except OSError as exc:
            raise UsageError(f"cannot write the mixed-precision model to {deploy}: {exc.strerror or exc}") from None
        final_model = replace(final_model, path=deploy)
    kept_names = [n for n, _ in final_model.kept] if final_model is not None else []
    measured = {m.name: m for m in prep.layerwise.measured}
    errors = dict(local.errors)
    floors = dict(local.floors)
    if kept_names and local.measured:
        say("why each kept operator errs in float16 (the float64 oracle)")
    causes = oracle.classify(kept_names)
    kept = tuple(KeptOperator(n, measured[n].opr_type if n in measured else _opr_type(g, n),
                              listed.get(n, "kept with every operator (the plain float32 model)"),
                              errors.get(n), floors.get(n), *causes.get(n, (None, None)))
                 for n in kept_names)
    final_keep = KeepList(instances=tuple(kept_names)) if final_model is not None else KeepList()
    keep_file = adir / "keep.json"
    res = MixedAnalysis(adir, model_path, option, tol, plain, level, proposal, bugs, kept, tuple(attempts), verified,
                        final_model, fp16_fraction(g, final_keep), local, tuple(runs), keep_file,
                        time.monotonic() - t0, note, plain_failed, level_failed,
                        tuple((m.name, m.opr_type, errors.get(m.name), floors.get(m.name))
                              for m in prep.layerwise.measured if m.name in errors), again, speed=speed)
    res = replace(res, inputs={"inputs": ready.inputs.to_json(), "input_summary": input_summary(ready.inputs)})
    data = res.to_json()
    try:
        atomic_write_text(keep_file, json_text(_keep_file(final_keep, kept, g, option)),
                          what="keep-list")
        atomic_write_text(adir / "mixed.json", json_text(data), what="mixed result")
        write_html(data, adir / "mixed.html")
        finish_analysis_dir(adir)
    except LarPrecError as exc:  # a full disk at the very end: the verdict and the keep-list are shown first
        exc.report = data
        raise
    return res


def _again(ready: Prepared, flags: Tuple[str, ...], first: RunResult, runs: List[RunResult]) -> Nondeterminism:
    """The option alone run once more, its dump against the first run's bit for bit
    (:mod:`lar_prec.workflows.common.nondeterminism`); ``runs`` gets the run."""
    label = f"{flags[0][len('--enable-'):]}-again"
    try:
        run = run_one(ready, "default", label, extra_flags=flags)
    except RunError as exc:
        if getattr(exc, "result", None) is None:
            raise
        runs.append(exc.result)
        return not_told(first.dump_dir, exc.result.dir, f"its second run failed: {str(exc).split(' -- hint:')[0]}")
    runs.append(run)
    try:
        return rerun_compare(first.dump_dir, run.dump_dir)  # type: ignore[arg-type]
    except LarPrecError as exc:
        return not_told(first.dump_dir, run.dir, f"a dump of the two runs cannot be read: {exc}")


def _verify(ready: Prepared, g: GraphInfo, ref: DumpFolder, option: str, local: OptionLocal,
            groups: List[Tuple[str, List[str]]], tol: OutputTolerance, plain: Point, tmo: float,
            listed: Dict[str, str], runs: List[RunResult],
            say: Any) -> Tuple[List[Attempt], Optional[MixedModel], bool]:
    """The verifications (step 3 of the module docstring): the groups first (kernel bugs, the
    other local roots), then widening in doubling batches, the last keeping every operator.
    Returns the attempts, the last model tried and whether it holds; ``listed`` gets why each
    operator was listed, ``runs`` every run."""
    model, adir = ready.model, ready.dir
    keep: List[str] = []
    attempts: List[Attempt] = []
    cands = _candidates(local, [n for _, names in groups for n in names])
    all_types = tuple(sorted({o.type for o in g.computing()}))
    batch = 1
    final: Optional[MixedModel] = None
    if not groups and tol.holds(plain.output_err):
        return attempts, final, True  # within as it is: the plain option's run verifies the empty list
    while True:
        step = len(attempts) + 1
        every = step >= MAX_ATTEMPTS or (not groups and not cands)
        if every:
            kind = "every operator"
        elif groups:
            kind, add = groups.pop(0)
            keep.extend(add)
        else:
            kind, add = "widened", [n for n, _ in cands[:batch]]
            why = "because the option alone is out of tolerance" if step == 1 else f"after verification {step - 1}"
            listed.update({n: f"widened {why} (local error {e:.3g})" for n, e in cands[:batch]})
            cands, batch = cands[batch:], batch * 2
            keep.extend(add)
        kl = KeepList(types=all_types) if every else KeepList(instances=tuple(keep))
        say(f"verification {step} ({kind}): {'every operator' if every else len(keep)} in float32")
        t1 = time.monotonic()
        mm = write_mixed_model(model, adir / f"mixed-{step}.mge", kl, option, timeout=tmo)
        run = run_one(ready, "default", f"mixed-{step}", model=mm.path)
        runs.append(run)
        names = tuple(n for n, _ in mm.kept)
        label = f"verification {step}: {kind}, {len(names)} in float32"
        pt = _point(g, ref, DumpFolder(run.dump_dir), label, KeepList(instances=names))
        within = tol.holds(pt.output_err)
        attempts.append(Attempt(step, kind, names, str(mm.path), pt, within, str(run.dir), time.monotonic() - t1))
        final = mm
        if within or every:
            return attempts, final, within


def _layerwise_as(prep: Any, mode: str, timeout: float, done: Dict[str, Path]) -> Any:
    """The layerwise model rewritten as ``mode`` runs it with nothing kept (beside it, in the
    analysis's ``local/``), written once per analysis: ``done`` holds those already written."""
    if mode not in done:
        lw = prep.layerwise
        done[mode] = write_mixed_model(lw.path, lw.path.parent.parent / f"layerwise-{mode}.mge", KeepList(), mode,
                                       timeout=timeout).path
    return replace(prep.layerwise, path=done[mode])


def _run_lw(prep: Any, label: str, option: str, dump_dir: Path, timeout: float,
            rewritten: Dict[str, Path]) -> DumpFolder:
    """The layerwise model under the option's naive kernels (``naive``) or computing in float32
    on float16 storage (``f32``). The latter is the layerwise model rewritten as io16xc32 by
    :func:`write_mixed_model` with nothing kept, run with the default kernels: MegEngine's own
    ``--enable-io16xc32`` also sets float32 compute on integer reductions, which the layerwise
    model's shape arithmetic has, and then fails at load (graph-options.md section 2)."""
    if label == "naive":
        try:
            return run_layerwise(prep.layerwise, prep.inputs, dump_dir,
                                 get_config("naive").with_extra((f"--enable-{option}",)), lar=prep.lar,
                                 remote=prep.remote, timeout=timeout)
        except RunTimeout:
            raise
        except RunError:  # MegEngine's pass refused it: the rewrite, under the naive kernels
            mode, cfg = option, get_config("naive")
            dump_dir = dump_dir.parent.with_name("oracle-naive-rewritten") / "dump"
    else:
        mode, cfg = "io16xc32", get_config("default")
    return run_layerwise(_layerwise_as(prep, mode, timeout, rewritten), prep.inputs, dump_dir, cfg, lar=prep.lar,
                         remote=prep.remote, timeout=timeout)


def _opr_type(g: GraphInfo, name: str) -> str:
    o = g.by_output_name().get(name)
    return o.type if o is not None else "?"


def _keep_file(keep: KeepList, kept: Sequence[KeptOperator], g: GraphInfo, option: str) -> Dict[str, Any]:
    """The keep-list (``--keep`` of the rewrite reads it) shaped as a black/white list: the
    float32 (black) list by instance, the float16 (white) list, and both counted by type."""
    data = keep.to_json()
    white: List[str] = []
    by_type: Dict[str, Dict[str, int]] = {}
    for o, f32 in float_operators(g, keep):
        by_type.setdefault(o.type, {"float32": 0, "float16": 0})["float32" if f32 else "float16"] += 1
        if not f32:
            white.extend(g.vars[v].name for v in o.outputs[:1])
    data["option"] = option
    data["float16"] = {"instances": white}
    data["by_type"] = by_type
    data["why"] = {k.name: k.listed for k in kept}
    assert data["schema"] == KEEP_SCHEMA
    return data
