"""``lar-prec shake``: the same model and input N times; does the output jitter, where does the
jitter start, and what removes it (``--reproducible``, algorithm choices pinned by a
``--fast-run-algo-policy`` cache)?
"""
from __future__ import annotations

from pathlib import Path
from typing import Dict, List, Optional, Sequence, Tuple, Union

from lar_prec.workflows.jitter import any_difference, jitter, shake_verdict
from lar_prec.compare.threshold import Threshold
from lar_prec.errors import UsageError
from lar_prec.records import PathLike
from lar_prec.run.config import LoadAndRun, get_config
from lar_prec.run.device import RemoteSpec
from lar_prec.run.inputs import PreparedInputs
from lar_prec.run.record import RunResult
from lar_prec.workflows.common import Analysis, Planned, environment_extra, measure_local, open_remote, run_plan, write_reports
from lar_prec.workflows.common import StageProgress
from lar_prec.workflows.common import prepare_analysis
from lar_prec.report.model import from_tree
from lar_prec.compare.threshold import parse_threshold_spec
from lar_prec.diagnosis.local_analysis import off_reason
from lar_prec.report.local import report_ids


CAUSE_ALGO = "algorithm choice differs between runs"
CAUSE_KERNEL = "non-reproducible kernel"
CAUSE_NEITHER = ("neither algorithm choice nor a non-reproducible kernel: "
                 "look at the input, uninitialised memory or random operators")

SHAKE_CONFIGS = ("default", "reproducible", "fast-run")


def shake(
    model: PathLike,
    inputs: Union[str, Sequence[str]],
    *,
    repeat: int = 3,
    config: str = "default",
    jobs: int = 1,
    out: Optional[PathLike] = None,
    threshold: Union[str, float, Threshold, None] = 0.0,
    explain: bool = True,
    lar: Union[LoadAndRun, str, None] = None,
    timeout: Optional[float] = None,
    extra_flags: Sequence[str] = (),
    html: bool = True,
    seed: int = 0,
    progress: Optional[StageProgress] = None,
    keep_going: bool = False,
    remote: "Optional[RemoteSpec]" = None,
    local: bool = True,
    local_checks: bool = False,
) -> Analysis:
    """Run one configuration ``repeat`` times; find where the outputs start to differ, and why.

    (Over 80 lines for its argument list and their documentation; the steps are in
    :func:`_shake_runs`, :func:`measure_local` and :func:`lar_prec.jitter.shake_verdict`.)

    Jitter is any difference from run 1: the default threshold is bitwise equality (0). Roots
    are the first variables that differ while their inputs are equal. With ``explain`` and
    jitter found, more runs tell the cause apart: for ``fast-run``, runs whose algorithm
    choices are pinned by a ``--fast-run-algo-policy`` cache written by the first of them
    ("algorithm choice differs between runs" when they agree); otherwise (or when pinning does
    not help) runs with ``--reproducible`` ("non-reproducible kernel" when they agree);
    "neither ..." when nothing removes the jitter.

    Args:
        repeat: number of runs of ``config`` (at least 2).
        config: ``default``, ``reproducible`` or ``fast-run``.
        jobs: runs at once. Runs sharing the cores time their algorithms differently, which
            is part of what ``fast-run`` jitter is about; 1 is the conservative choice.
        threshold: 0 (bitwise, the default), a number, ``"auto"`` or ``"band"``.
        local: when there is jitter, measure the local error of every operator: the model
            run once more under ``config`` (with the same ``lar`` binary, on the same
            ``remote`` device) on run 1's values of each operator's inputs; any
            local difference (threshold 0) or one over the operator's floor ("auto") is made
            there. ``"auto"`` then roots by local error.
        Other arguments as :func:`naive_vs_default`.

    Raises:
        As :func:`naive_vs_default`.
    """
    if repeat < 2:
        raise UsageError(f"--repeat must be at least 2 to see jitter, got {repeat}")
    if config not in SHAKE_CONFIGS:
        raise UsageError(f"shake --config must be one of {', '.join(SHAKE_CONFIGS)}, got {config!r}")


    spec = parse_threshold_spec(threshold)
    model_path, adir, prepared, lar_obj = prepare_analysis(model, inputs, out, "shake", seed, lar, timeout, extra_flags,
                                                   remote)
    off = off_reason(local=local)
    sessions = open_remote(remote, model_path, prepared)
    common = dict(lar=lar_obj, timeout=timeout, extra_flags=extra_flags, jobs=jobs, progress=progress,
                  keep_going=keep_going, remote=sessions)
    try:
        runs, dumps, tree, differing, cause, steps, all_runs = _shake_runs(
            model_path, prepared, adir, config, repeat, spec.threshold, explain, common, progress)
    finally:
        if sessions is not None:
            sessions.close()
    bitwise = tree.threshold.value == 0
    runs_differing = max(differing.values(), default=0)

    la, off = (None, off or "local error not measured: no jitter") if not tree.diverged else measure_local(
        model_path, dumps[0], dumps[1], get_config(config).with_extra(tuple(extra_flags)), adir, off,
        checks=local_checks, bitwise=bitwise, reference_config=get_config(config).with_extra(
            tuple(extra_flags)), timeout=timeout, lar=lar_obj, remote=remote)
    roots_by = spec.roots_by(la is not None)
    roots = [(r.name, r.opr_type, r.id) for r in tree.roots()] if tree.diverged else []
    if tree.diverged and la is not None and roots_by == "local":
        to_report = report_ids(la)[1]
        roots = [(r.name, r.opr_type, to_report.get(r.id, r.id)) for r in la.verdict.roots]
    verdict = shake_verdict(tree, roots, runs_differing, repeat, config, cause, bitwise=bitwise)
    env_extra, env_notes = environment_extra(all_runs)
    extra = {"analysis_dir": str(adir), "repeat": repeat, "config": config, "inputs": prepared.to_json(),
             "explanation": steps, **env_extra}
    report = from_tree(tree, command="shake", runs=all_runs, model=str(model_path), verdict=verdict, cause=cause,
                       notes=env_notes, extra=extra, local=la, roots_by=roots_by, local_off=off,
                       runs_differing=differing)
    json_path, html_path = write_reports(report, adir, html)
    return Analysis("shake", adir, report, tree, tuple(all_runs), json_path, html_path)


def _shake_runs(model_path: Path, prepared: PreparedInputs, adir: Path, config: str, repeat: int,
                thr_spec: Optional[Threshold], explain: bool, common: Dict[str, object],
                progress: Optional[StageProgress]) -> tuple:
    """shake's runs, their comparison with run 1 and, with jitter and ``explain``, the reruns
    that tell its cause; returns (runs, dumps, tree, differing, cause, steps, all runs)."""
    plan = [Planned(config, f"{config}-{k}") for k in range(1, repeat + 1)]
    runs = run_plan(model_path, prepared, plan, adir, **common)  # type: ignore[arg-type]
    dumps = [r.dump_dir for r in runs]
    tree, differing = jitter(dumps, thr_spec, progress)  # type: ignore[arg-type]
    cause: Optional[str] = None
    steps: List[Dict[str, object]] = []
    all_runs = list(runs)
    if tree.diverged and explain:
        cause, steps, more = _explain(model_path, prepared, adir, config, repeat, common)
        all_runs += more
    return runs, dumps, tree, differing, cause, steps, all_runs


def _explain(model: Path, prepared: PreparedInputs, adir: Path, config: str, repeat: int,
             common: Dict[str, object]) -> Tuple[str, List[Dict[str, object]], List[RunResult]]:
    """Rerun as needed to tell the cause of jitter apart; returns (cause, steps, runs)."""
    steps: List[Dict[str, object]] = []
    more: List[RunResult] = []
    n = max(2, min(repeat, 3))
    if "--fast-run" in get_config(config).flags:
        # The first pinned run profiles and writes the cache; the others load it, so every
        # algorithm choice is the same. Agreement then means the choice was the cause.
        cache: Union[Path, str] = adir / "fast-run-algo-policy.cache"
        sessions = common.get("remote")
        if sessions is not None:  # the cache lives where load_and_run runs
            cache = f"{sessions.get().remote_dir}/{adir.name}-fast-run-algo-policy.cache"  # type: ignore[attr-defined]
        flags = ("--fast-run-algo-policy", str(cache))
        first = run_plan(model, prepared, [Planned(config, f"{config}-pinned-1", extra_flags=flags)], adir,
                          **{**common, "jobs": 1})  # type: ignore[arg-type]
        rest = run_plan(model, prepared, [Planned(config, f"{config}-pinned-{k}", extra_flags=flags)
                                           for k in range(2, n + 1)], adir, **common)  # type: ignore[arg-type]
        pinned = first + rest
        more += pinned
        differ, nvars = any_difference([r.dump_dir for r in pinned])  # type: ignore[misc]
        steps.append({"step": "fast-run with algorithm choices pinned by --fast-run-algo-policy",
                      "cache": str(cache), "runs": [r.label for r in pinned], "jitter": differ,
                      "vars_differing": nvars})
        if not differ:
            return CAUSE_ALGO, steps, more
    if config != "reproducible":
        rep = run_plan(model, prepared, [Planned("reproducible", f"reproducible-{k}") for k in range(1, n + 1)],
                        adir, **common)  # type: ignore[arg-type]
        more += rep
        differ, nvars = any_difference([r.dump_dir for r in rep])  # type: ignore[misc]
        steps.append({"step": "--reproducible", "runs": [r.label for r in rep], "jitter": differ,
                      "vars_differing": nvars})
        if not differ:
            return CAUSE_KERNEL, steps, more
    return CAUSE_NEITHER, steps, more
