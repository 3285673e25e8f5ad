"""Local error of every operator under each option of a sweep (issue 14).

A sweep's reference is the naive run of the plain model. :func:`prepare` builds the
layerwise model (:mod:`lar_prec.diagnosis.local`) once from the plain model and the reference dump and
writes the reference's values as its inputs; :func:`measure_option` then runs it under one
option (default kernels plus the option's load_and_run flags, exactly as the option's run got
them) and compares each operator's output with the reference's. Floors are those of the
arithmetic the option imposes (float16 under ``ioc16``/``io16xc32``:
:func:`lar_prec.floors.noise_floors` with ``compute_dtype``).

The option's rewrite applies to the layerwise model as to the plain one: layouts put relayouts
around convolutions (brought back with :func:`lar_prec.workflows.sweep.analysis.compare_pair`), fp16
options add TypeCvts (the ``.lw<id>`` output names stay on the conversion back to float32).
An operator whose output is missing or not comparable is *not measured under this option*,
with the reason; a layerwise run that fails or hangs leaves the option unmeasured, with why.

Numpy only: the build and the runs are child processes.
"""
from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple

from lar_prec.errors import LarPrecError, RunTimeout
from lar_prec.diagnosis.floors import LocalRoot, local_json, local_roots, noise_floors
from lar_prec.dumps.folder import DumpFolder
from lar_prec.diagnosis.local_records import CheckResult, LayerwiseModel, LocalResult, LocalVar
from lar_prec.diagnosis.local_bounds import bound_of
from lar_prec.diagnosis.local import (
    build_layerwise,
    feed_inputs,
    isolation_check,
    magnitude_ids,
    output_ids,
    run_layerwise,
)
from lar_prec.outputs import atomic_write_text, json_text
from lar_prec.run.config import get_config
from lar_prec.records import json_number
from lar_prec.report.records import over_floor
from lar_prec.diagnosis.local import _max_abs
from lar_prec.workflows.sweep.analysis import compare_pair
from lar_prec.diagnosis.replay import make_repros



@dataclass(frozen=True)
class OptionLocal:
    """Local error under one option. ``measured`` False: ``why``. ``roots`` most likely first;
    ``not_measured``/``not_isolated``: (reference var name, why); ``errors``: name -> local error."""

    measured: bool
    why: str = ""
    roots: Tuple[LocalRoot, ...] = ()
    not_measured: Tuple[Tuple[str, str], ...] = ()
    not_isolated: Tuple[Tuple[str, str], ...] = ()
    errors: Tuple[Tuple[str, Optional[float]], ...] = ()
    floors: Tuple[Tuple[str, Optional[float]], ...] = ()
    compute_dtype: str = "float32"
    dir: Optional[str] = None
    seconds: float = 0.0
    #: repro folders of the roots (``lar-prec replay``), and why any was not written
    repros: Tuple[str, ...] = ()
    repro_errors: Tuple[str, ...] = ()
    #: the run whose layerwise run this is, its dump having the same bits as this option's
    #: (workflows.sweep.samebits; None: its own run), and that in words for the report's row
    same_as: Optional[str] = None
    same_words: str = ""

    def measured_names(self) -> frozenset:
        return frozenset(n for n, e in self.errors if e is not None)

    def to_json(self) -> Dict[str, Any]:
        return {
            "measured": self.measured, "why": self.why or None, "compute_dtype": self.compute_dtype,
            "n_measured": len(self.measured_names()),
            "roots": [{"id": r.id, "name": r.name, "opr_type": r.opr_type, "local_err": json_number(r.local_err),
                       "nonfinite": not math.isfinite(r.local_err), "floor": r.floor, "margin": json_number(r.margin),
                       "entire_err": json_number(r.entire_err),
                       "words": over_floor(r.local_err, r.floor)} for r in self.roots],
            "not_measured": [{"name": n, "why": w} for n, w in self.not_measured],
            "not_isolated": [{"name": n, "why": w} for n, w in self.not_isolated],
            "dir": self.dir, "seconds": round(self.seconds, 3),
            "repros": list(self.repros), "repro_errors": list(self.repro_errors),
            "same_bits_as": self.same_as, "same_words": self.same_words or None,
        }


@dataclass(frozen=True)
class SweepLayerwise:
    """The layerwise model of a sweep's plain model, and the reference's values as its inputs."""

    layerwise: LayerwiseModel
    inputs: Any  # PreparedInputs: hashed, so a device gets them pushed
    ref_dump: Path
    dir: Path
    seconds: float
    #: where the option runs ran: their load_and_run (None: bundled) and device (the sweep's
    #: RemoteSessions for layerwise files, shared by every option)
    lar: Any = None
    remote: Any = None
    #: reference var id -> max |value| (the floors' magnitude), read once for all options
    ref_max_abs: Mapping[int, Optional[float]] = field(default_factory=dict)


def prepare(model: Path, ref_dump: Path, out_dir: Path, *, timeout: float, lar: Any = None,
            remote: Any = None) -> SweepLayerwise:
    """Build the layerwise model once (here: it needs MegEngine) and write its inputs (the
    reference's values); its runs go to ``lar`` / ``remote`` like the option runs.

    Raises:
        LarPrecError: the build failed (the sweep reports local error as not measured).
    """
    t0 = time.monotonic()

    lw = build_layerwise(model, ref_dump, out_dir / "layerwise", timeout=timeout)
    ref = DumpFolder(ref_dump)
    inputs = feed_inputs(lw, ref, out_dir / "inputs-ref")
    mags = {m.ref_id: _max_abs(ref[m.ref_id].array()) for m in lw.measured if m.ref_id is not None and m.ref_id in ref}
    return SweepLayerwise(lw, inputs, Path(ref_dump), out_dir, time.monotonic() - t0, lar, remote, mags)


def run_option_layerwise(prep: SweepLayerwise, flags: Sequence[str], dump_dir: Path, *,
                         timeout: float) -> DumpFolder:
    """The one place the layerwise model runs under an option: where the option runs ran (the
    sweep's load_and_run, its device: the files are pushed once and removed when the sweep
    closes the sessions), default kernels plus ``flags`` (the sweep's extra flags and the option's)."""
    cfg = get_config("default").with_extra(tuple(flags))
    return run_layerwise(prep.layerwise, prep.inputs, dump_dir, cfg, lar=prep.lar, remote=prep.remote,
                         timeout=timeout)


#: longest load_and_run message kept in an option's row (the whole stderr is in its folder)
WHY_CHARS = 200


def _failure(exc: LarPrecError, out_dir: Path) -> str:
    """One line: why the layerwise run under an option gave no local error."""
    if isinstance(exc, RunTimeout):
        return f"local error could not be measured: the layerwise model hung under this option ({exc})"
    msg = str(exc).split(" -- hint:")[0]
    head, sep, tail = msg.partition("failed ")  # "the layerwise model under default failed (exit 1): ..."
    msg = tail if sep else msg
    if len(msg) > WHY_CHARS:
        msg = msg[:WHY_CHARS] + "..."
    return f"local error could not be measured: the layerwise model failed under this option {msg} (see {out_dir})"


def measure_option(prep: SweepLayerwise, flags: Sequence[str], out_dir: Path, *, fmt: Optional[str],
                   compute_dtype: Optional[str], entire: Mapping[str, Optional[float]],
                   timeout: float) -> OptionLocal:
    """Local error of every operator under one option's flags, into ``out_dir``; never raises
    for a failed or hung run (``measured`` False and why). ``entire``: the option's accumulated
    error per reference var name (labels "inherited" with it)."""
    t0 = time.monotonic()
    cdt = compute_dtype or "float32"
    try:
        dump = run_option_layerwise(prep, flags, out_dir / "dump", timeout=timeout)
    except LarPrecError as exc:
        return OptionLocal(False, why=_failure(exc, out_dir), compute_dtype=cdt, dir=str(out_dir),
                           seconds=time.monotonic() - t0)

    lw = prep.layerwise
    ref = DumpFolder(prep.ref_dump)
    outs = output_ids(dump)
    mags = magnitude_ids(dump)
    iso = isolation_check(lw, dump, outs)
    iso_why = dict(iso.failures)
    rows: List[LocalVar] = []
    missing: List[Tuple[str, str]] = []
    for m in lw.measured:
        if m.ref_id is None or m.ref_id not in ref:
            missing.append((m.name, "no reference value"))
            continue
        if m.id not in outs:
            missing.append((m.name, "its output is not in the layerwise run's dump under this option "
                                    "(the rewrite fused or renamed it)"))
            continue
        err, note = compare_pair(ref[m.ref_id], dump[outs[m.id]], fmt, dump.path)
        if err is None:
            missing.append((m.name, f"not comparable under this option: {note}"))
            continue
        problem = m.problem or iso_why.get(m.id)
        bound, why = bound_of(lw, m, ref, dump, outs, mags, fmt, compute_dtype)
        rows.append(LocalVar(m.id, m.name, m.opr_type, m.dtype, err, entire.get(m.name), problem is None, problem,
                             prep.ref_max_abs.get(m.ref_id), bound, why))
    if not rows:  # nothing to judge by: the option keeps its dump-only verdict
        first = f" (first: {missing[0][0]}: {missing[0][1]})" if missing else ""
        return OptionLocal(False, why="local error could not be measured: no operator's output was comparable "
                                      f"under this option{first}", not_measured=tuple(missing), compute_dtype=cdt,
                           dir=str(out_dir), seconds=time.monotonic() - t0)
    result = LocalResult(lw, "default " + " ".join(flags), prep.ref_dump, None, Path(dump.path), tuple(rows),
                         (iso, CheckResult("reference_self", "skipped", note="sweep: isolation only"),
                          CheckResult("test_fed", "skipped", note="sweep: isolation only")))
    floors = noise_floors(result, compute_dtype)
    verdict = local_roots(result, floors)
    ref_id = {m.id: m.ref_id for m in lw.measured}
    repros, repro_errors = _repros(result, verdict, flags, out_dir, timeout)
    record = local_json(result, verdict)
    record["not_measured"] = [{"name": n, "why": w} for n, w in missing]
    record["compute_dtype"] = cdt
    atomic_write_text(out_dir / "local.json", json_text(record), what="local error record")
    return OptionLocal(
        True, roots=tuple(LocalRoot(int(ref_id[r.id] if ref_id[r.id] is not None else r.id), r.name, r.opr_type,
                                         r.local_err, r.floor, r.entire_err) for r in verdict.roots),
        not_measured=tuple(missing), not_isolated=tuple((v.name, v.problem or "") for v in rows if not v.isolated),
        errors=tuple((v.name, v.local_err) for v in rows), floors=tuple((v.name, floors.get(v.id)) for v in rows),
        compute_dtype=cdt, dir=str(out_dir), seconds=time.monotonic() - t0, repros=repros,
        repro_errors=repro_errors)


#: repro folders per option (each costs a model load and a one-operator dump)
REPROS_PER_OPTION = 3


def _repros(result: LocalResult, verdict: Any, flags: Sequence[str], out_dir: Path,
            timeout: float) -> Tuple[Tuple[str, ...], Tuple[str, ...]]:
    """A repro folder per local root of the option (``out_dir/repro-<reference id>``): the
    one-operator model under default kernels plus the option's flags; never raises."""

    errors: List[str] = []
    written = make_repros(result, out_dir, verdict, limit=REPROS_PER_OPTION, timeout=timeout,
                          test_config=get_config("default").with_extra(tuple(flags)), errors=errors)
    return tuple(str(r.dir) for r in written), tuple(errors)
