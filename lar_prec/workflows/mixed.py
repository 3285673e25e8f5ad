"""A verified mixed-precision list (``lar-prec mixed MODEL --option ioc16|io16xc32``, issue 23).

1. The naive float32 run of the plain model is the reference; the plain model under the option
   with the default kernels is what a user would deploy (its output error is the baseline).
2. Every operator's local error under the option (the sweep's measuring,
   :mod:`lar_prec.workflows.sweep.local`): its local roots are the proposal.
3. Verification: the mixed model (:func:`lar_prec.diagnosis.mixed.write_mixed_model`: listed
   operators in float32, the rest as the option runs them) runs with the default kernels and its
   outputs are held against the reference. While an output is out of ``tolerance`` the list
   widens greedily, worst local error first, in doubling batches (1, 2, 4, ... operators),
   so a list that needs k more operators costs about log2(k) + 1 runs; the last step keeps
   every operator (the plain float32 model). The list is not minimised after it holds.
4. For each kept operator: why, by the float64 oracle on the reference's inputs
   (:func:`lar_prec.diagnosis.oracle.classify_fp16`): float16 rounding, float16 accumulation
   or a wrong kernel; measured with one more layerwise run under the option's naive kernels
   and, under ioc16, one under io16xc32 (float32 compute on float16 storage).

An empty proposal that the plain option's run already satisfies costs no verification run:
that run is the empty list's verification.
"""
from __future__ import annotations

import math
from collections import Counter
import shutil
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence, Tuple, Union

from lar_prec._lazy import numpy as np
from lar_prec.compare.metrics import max_megengine_err
from lar_prec.diagnosis.graphinfo import GraphInfo, describe_model
from lar_prec.diagnosis.local import output_ids, run_layerwise
from lar_prec.diagnosis.mixed import ComputeFraction, float_operators, fp16_fraction, write_mixed_model
from lar_prec.diagnosis.oracle import (
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
from lar_prec.records import PathLike, json_number
from lar_prec.report.html import write_html
from lar_prec.run.config import get_config
from lar_prec.run.once import run_once
from lar_prec.run.record import RunResult
from lar_prec.workflows.common import prepare_analysis
from lar_prec.workflows.sweep.local import OptionLocal, measure_option, prepare

SCHEMA = "lar-prec.mixed/1"
#: default target: 4 float16 units (2^-8) of MegEngine's error on every model output
DEFAULT_TOLERANCE = 4 * 2.0 ** -10
#: verification runs at most (the last keeps every operator)
MAX_ATTEMPTS = 12


@dataclass(frozen=True)
class KeptOperator:
    """One operator kept in float32: why it was listed (``local root`` with its margin, or
    ``widened`` at which attempt) and why it errs in float16 (the oracle's verdict)."""

    name: str
    opr_type: str
    listed: str
    local_err: Optional[float]
    floor: Optional[float]
    cause: Optional[str] = None
    cause_detail: Optional[Dict[str, Any]] = None

    def to_json(self) -> Dict[str, Any]:
        return {"name": self.name, "opr_type": self.opr_type, "listed": self.listed,
                "local_err": json_number(self.local_err) if self.local_err is not None else None,
                "floor": self.floor, "cause": self.cause, "cause_detail": self.cause_detail}


@dataclass(frozen=True)
class Attempt:
    """One verification: the keep-list, the mixed model and its output error."""

    step: int
    keep: Tuple[str, ...]
    model: str
    output_err: float
    outputs: Tuple[Tuple[str, float], ...]
    within: bool
    run_dir: str
    seconds: float

    def to_json(self) -> Dict[str, Any]:
        return {"step": self.step, "keep": list(self.keep), "model": self.model,
                "output_err": json_number(self.output_err), "nonfinite": not math.isfinite(self.output_err),
                "within": self.within,
                "outputs": [{"name": n, "err": json_number(e)} for n, e in self.outputs],
                "run_dir": self.run_dir, "seconds": round(self.seconds, 3)}


@dataclass(frozen=True)
class MixedAnalysis:
    """Everything ``lar-prec mixed`` found (see the module docstring)."""

    analysis_dir: Path
    model: Path
    option: str
    tolerance: float
    plain_err: float
    plain_outputs: Tuple[Tuple[str, float], ...]
    proposal: Tuple[str, ...]
    kept: Tuple[KeptOperator, ...]
    attempts: Tuple[Attempt, ...]
    verified: bool
    mixed_model: Optional[MixedModel]
    fraction: ComputeFraction
    local: OptionLocal
    runs: Tuple[RunResult, ...]
    keep_file: Path
    seconds: float
    note: str = ""
    #: why the plain option's run failed ("" when it ran)
    plain_failed: str = ""
    #: every measured operator in execution order: (name, type, local error, float16 floor)
    operators: Tuple[Tuple[str, str, Optional[float], Optional[float]], ...] = ()

    @property
    def output_err(self) -> float:
        """The output error of the last model tried (the option alone when none was)."""
        return self.attempts[-1].output_err if self.attempts else self.plain_err

    @property
    def needs_float32(self) -> bool:
        """The option alone is out of tolerance (exit 1)."""
        return not (self.plain_err <= self.tolerance)

    def to_json(self) -> Dict[str, Any]:
        kept = {k.name for k in self.kept}
        return {
            "schema": SCHEMA,
            "analysis_dir": str(self.analysis_dir),
            "model": str(self.model),
            "option": self.option,
            "tolerance": self.tolerance,
            "verdict": ("within" if not self.needs_float32 else "fixed" if self.verified else "not_fixed"),
            "plain": {"output_err": json_number(self.plain_err),
                      "nonfinite": not math.isfinite(self.plain_err) and not self.plain_failed,
                      "failed": self.plain_failed or None,
                      "outputs": [{"name": n, "err": json_number(e)} for n, e in self.plain_outputs]},
            "proposal": list(self.proposal),
            "kept": [k.to_json() for k in self.kept],
            "keep_types": dict(Counter(k.opr_type for k in self.kept)),
            "verified": self.verified,
            "output_err": json_number(self.output_err),
            "mixed_model": self.mixed_model.to_json() if self.mixed_model is not None else None,
            "keep_file": str(self.keep_file),
            "fp16_fraction": self.fraction.to_json(),
            "attempts": [a.to_json() for a in self.attempts],
            "operators": [{"name": n, "opr_type": t, "local_err": json_number(e) if e is not None else None,
                           "nonfinite": e is not None and not math.isfinite(e), "floor": f,
                           "float32": n in kept} for n, t, e, f in self.operators],
            "local": self.local.to_json(),
            "runs": [r.to_json() for r in self.runs],
            "seconds": round(self.seconds, 3),
            "note": self.note or None,
        }


def _output_errors(g: GraphInfo, ref: DumpFolder, test: DumpFolder) -> Tuple[Tuple[str, float], ...]:
    """MegEngine's max error of each model output (paired by name: the last var of that name,
    the conversion back to float32 in a float16 run)."""
    def last(folder: DumpFolder) -> Dict[str, Any]:
        return {d.var.name: d for d in folder}

    a, b = last(ref), last(test)
    out: List[Tuple[str, float]] = []
    for vid in g.outputs:
        name = g.vars[vid].name
        if name not in a or name not in b:
            raise RunError(f"{test.path}: expected the model output {name!r} in the dump of the run")
        out.append((name, max_megengine_err(np.asarray(a[name].array()), np.asarray(b[name].array()))))
    return tuple(out)


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


def mixed_analysis(model: PathLike, inputs: Union[str, Sequence[str]], *, option: str = "ioc16",
                   tolerance: float = DEFAULT_TOLERANCE, out: Optional[PathLike] = None, seed: int = 0,
                   lar: Any = None, timeout: Optional[float] = None,
                   progress: Any = None) -> MixedAnalysis:
    """See the module docstring.

    Raises:
        UsageError (exit 2): bad model, inputs, option or tolerance; RunError (exit 3): the
        reference, the option's run or a rewrite failed.
    """
    if option not in MODES:
        raise UsageError(f"--option {option!r}: expected one of {', '.join(MODES)}")
    if not (isinstance(tolerance, (int, float)) and math.isfinite(tolerance) and tolerance >= 0):
        raise UsageError(f"--tolerance {tolerance!r}: expected a finite number >= 0")
    t0 = time.monotonic()
    say = progress or (lambda msg: None)
    model_path, adir, prepared, lar_obj = prepare_analysis(model, inputs, out, "mixed", seed, lar, timeout)
    tmo = timeout if timeout is not None else 600.0
    flags = (f"--enable-{option}",)
    g = describe_model(model_path, adir / "graph.json")
    say("reference: naive kernels, float32")
    ref_run = run_once(model_path, prepared, "naive", adir, lar=lar_obj, timeout=timeout, label="reference")
    say(f"the option alone: default kernels, {flags[0]}")
    ref = DumpFolder(ref_run.dump_dir)
    runs: List[RunResult] = [ref_run]
    plain_failed = ""
    try:
        plain_run = run_once(model_path, prepared, "default", adir, lar=lar_obj, timeout=timeout, extra_flags=flags,
                             label=option)
    except RunError as exc:  # MegEngine's own pass may refuse the model: the rewrite may still run it
        if getattr(exc, "result", None) is None:
            raise
        plain_failed = str(exc).split(" -- hint:")[0]
        runs.append(exc.result)
        plain: Tuple[Tuple[str, float], ...] = ()
        plain_err = math.inf
    else:
        runs.append(plain_run)
        plain = _output_errors(g, ref, DumpFolder(plain_run.dump_dir))
        plain_err = _worst(plain)

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

    listed: Dict[str, str] = {r.name: f"local root under {option} (local error {r.margin:.3g} x its float16 floor)"
                              for r in local.roots}
    keep = list(proposal)
    attempts: List[Attempt] = []
    cands = _candidates(local, keep)
    batch = 1
    all_types = tuple(sorted({o.type for o in g.computing()}))
    final_model: Optional[MixedModel] = None
    verified = False
    every = False

    def widen(after: str) -> None:
        nonlocal cands, batch, every
        if not cands:
            every = True
            return
        add, cands = cands[:batch], cands[batch:]
        for n, e in add:
            listed[n] = f"widened {after} (local error {e:.3g})"
        keep.extend(n for n, _ in add)
        batch *= 2

    if not keep and plain_err > tolerance and not plain_failed:
        widen("because the option alone is out of tolerance")  # the plain run already tried the empty list
    if not keep and not every and not plain_failed:
        verified = True  # within tolerance as it is: the plain option's run verifies the empty list
    while not verified:
        step = len(attempts) + 1
        every = every or step >= MAX_ATTEMPTS
        kl = KeepList(types=all_types) if every else KeepList(instances=tuple(keep))
        say(f"verification {step}: {'every operator' if every else len(keep)} in float32")
        t1 = time.monotonic()
        mm = write_mixed_model(model_path, adir / f"mixed-{step}.mge", kl, option, timeout=tmo)
        run = run_once(mm.path, prepared, "default", adir, lar=lar_obj, timeout=timeout, label=f"mixed-{step}")
        runs.append(run)
        errs = _output_errors(g, ref, DumpFolder(run.dump_dir))
        within = _worst(errs) <= tolerance
        attempts.append(Attempt(step, tuple(n for n, _ in mm.kept), str(mm.path), _worst(errs), errs, within,
                                str(run.dir), time.monotonic() - t1))
        final_model = mm
        if within or every:
            verified = within
            break
        widen(f"after verification {step}")

    if final_model is not None:  # the last verified (or best tried) model under one name, beside its attempts
        deploy = adir / "mixed.mge"
        try:
            shutil.copyfile(final_model.path, deploy)
        except OSError as exc:
            raise UsageError(f"cannot write the mixed-precision model to {deploy}: {exc.strerror or exc}") from None
        final_model = replace(final_model, path=deploy)
    kept_names = [n for n, _ in final_model.kept] if final_model is not None else list(keep)
    measured = {m.name: m for m in prep.layerwise.measured}
    errors = dict(local.errors)
    floors = dict(local.floors)
    causes: Dict[str, Tuple[Optional[str], Dict[str, Any]]] = {}
    if kept_names and local.measured:
        say("why each kept operator errs in float16 (the float64 oracle)")
        dumps: Dict[str, Optional[DumpFolder]] = {"default": DumpFolder(Path(local.dir or "") / "dump")}
        for label in ("naive", "f32") if option == "ioc16" else ("naive",):
            try:
                dumps[label] = _run_lw(prep, label, option, adir / "local" / f"oracle-{label}" / "dump", tmo,
                                       rewritten)
            except LarPrecError:
                dumps[label] = None  # the verdict then says what it lacked
        causes = _classify(g, prep.layerwise, ref, kept_names, dumps)
    kept = tuple(KeptOperator(n, measured[n].opr_type if n in measured else _opr_type(g, n),
                              listed.get(n, "kept with every operator (the plain float32 model)"),
                              errors.get(n), floors.get(n), *causes.get(n, (None, None)))
                 for n in kept_names)
    final_keep = KeepList(instances=tuple(kept_names)) if final_model is not None else KeepList()
    fraction = fp16_fraction(g, final_keep)
    keep_file = adir / "keep.json"
    res = MixedAnalysis(adir, model_path, option, float(tolerance), plain_err, plain, proposal, kept,
                        tuple(attempts), verified, final_model, fraction, local, tuple(runs), keep_file,
                        time.monotonic() - t0, note, plain_failed,
                        tuple((m.name, m.opr_type, errors.get(m.name), floors.get(m.name))
                              for m in prep.layerwise.measured if m.name in errors))
    data = res.to_json()
    try:
        atomic_write_text(keep_file, json_text(_keep_file(final_keep, kept, g, option)),
                          what="keep-list")
        atomic_write_text(adir / "mixed.json", json_text(data), what="mixed result")
        write_html(data, adir / "mixed.html")
    except LarPrecError as exc:  # a full disk at the very end: the verdict and the keep-list are shown first
        exc.report = data
        raise
    return res


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
