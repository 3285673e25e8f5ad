"""Per-layer quantization error (``lar-prec quant FLOAT.mge QUANT.mge``): the two graphs read and
paired by structure (a pair that is not a float model and its int8 quantization stops here, exit
2), the float model run with the naive kernels, the int8 one with the default kernels, every
layer's accumulated and local error (the int8 operator on the float model's own inputs), worst
first; each output against the float model's (top-1/top-5 agreement for a classifier); the
layers to keep in float, verified by running the int8 model with them rewritten in float32.
The measuring lives in :mod:`lar_prec.diagnosis.quantinfo` and :mod:`lar_prec.diagnosis.quantkeep`;
this module only runs and composes."""
from __future__ import annotations

import math
import shutil
import tempfile
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple, Union

from lar_prec.diagnosis.graphinfo import GraphInfo, describe_model
from lar_prec.diagnosis.quantinfo import (
    LayerError,
    Metrics,
    QuantPairing,
    layer_errors,
    local_quant_errors,
    not_in_dumps,
    pair_quant,
    with_local,
    worst_first,
)
from lar_prec.diagnosis.quantkeep import (
    KEEP_IN_FLOAT_MARGIN_DB,
    KeepChoice,
    OutputAgreement,
    choose_keep,
    explain,
    keep_spec,
    output_agreements,
    write_kept_model,
)
from lar_prec.dumps.folder import DumpFolder
from lar_prec.errors import LarPrecError, UsageError
from lar_prec.inputspec import check_file
from lar_prec.outputs import atomic_write_text, json_text, sha256_file
from lar_prec.run.dirs import finish_analysis_dir
from lar_prec.run.inputs import input_summary
from lar_prec.records import PathLike, json_number
from lar_prec.report.html import write_html
from lar_prec.run.record import RunResult
from lar_prec.run.settings import Prepared, Settings
from lar_prec.workflows.common.analysis import prepare, run_one


@dataclass(frozen=True)
class Verification:
    """The int8 model with the kept layers in float32 (``model``), run with the default kernels:
    its outputs against the float model's. ``verified``: every output's SNR rose and no
    classifier lost top-1 agreement. ``skipped``: kept layers the rewrite cannot make float."""

    model: Optional[Path]
    kept: Tuple[str, ...]
    skipped: Tuple[str, ...]
    outputs: Tuple[OutputAgreement, ...]
    verified: bool
    run: Optional[RunResult] = None

    def to_json(self) -> Dict[str, Any]:
        return {"model": str(self.model) if self.model else None, "kept": list(self.kept),
                "skipped": list(self.skipped), "outputs": [o.to_json() for o in self.outputs],
                "verified": self.verified}


@dataclass(frozen=True)
class QuantAnalysis:
    """Everything ``lar-prec quant`` found: layers worst first (by local SNR), what did not pair
    and why, each output against the float model's, the layers to keep in float (and why), the
    check of that list by a rewritten model, and the runs made."""

    analysis_dir: Path
    layers: Tuple[LayerError, ...]
    pairing: QuantPairing
    runs: Tuple[RunResult, ...]
    keep: KeepChoice
    outputs: Tuple[OutputAgreement, ...]
    verification: Optional[Verification] = None
    not_measured: Tuple[Tuple[str, str], ...] = ()
    #: ``{"inputs": [...], "input_summary": {...}}`` (seeded random, constant, not given inputs)
    inputs: Optional[Dict[str, Any]] = None

    @property
    def keep_in_float(self) -> Tuple[str, ...]:
        return tuple(k.name for k in self.keep.layers)

    @property
    def verdict(self) -> str:
        """One paragraph: the outputs against the float model, and what to keep in float."""
        parts = [_output_text(o) for o in self.outputs] or ["no output of the int8 model was dumped by both runs"]
        k = self.keep
        if not k.layers:
            parts.append("no layer to keep in float" + (
                f": every int8 layer's local SNR is within {k.median_db - k.floor_db:.0f} dB of the median "
                f"{k.median_db:.1f} dB" if k.median_db is not None else ": no int8 layer has a measured local SNR"))
        else:
            parts.append(f"keep {len(k.layers)} layer(s) in float: " + "; ".join(f"{l.name} ({l.why})" for l in k.layers))
        v = self.verification
        if v is not None and v.outputs:
            parts.append(("verified" if v.verified else "NOT verified") + f": with {len(v.kept)} layer(s) in float32, "
                         + "; ".join(_output_text(o) for o in v.outputs))
        if v is not None and v.skipped:
            parts.append("not rewritten: " + "; ".join(v.skipped))
        said = (self.inputs or {}).get("input_summary") or {}
        return "; ".join([". ".join(parts), *[t for t in [said.get("line"), *(said.get("warnings") or ())] if t]])

    def to_json(self) -> Dict[str, Any]:
        p = self.pairing
        return {
            "schema": "lar-prec.quant/1",
            "analysis_dir": str(self.analysis_dir),
            "verdict": self.verdict,
            "keep_in_float": list(self.keep_in_float),
            "keep": [k.to_json() for k in self.keep.layers],
            "snr_floor_db": json_number(self.keep.floor_db),
            "snr_median_db": json_number(self.keep.median_db),
            "int8_layers": self.keep.candidates,
            "pairing": {"layers_total": p.layers_total, "layers_paired": p.layers_paired,
                        "share": p.layers_paired / p.layers_total if p.layers_total else None},
            "outputs": [o.to_json() for o in self.outputs],
            "verification": self.verification.to_json() if self.verification else None,
            "layers": [l.to_json() for l in self.layers],
            "unpaired": [u.to_json() for u in self.pairing.unpaired],
            "not_measured": [{"name": n, "why": why} for n, why in self.not_measured],
            "runs": [r.to_json() for r in self.runs],
            **(self.inputs or {}),
        }


def _snr(m: Metrics) -> float:
    return math.inf if m.snr_note == "exact" else m.snr_db if m.snr_db is not None else -math.inf


def _output_text(o: OutputAgreement) -> str:
    m = o.metrics
    snr = "exact" if m.snr_note == "exact" else f"SNR {m.snr_db:.1f} dB" if m.snr_db is not None else f"SNR - ({m.snr_note})"
    text = f"output {o.name}: {snr}, cosine {m.cosine:.5f}" if m.cosine is not None else f"output {o.name}: {snr}"
    if o.top1 is not None:
        text += f", top-1 {round(o.top1 * o.samples)}/{o.samples}"
    if o.top5 is not None:
        text += f", top-5 {round(o.top5 * o.samples)}/{o.samples}"
    return text + " against the float model"


def _check_pair(float_path: Path, quant_path: Path, fg: GraphInfo, qg: GraphInfo, pairing: QuantPairing) -> None:
    """A usage error unless FLOAT is a float model and QUANT an int8 model of the same network."""
    fq = sorted({v.dtype for v in fg.vars.values() if v.is_quantized})
    if fq:
        raise UsageError(f"{float_path}: expected the float model, it has {', '.join(fq)} vars (give the float model "
                         "first, the quantized one second)")
    if not any(v.is_quantized for v in qg.vars.values()):
        raise UsageError(f"{quant_path}: expected a quantized (int8) model, it has no quantized var")
    why = pairing.mismatch(float_path, quant_path)
    if why:
        raise UsageError(why)


def _graphs(float_path: Path, quant_path: Path, timeout: Optional[float]) -> Tuple[GraphInfo, GraphInfo, Path]:
    """Both graph records, written into a temporary folder (moved into the analysis folder
    once the pair is accepted: a refused pair leaves no folder)."""
    tmp = Path(tempfile.mkdtemp(prefix="lar-prec-quant-"))
    try:
        fg = describe_model(float_path, tmp / "float.graph.json", timeout=timeout or 600.0)
        qg = describe_model(quant_path, tmp / "quant.graph.json", timeout=timeout or 600.0)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return fg, qg, tmp


def quant_analysis(float_model: PathLike, quant_model: PathLike, inputs: Union[str, Sequence[str]], *,
                   out: Optional[PathLike] = None, seed: int = 0, lar: Any = None,
                   timeout: Optional[float] = None, margin_db: float = KEEP_IN_FLOAT_MARGIN_DB,
                   verify: bool = True, progress: Optional[Callable[[str], None]] = None) -> QuantAnalysis:
    """Pair, run both models once, dequantize, measure, choose and verify; see the module docstring.
    The keywords make one :class:`~lar_prec.run.settings.Settings` record (its model the float
    one); :func:`analyse` runs it.
    ``progress``: told one line per finished step (``step K/N: ...``, one counter over the command).

    Raises:
        UsageError (exit 2): a model or input is missing or wrong, or the two models are not a
        float model and its quantization; RunError (exit 3): a run failed.
    """
    return analyse(Settings(model=float_model, inputs=inputs, out=out, seed=seed, lar=lar, timeout=timeout),
                   quant_model, margin_db=margin_db, verify=verify, progress=progress)


def analyse(settings: Settings, quant_model: PathLike, *, margin_db: float = KEEP_IN_FLOAT_MARGIN_DB,
            verify: bool = True, progress: Optional[Callable[[str], None]] = None) -> QuantAnalysis:
    """:func:`quant_analysis` from one :class:`~lar_prec.run.settings.Settings` record (the CLI's
    way in): its model is the float model, ``quant_model`` the int8 one."""
    s = settings
    timeout = s.timeout
    quant_path = check_file(quant_model, "quantized model file")
    float_path = check_file(s.model, "float model file")
    if sha256_file(float_path) == sha256_file(quant_path):
        raise UsageError(f"{float_path} and {quant_path} are the same model: expected a float model and the int8 "
                         "model MegEngine's quantization made from it")
    fg, qg, tmp = _graphs(float_path, quant_path, timeout)
    try:
        pairing = pair_quant(fg, qg)
        _check_pair(float_path, quant_path, fg, qg, pairing)
        ready = prepare(s, "quant")
        float_path, adir, lar_obj = ready.model, ready.dir, ready.lar
        for f in tmp.iterdir():
            shutil.move(str(f), str(adir / f.name))
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    steps = 4 if verify else 3
    say = progress or (lambda msg: None)
    f_run = run_one(ready, "naive", "float-naive")
    say(f"step 1/{steps}: float model (naive kernels) {f_run.status} in {f_run.seconds:.1f} s")
    q_run = run_one(ready, "default", "quant-default", model=quant_path)
    say(f"step 2/{steps}: int8 model (default kernels) {q_run.status} in {q_run.seconds:.1f} s")
    fd, qd = DumpFolder(f_run.dump), DumpFolder(q_run.dump)
    local = local_quant_errors(quant_path, qg, fg, pairing, fd, qd, adir / "local", lar=lar_obj, timeout=timeout)
    say(f"step 3/{steps}: local error of each int8 layer measured")
    measured = layer_errors(fg, qg, fd, qd, pairing)
    layers = worst_first(with_local(measured, local))
    keep = explain(choose_keep(layers, margin_db), pairing.pairs, fg, qg, fd, qd)
    outputs = tuple(output_agreements(pairing.outputs, fg, qg, fd, qd))
    runs: List[RunResult] = [f_run, q_run]
    verification = None
    if verify and keep.layers:
        verification = _verify(ready, quant_path, keep, pairing, fg, qg, fd, outputs)
        if verification.run is not None:
            runs.append(verification.run)
        say(f"step 4/{steps}: {len(keep.layers)} layer(s) kept in float32, verified by a run")
    elif verify:
        say(f"step 4/{steps}: no layer to keep in float32: nothing to verify")
    res = QuantAnalysis(adir, tuple(layers), pairing, tuple(runs), keep, outputs, verification,
                        tuple(not_in_dumps(pairing, measured, fg, qg, fd, qd)))
    res = replace(res, inputs={"inputs": ready.inputs.to_json(), "input_summary": input_summary(ready.inputs)})
    data = res.to_json()
    try:
        atomic_write_text(adir / "quant.json", json_text(data), what="quant result")
        write_html(data, adir / "quant.html")
        finish_analysis_dir(adir)
    except LarPrecError as exc:  # a full disk at the very end: the verdict is shown first
        exc.report = data
        raise
    return res


def _verify(ready: Prepared, quant_path: Path, keep: KeepChoice, pairing: QuantPairing, fg: GraphInfo,
            qg: GraphInfo, fd: DumpFolder, before: Sequence[OutputAgreement]) -> Verification:
    """The int8 model with the kept layers in float32, run once; its outputs against the float
    run's, and against ``before`` (the int8 model's)."""
    adir, timeout = ready.dir, ready.settings.timeout
    spec, skipped = keep_spec(keep.layers, pairing.pairs, fg, fd, adir / "kept")
    if not spec:
        return Verification(None, (), tuple(skipped), (), False)
    model = write_kept_model(quant_path, adir / "kept" / "kept-in-float.mge", spec, timeout=timeout or 600.0)
    run = run_one(ready, "default", "kept-in-float", model=model)
    got = tuple(output_agreements(pairing.outputs, fg, qg, fd, DumpFolder(run.dump)))
    was = {o.name: o for o in before}
    better = bool(got) and all(
        o.name in was and _snr(o.metrics) > _snr(was[o.name].metrics)
        and (o.top1 is None or was[o.name].top1 is None or o.top1 >= was[o.name].top1) for o in got)
    return Verification(model, tuple(k["name"] for k in spec), tuple(skipped), got, better, run)
