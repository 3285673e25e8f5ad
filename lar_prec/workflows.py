"""The two workflows users come for, built on the runner, the readers and the variable tree.

- :func:`naive_vs_default`: the reference kernels (``MGB_USE_MEGDNN_DBG=2``) against the
  default ones; which operator computes wrongly?
- :func:`shake`: the same model and input N times; does the output jitter, where does the
  jitter start, and what removes it (``--reproducible``, algorithm choices pinned by a
  ``--fast-run-algo-policy`` cache)?

Each call makes one analysis folder holding the prepared inputs, one folder per run (dumps
and ``run.json``), ``report.json`` and ``report.html``, and returns an :class:`Analysis`.
Nothing already on disk is overwritten, and a failing or interrupted run leaves every
folder consistent.

Example::

    from lar_prec.workflows import naive_vs_default
    a = naive_vs_default("model.mge", ["data:x.npy"], out="analysis")
    print(a.report.verdict, [r.id for r in a.report.roots], a.exit_code)
"""
from __future__ import annotations

import logging
import math
import os
from concurrent.futures import CancelledError, Future, ThreadPoolExecutor
from dataclasses import dataclass, replace
from pathlib import Path
import threading
from typing import TYPE_CHECKING, Callable, Dict, List, Optional, Sequence, Tuple, Union

from lar_prec.jitter import any_difference, jitter, merge_comparisons, shake_verdict  # noqa: F401  (merge_comparisons: public here before)
from lar_prec.errors import AnalysisInterrupted, LarPrecError, UsageError
from lar_prec.runner import (
    LoadAndRun,
    PreparedInputs,
    RunResult,
    check_extra_flags,
    check_file,
    check_timeout,
    get_config,
    interrupt_active_runs,
    new_analysis_dir,
    plan_inputs,
    reset_interrupt,
    resolve_load_and_run,
    run_once,
    write_inputs,
)

if TYPE_CHECKING:  # loaded while load_and_run runs (see _prefetch_analysis_modules)
    from lar_prec.runremote import RemoteSessions, RemoteSpec
    from lar_prec.compare import Comparison, Threshold, VarDiff
    from lar_prec.report import Report
    from lar_prec.vartree import VarTree

log = logging.getLogger(__name__)

from lar_prec.records import PathLike  # noqa: E402
#: ``progress(stage, done, total)``: stage is ``"runs"`` or ``"compare"``
Progress = Callable[[str, int, int], None]

CAUSE_ALGO = "algorithm choice differs between runs"
CAUSE_KERNEL = "non-reproducible kernel"
CAUSE_NEITHER = ("neither algorithm choice nor a non-reproducible kernel: "
                 "look at the input, uninitialised memory or random operators")

SHAKE_CONFIGS = ("default", "reproducible", "fast-run")


#: numpy by name: lar_prec.compare and iodump import it only on first use
_ANALYSIS_MODULES = ("numpy", "lar_prec.compare", "lar_prec.vartree", "lar_prec.report", "rich.console", "rich.table")


_prefetch_started = threading.Event()


def _prefetch_analysis_modules() -> None:
    """Import the comparison and report modules in the background, once.

    The main process only waits while load_and_run runs, and these imports (numpy-heavy
    compare, networkx, rich) are most of the analysis' own time on small models. Started
    when the first run has started, so it does not delay that run.
    """
    if _prefetch_started.is_set():
        return
    _prefetch_started.set()

    def load() -> None:
        import importlib

        for name in _ANALYSIS_MODULES:
            try:
                importlib.import_module(name)
            except ImportError:  # rich is optional for the library; the main thread will say so
                pass

    threading.Thread(target=load, name="lar-prec-prefetch", daemon=True).start()


@dataclass(frozen=True)
class Analysis:
    """One finished analysis: its folder, its report, its tree and its runs."""

    command: str
    dir: Path
    report: Report
    tree: VarTree
    runs: Tuple[RunResult, ...]
    json_path: Path
    html_path: Optional[Path]

    @property
    def exit_code(self) -> int:
        """0 no divergence (no jitter), 1 divergence (jitter) found."""
        from lar_prec.report import exit_code

        return exit_code(self.report)


@dataclass(frozen=True)
class _Planned:
    config: str
    label: str
    text_dump: bool = False
    extra_flags: Tuple[str, ...] = ()


def _check_threshold(threshold: object) -> None:
    """Refuse a bad threshold before any run, without importing compare (numpy) on the
    start-up path; compare.parse_threshold applies the same rules later."""
    if threshold is None or isinstance(threshold, (int, float)) or type(threshold).__name__ == "Threshold":
        value = threshold if isinstance(threshold, (int, float)) else 0.0
    elif isinstance(threshold, str):
        if threshold.strip().lower() in ("auto", "band"):
            return
        try:
            value = float(threshold)
        except ValueError:
            raise UsageError(f"threshold must be 'auto', 'band' or a number such as 1e-3, got {threshold!r}") from None
    else:
        raise UsageError(f"threshold must be 'auto', 'band' or a number such as 1e-3, got {threshold!r}")
    if not (value >= 0 and math.isfinite(value)):
        raise UsageError(f"threshold must be a finite number >= 0, got {threshold!r}")


def _check_model(model: PathLike) -> Path:
    return check_file(model, "model file")


def _run_plan(model: Path, prepared: PreparedInputs, plan: Sequence[_Planned], adir: Path, *,
              lar: Optional[LoadAndRun], timeout: Optional[float], extra_flags: Sequence[str], jobs: int,
              progress: Optional[Progress], keep_going: bool = False,
              remote: "Optional[RemoteSessions]" = None) -> List[RunResult]:
    """Run every planned configuration, up to ``jobs`` at once, each in a fresh process.

    After the first failure no further run starts (runs already under way end, so every
    run.json is final) and the failure is raised; with ``keep_going`` every run is made and
    the first failure raised at the end. Ctrl-C kills every run under way and raises
    AnalysisInterrupted naming the folder. With ``remote`` the runs go to that device.
    """
    results: List[Optional[RunResult]] = [None] * len(plan)
    done = 0
    failed = threading.Event()
    if progress:
        progress("runs", 0, len(plan))

    def one(i: int) -> Optional[RunResult]:
        # checked by the worker itself: a queued run must not slip in while the main thread
        # is still to learn of the failure
        if failed.is_set() and not keep_going:
            return None
        p = plan[i]
        try:
            return run_once(model, prepared, p.config, adir, lar=lar, text_dump=p.text_dump, timeout=timeout,
                            extra_flags=tuple(extra_flags) + p.extra_flags, label=p.label,
                            on_started=_prefetch_analysis_modules, remote=remote)
        except LarPrecError:
            failed.set()
            raise

    first_error: Optional[BaseException] = None
    # One path for any ``jobs``: runs go to worker threads so the main thread stays free to
    # take Ctrl-C and kill every run under way (their sessions do not get the terminal's SIGINT).
    pool = ThreadPoolExecutor(max_workers=max(1, jobs), thread_name_prefix="lar-prec-run")
    futures: Dict[Future, int] = {}
    try:
        futures = {pool.submit(one, i): i for i in range(len(plan))}
        for fut, i in futures.items():
            try:
                results[i] = fut.result()
            except CancelledError:
                continue
            except LarPrecError as exc:
                if first_error is None:
                    first_error = exc
                    if not keep_going:
                        for other in futures:  # queued runs are pointless now
                            other.cancel()
                continue
            if results[i] is None:  # skipped after a failure
                continue
            done += 1
            if progress:
                progress("runs", done, len(plan))
    except KeyboardInterrupt:
        for fut in futures:
            fut.cancel()
        interrupt_active_runs()
        if remote is not None:
            remote.interrupt()  # interrupt_active_runs does not know the device's runs
        pool.shutdown(wait=True)
        reset_interrupt()
        raise AnalysisInterrupted(
            f"interrupted; runs were stopped and every run folder is kept in {adir} (see each run.json)",
            analysis_dir=adir) from None
    pool.shutdown(wait=True)
    if first_error is not None:
        raise first_error
    return [r for r in results if r is not None]


def _prepare(model: PathLike, inputs: Union[str, Sequence[str]], out: Optional[PathLike], command: str,
             seed: int, lar: Union[LoadAndRun, str, None], timeout: Optional[float] = None,
             extra_flags: Sequence[str] = (), remote: "Optional[RemoteSpec]" = None,
             ) -> Tuple[Path, Path, PreparedInputs, Optional[LoadAndRun]]:
    """Check everything the user gave, then claim the analysis folder and write the inputs:
    a usage error leaves no folder behind. No local load_and_run is chosen for a remote analysis."""
    model_path = _check_model(model)
    check_timeout(timeout)
    check_extra_flags(extra_flags)
    lar_obj = resolve_load_and_run(lar) if remote is None else None
    planned = plan_inputs(inputs, model_path, seed=seed)
    adir = new_analysis_dir(out, command).resolve()
    prepared = write_inputs(planned, adir / "inputs")
    return model_path, adir, prepared, lar_obj


def environment_extra(runs: Sequence[RunResult]) -> Tuple[Dict[str, object], List[str]]:
    """The report's ``environment_differences`` (and ``remote``) keys and a note for runs that
    did not run in the same environment (CPU features, binary, MGB_* variables)."""
    from lar_prec.runenv import environment_differences

    diffs = environment_differences([(r.label, r.environment) for r in runs])
    extra: Dict[str, object] = {"environment_differences": diffs}
    targets = sorted({str(r.remote.get("target")) for r in runs if r.remote})
    if targets:
        extra["remote"] = targets[0] if len(targets) == 1 else targets
    notes = []
    if diffs:
        notes.append("the runs differ in environment: " + ", ".join(d["field"] for d in diffs)
                     + " (see environment_differences); part of a difference may come from there")
    return extra, notes


def _open_remote(remote: "Optional[RemoteSpec]", model: Path, prepared: PreparedInputs) -> "Optional[RemoteSessions]":
    from lar_prec.runremote import open_sessions

    return open_sessions(remote, model, prepared)


def _write_reports(report: Report, adir: Path, html: bool) -> Tuple[Path, Optional[Path]]:
    from lar_prec.report import write_html, write_json

    json_path = adir / "report.json"
    write_json(report, json_path)
    html_path = write_html(report, adir / "report.html") if html else None
    return json_path, html_path


def _compare_progress(progress: Optional[Progress]) -> Optional[Callable[[int, int], None]]:
    if progress is None:
        return None
    return lambda done, total: progress("compare", done, total)


def naive_vs_default(
    model: PathLike,
    inputs: Union[str, Sequence[str]],
    *,
    out: Optional[PathLike] = None,
    threshold: Union[str, float, Threshold, None] = "auto",
    lar: Union[LoadAndRun, str, None] = None,
    timeout: Optional[float] = None,
    extra_flags: Sequence[str] = (),
    text_dump: bool = False,
    html: bool = True,
    jobs: int = 1,
    seed: int = 0,
    progress: Optional[Progress] = None,
    keep_going: bool = False,
    remote: "Optional[RemoteSpec]" = None,
    local: bool = True,
    local_checks: bool = False,
) -> Analysis:
    """Run the naive reference and the default kernels, compare every variable, find roots.

    (Over 80 lines for its argument list and their documentation; the body is the analysis in
    its order: prepare, run, local error, compare, report.)

    Args:
        model: the ``.mge`` model.
        inputs: ``--input`` items (``name:file.npy``, ``name:{1,3,8,8}``, ``name:[1,2]``).
        out: the analysis folder (a non-empty one gets a new numbered subfolder);
            default ``./lar-prec-out/naive-vs-default-N``.
        threshold: ``"auto"`` (roots by local error when it was measured, else the dump-only
            band rule), ``"band"`` (the dump-only band rule always) or a number
            (``compare_binary_iodump -e``).
        lar: load_and_run binary (default: ``$LAR_PREC_LOAD_AND_RUN``, PATH, bundled).
        timeout: seconds before a run is killed with its process group.
        extra_flags: load_and_run flags for both runs (e.g. ``--fast-run``, layout options).
        text_dump: also make a ``--io-dump`` run (its own process) and use its dependency edges.
        html: write ``report.html`` next to ``report.json``.
        jobs: runs at once (naive and default are independent).
        seed: seed of random data for shape-only inputs.
        progress: ``progress(stage, done, total)`` hook.
        keep_going: make every run even after one failed (the first failure is still raised);
            by default no run starts after a failure.
        remote: a :class:`lar_prec.runremote.RemoteSpec`: every run on that device (model and
            inputs pushed once, dumps pulled into the run folders).
        local: measure the local error of every operator after the runs (one build and one
            run of the layerwise model, :mod:`lar_prec.localwire`); the layerwise model runs
            with the same load_and_run (``lar``) or on the same device (``remote``) as the
            default run. When it cannot run there, the report's notes say why.
        local_checks: also run the reference self-check and the test-fed check (two runs more).

    Raises:
        UsageError: bad model path, inputs, threshold or flags (exit 2).
        RunError: a load_and_run run failed (exit 3); its folder and run.json stay on disk.
        AnalysisInterrupted: Ctrl-C (exit 130); run folders stay consistent on disk.
    """
    _check_threshold(threshold)  # a bad value fails before anything runs
    model_path, adir, prepared, lar_obj = _prepare(model, inputs, out, "naive-vs-default", seed, lar, timeout,
                                                   extra_flags, remote)
    from lar_prec import localwire

    off = localwire.off_reason(local=local)
    naive_flags, dropped = reference_flags(extra_flags)
    sessions = _open_remote(remote, model_path, prepared)
    try:
        pin = localwire.pin_flags(extra_flags, adir, sessions) if off is None else ()
        plan = [_Planned("naive", "naive", extra_flags=naive_flags),
                _Planned("default", "default", extra_flags=tuple(extra_flags) + pin)]
        if text_dump:
            plan.append(_Planned("default", "default-text", text_dump=True, extra_flags=tuple(extra_flags)))
        runs = _run_plan(model_path, prepared, plan, adir, lar=lar_obj, timeout=timeout, extra_flags=(),
                         jobs=jobs, progress=progress, keep_going=keep_going, remote=sessions)
    finally:
        if sessions is not None:
            sessions.close()
    from lar_prec.report import from_tree
    from lar_prec.vartree import VarTree

    naive, default = runs[0], runs[1]
    text = runs[2].text_dump if text_dump else None
    la, off = _local(model_path, naive.dump_dir, default.dump_dir,  # type: ignore[arg-type]
                     get_config("default").with_extra(tuple(extra_flags) + pin), adir, off,
                     checks=local_checks, timeout=timeout, lar=lar_obj, remote=remote)
    cmp_thr, roots_by = localwire.roots_rule(threshold, la is not None)
    tree = VarTree.from_folders(naive.dump_dir, default.dump_dir, threshold=cmp_thr, text_dump=text,  # type: ignore[arg-type]
                                jobs=min(2, os.cpu_count() or 1), on_progress=_compare_progress(progress))
    env_extra, notes = environment_extra(runs)
    if dropped:
        notes.append(dropped_note(dropped, "the default run"))
        env_extra["naive_dropped_flags"] = list(dropped)
    if lar_obj is not None and lar_obj.is_bundled:
        notes.append("runs used the bundled load_and_run (megenginelite, LITE mode); var ids of a real "
                     "load_and_run in MDL mode can differ")
    report = from_tree(tree, command="naive-vs-default", runs=runs, model=str(model_path), notes=notes,
                       extra={"analysis_dir": str(adir), "inputs": prepared.to_json(), **env_extra})
    report = localwire.apply_local(report, la, roots_by=roots_by, off=off, tree=tree)
    json_path, html_path = _write_reports(report, adir, html)
    return Analysis("naive-vs-default", adir, report, tree, tuple(runs), json_path, html_path)


#: load_and_run flags that choose algorithms (profiling, or a cache of a profile's choices):
#: meaningless for the naive reference, and fatal there (MegDNN's check_attribute assertion)
_ALGO_CHOICE_FLAGS = {"fast_run": False, "full_run": False, "fast_run_algo_policy": True,
                      "fast_run_shared_batch_size": True}  # name -> takes a value


def reference_flags(flags: Sequence[str]) -> Tuple[Tuple[str, ...], Tuple[str, ...]]:
    """(flags for the naive reference run, the algorithm-choice flags dropped from them)."""
    kept: List[str] = []
    dropped: List[str] = []
    it = iter(flags)
    for f in it:
        name, has_value = f.lstrip("-").replace("-", "_"), "=" in f
        name = name.split("=", 1)[0]
        base = name[2:] if name.startswith("no") and name[2:] in _ALGO_CHOICE_FLAGS else name
        if not f.startswith("-") or base not in _ALGO_CHOICE_FLAGS:
            kept.append(f)
            continue
        dropped.append(f)
        if _ALGO_CHOICE_FLAGS[base] and not has_value and base == name:  # --flag VALUE: the value goes too
            value = next(it, None)
            if value is not None:
                dropped.append(value)
    return tuple(kept), tuple(dropped)


def dropped_note(dropped: Sequence[str], kept_by: str) -> str:
    """The report note for the flags :func:`reference_flags` took from the naive reference."""
    return (f"the naive reference ran without {' '.join(dropped)}: its reference kernels need no algorithm "
            f"choice (and MGB_USE_MEGDNN_DBG=2 refuses fast-run profiling); {kept_by} kept them")


def _local(model: Path, ref_dump: Path, test_dump: Path, config: object, adir: Path, off: Optional[str], *,
           checks: bool = False, bitwise: bool = False, reference_config: object = "naive",
           timeout: Optional[float] = None, lar: Optional[LoadAndRun] = None,
           remote: "Optional[RemoteSpec]" = None) -> Tuple[object, Optional[str]]:
    """Local errors into ``adir/local`` (None and why when off or when they could not be
    measured: the analysis by accumulated error stands either way). The layerwise runs go
    where the test run went: ``lar`` (its binary) or ``remote`` (its device)."""
    if off is not None:
        return None, off
    from lar_prec.localwire import run_local

    try:
        return run_local(model, ref_dump, test_dump, config, adir / "local", checks=checks,  # type: ignore[arg-type]
                         bitwise=bitwise, reference_config=reference_config, timeout=timeout,  # type: ignore[arg-type]
                         lar=lar, remote=remote), None
    except AnalysisInterrupted:
        raise
    except LarPrecError as exc:
        # e.g. a user's load_and_run that cannot run the layerwise model (an old binary, a
        # flag it lacks): a note, and the exit code of the analysis without local error
        where = (f" on {remote.target}" if remote is not None else
                 f" with {lar.describe()}" if lar is not None and not lar.is_bundled else "")
        log.warning("local error not measured: %s", exc)
        return None, f"local error could not be measured{where} ({type(exc).__name__}): {exc}"
    except KeyboardInterrupt:
        raise AnalysisInterrupted(f"interrupted while measuring local error; every run folder is kept in {adir}",
                                  analysis_dir=adir) from None


# ---------------------------------------------------------------------------------- shake


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
    progress: Optional[Progress] = None,
    keep_going: bool = False,
    remote: "Optional[RemoteSpec]" = None,
    local: bool = True,
    local_checks: bool = False,
) -> Analysis:
    """Run one configuration ``repeat`` times; find where the outputs start to differ, and why.

    (Over 80 lines for its argument list and their documentation; the steps are in
    :func:`_shake_runs`, :func:`_local` and :func:`lar_prec.jitter.shake_verdict`.)

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
    from lar_prec.compare import parse_threshold
    from lar_prec.report import from_tree

    from lar_prec import localwire

    is_band = isinstance(threshold, str) and threshold.strip().lower() == localwire.BAND
    thr_spec = parse_threshold("auto" if is_band else threshold)
    model_path, adir, prepared, lar_obj = _prepare(model, inputs, out, "shake", seed, lar, timeout, extra_flags,
                                                   remote)
    off = localwire.off_reason(local=local)
    sessions = _open_remote(remote, model_path, prepared)
    common = dict(lar=lar_obj, timeout=timeout, extra_flags=extra_flags, jobs=jobs, progress=progress,
                  keep_going=keep_going, remote=sessions)
    try:
        runs, dumps, tree, differing, cause, steps, all_runs = _shake_runs(
            model_path, prepared, adir, config, repeat, thr_spec, explain, common, progress)
    finally:
        if sessions is not None:
            sessions.close()
    thr_spec = tree.threshold
    runs_differing = max(differing.values(), default=0)

    la, off = (None, off or "local error not measured: no jitter") if not tree.diverged else _local(
        model_path, dumps[0], dumps[1], get_config(config).with_extra(tuple(extra_flags)), adir, off,
        checks=local_checks, bitwise=thr_spec.value == 0, reference_config=get_config(config).with_extra(
            tuple(extra_flags)), timeout=timeout, lar=lar_obj, remote=remote)
    _, roots_by = localwire.roots_rule("band" if is_band else threshold, la is not None)
    roots = [(r.name, r.opr_type, r.id) for r in tree.roots()] if tree.diverged else []
    if tree.diverged and la is not None and roots_by == "local":
        to_report = localwire.report_ids(la)[1]  # type: ignore[arg-type]
        roots = [(r.name, r.opr_type, to_report.get(r.id, r.id)) for r in la.verdict.roots]  # type: ignore[attr-defined]
    verdict = shake_verdict(tree, roots, runs_differing, repeat, config, cause, bitwise=thr_spec.value == 0)
    env_extra, env_notes = environment_extra(all_runs)
    extra = {"analysis_dir": str(adir), "repeat": repeat, "config": config, "inputs": prepared.to_json(),
             "explanation": steps, **env_extra}
    report = from_tree(tree, command="shake", runs=all_runs, model=str(model_path), verdict=verdict, cause=cause,
                       notes=env_notes, extra=extra)
    report = replace(report, vars=tuple(replace(v, runs_differing=differing.get(v.id, 0)) for v in report.vars))
    report = localwire.apply_local(report, la, roots_by=roots_by, off=off, tree=tree)
    if la is not None and roots_by == "local":
        report = replace(report, verdict=verdict + " [roots by local error]")
    json_path, html_path = _write_reports(report, adir, html)
    return Analysis("shake", adir, report, tree, tuple(all_runs), json_path, html_path)


def _shake_runs(model_path: Path, prepared: PreparedInputs, adir: Path, config: str, repeat: int,
                thr_spec: Optional[Threshold], explain: bool, common: Dict[str, object],
                progress: Optional[Progress]) -> tuple:
    """shake's runs, their comparison with run 1 and, with jitter and ``explain``, the reruns
    that tell its cause; returns (runs, dumps, tree, differing, cause, steps, all runs)."""
    plan = [_Planned(config, f"{config}-{k}") for k in range(1, repeat + 1)]
    runs = _run_plan(model_path, prepared, plan, adir, **common)  # type: ignore[arg-type]
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
        first = _run_plan(model, prepared, [_Planned(config, f"{config}-pinned-1", extra_flags=flags)], adir,
                          **{**common, "jobs": 1})  # type: ignore[arg-type]
        rest = _run_plan(model, prepared, [_Planned(config, f"{config}-pinned-{k}", extra_flags=flags)
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
        rep = _run_plan(model, prepared, [_Planned("reproducible", f"reproducible-{k}") for k in range(1, n + 1)],
                        adir, **common)  # type: ignore[arg-type]
        more += rep
        differ, nvars = any_difference([r.dump_dir for r in rep])  # type: ignore[misc]
        steps.append({"step": "--reproducible", "runs": [r.label for r in rep], "jitter": differ,
                      "vars_differing": nvars})
        if not differ:
            return CAUSE_KERNEL, steps, more
    return CAUSE_NEITHER, steps, more


# The third workflow, which option breaks precision, lives in its own module (runs, cross-graph
# analysis, explanation); importable from here like the other two.
from lar_prec.sweep import SweepAnalysis, sweep  # noqa: E402,F401
