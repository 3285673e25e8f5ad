"""``lar-prec naive-vs-default``: the reference kernels (``MGB_USE_MEGDNN_DBG=2``) against the
default ones; which operator computes wrongly?

Example::

    from lar_prec import naive_vs_default
    a = naive_vs_default("model.mge", ["data:x.npy"], out="analysis")
    print(a.report.verdict, [r.id for r in a.report.roots], a.exit_code)

Only what starts the runs is imported with this module: the comparison, the tree, the report
and the oracle (numpy) load on a thread while load_and_run runs
(:func:`~lar_prec.workflows.common.analysis.prefetch_analysis_modules`), so the first run starts at once.
"""
from __future__ import annotations

import os
import threading
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, List, Optional, Sequence, Tuple, Union

from lar_prec._lazy import LazyModule
from lar_prec.compare.threshold import Threshold, parse_threshold_spec
from lar_prec.diagnosis.local_plan import EarlyBuild, off_reason, pin_flags
from lar_prec.records import PathLike
from lar_prec.run.config import LoadAndRun, get_config
from lar_prec.run.device import open_sessions
from lar_prec.run.settings import Settings
from lar_prec.workflows.common.analysis import (Analysis, Planned, StageProgress, compare_progress, cross_device,
                                                dropped_note, environment_extra, measure_local, prepare,
                                                reference_flags, run_plan, write_reports)

if TYPE_CHECKING:
    from lar_prec.diagnosis import local as local_error, tree as var_tree
    from lar_prec.report import model as report_model
    from lar_prec.run.device import RemoteSpec
    from lar_prec.workflows.common import verdicts
else:  # loaded on a thread while the runs run (prefetch_analysis_modules)
    local_error, var_tree = LazyModule("lar_prec.diagnosis.local"), LazyModule("lar_prec.diagnosis.tree")
    report_model, verdicts = LazyModule("lar_prec.report.model"), LazyModule("lar_prec.workflows.common.verdicts")


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
    progress: Optional[StageProgress] = None,
    keep_going: bool = False,
    remote: "Optional[RemoteSpec]" = None,
    local: bool = True,
    local_checks: bool = False,
) -> Analysis:
    """Run the naive reference and the default kernels, compare every variable, find roots.

    The keywords make one :class:`~lar_prec.run.settings.Settings` record; :func:`analyse` runs it.

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
            run of the layerwise model, :mod:`lar_prec.diagnosis.local_analysis`); the layerwise model runs
            with the same load_and_run (``lar``) or on the same device (``remote``) as the
            default run. When it cannot run there, the report's notes say why.
        local_checks: also run the reference self-check and the test-fed check (two runs more).

    Raises:
        UsageError: bad model path, inputs, threshold or flags (exit 2).
        RunError: a load_and_run run failed (exit 3); its folder and run.json stay on disk.
        AnalysisInterrupted: Ctrl-C (exit 130); run folders stay consistent on disk.
    """
    return analyse(Settings(model=model, inputs=inputs, out=out, threshold=threshold, lar=lar, timeout=timeout,
                            extra_flags=tuple(extra_flags), seed=seed, jobs=jobs, keep_going=keep_going,
                            remote=remote, local=local, local_checks=local_checks, html=html, progress=progress),
                   text_dump=text_dump)


def analyse(settings: Settings, *, text_dump: bool = False) -> Analysis:
    """:func:`naive_vs_default` from one :class:`~lar_prec.run.settings.Settings` record (the
    CLI's way in): the analysis in its order: prepare, run, local error, compare, report."""
    s = settings
    spec = parse_threshold_spec(s.threshold)  # a bad value fails before anything runs
    prep = prepare(s, "naive-vs-default")
    adir, lar_obj, extra_flags, timeout = prep.dir, prep.lar, s.extra_flags, s.timeout

    off = off_reason(local=s.local)
    naive_flags, dropped = reference_flags(extra_flags)
    # the layerwise build's child loads MegEngine and the model (most of its time) while the
    # runs run; it plans on the reference's dump as soon as the naive run ends, and its thread
    # writes the feeds from that dump, so the layerwise run starts when the default run ends
    early = EarlyBuild(prep.model, adir / "local" / "layerwise", timeout) if off is None else None
    sessions = open_sessions(s.remote, prep.model, prep.inputs)
    try:
        pin = pin_flags(extra_flags, adir, sessions) if off is None else ()
        test_config = get_config("default").with_extra(tuple(extra_flags) + pin)

        def ended(rec) -> None:
            if early is not None and rec.label == "naive" and rec.dump_dir is not None:
                early.start(Path(rec.dump_dir), feeds_for=test_config.flags)

        plan = [Planned("naive", "naive", extra_flags=naive_flags),
                Planned("default", "default", extra_flags=tuple(extra_flags) + pin)]
        if text_dump:
            plan.append(Planned("default", "default-text", text_dump=True, extra_flags=tuple(extra_flags)))
        runs = run_plan(prep, plan, sessions=sessions, after=ended)
    except BaseException:
        if early is not None:
            early.cancel()
        raise
    finally:
        if sessions is not None:
            sessions.close()

    naive, default = runs[0], runs[1]
    text = runs[2].text_dump if text_dump else None
    # the tree needs nothing of local error: the dumps are compared on a thread once the
    # layerwise run has started (not before: nothing may delay its start; one worker: that run
    # has the other core)
    compared: List[Tuple[int, int]] = []  # the comparison's last progress, told afterwards
    go = threading.Event()

    def comparing(done: int, total: int) -> None:
        compared[:] = [(done, total)]

    def tree() -> "var_tree.VarTree":
        go.wait()
        return var_tree.VarTree.from_folders(naive.dump_dir, default.dump_dir, threshold=spec.for_comparison,  # type: ignore[arg-type]
                                             text_dump=text, jobs=1 if off is None else min(2, os.cpu_count() or 1),
                                             on_progress=comparing)

    pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="lar-prec-tree")
    try:
        tree_job = pool.submit(tree)
        try:
            la, off = measure_local(prep.model, naive.dump_dir, default.dump_dir, test_config, adir, off,  # type: ignore[arg-type]
                                    checks=s.local_checks, timeout=timeout, lar=lar_obj, remote=s.remote,
                                    progress=s.progress, early=early, on_started=go.set)
        finally:
            go.set()
        vtree = tree_job.result()
    finally:
        pool.shutdown(wait=False)  # Ctrl-C in measure_local: do not wait for the comparison
    tell = compare_progress(s.progress)
    if tell is not None and compared:  # said after local error's steps, in the order it always was
        tell(*compared[-1])
    env_extra, notes = environment_extra(runs)
    if dropped:
        notes.append(dropped_note(dropped, "the default run"))
        env_extra["naive_dropped_flags"] = list(dropped)
    if lar_obj is not None and lar_obj.is_bundled:
        notes.append("runs used the bundled load_and_run (megenginelite, LITE mode); var ids of a real "
                     "load_and_run in MDL mode can differ")
    report = report_model.from_tree(vtree, command="naive-vs-default", runs=runs, notes=notes,
                                    extra={"analysis_dir": str(adir), "inputs": prep.inputs.to_json(), **env_extra},
                                    local=la, roots_by=spec.roots_by(la is not None), local_off=off)
    report = replace(report, model=str(prep.model))  # for titles: a field, not an argument of the verdict's helpers
    # the graph that ran: the rewritten model the default run recorded, when it is here
    ran = Path(default.rewritten_models[-1][0]) if default.rewritten_models else prep.model
    ran = ran if ran.is_file() else prep.model
    report = verdicts.oracle_roots(report, ran, naive.dump_dir, default.dump_dir, la, local_error.layout_fmt(extra_flags),  # type: ignore[arg-type]
                          adir)
    report = verdicts.with_output_tolerance(report, extra_flags)
    if s.remote is None:  # a NaN/Inf output: MegEngine's --range names where it starts, without dumping
        report = verdicts.with_first_nonfinite(
            report, lar_obj, prep.model, prep.inputs.input_arg,
            [(get_config("default"), tuple(extra_flags), Path(default.dump_dir)),  # type: ignore[arg-type]
             (get_config("naive"), naive_flags, Path(naive.dump_dir))], adir / "range", timeout)  # type: ignore[arg-type]
    if cross_device(dropped):  # said in the verdict itself: a device's arithmetic is not a kernel bug
        report = replace(report, verdict=f"{cross_device(dropped)}; {report.verdict or report_model.auto_verdict(report)}")
    json_path, html_path = write_reports(report, adir, s.html)
    return Analysis("naive-vs-default", adir, report, vtree, tuple(runs), json_path, html_path)
