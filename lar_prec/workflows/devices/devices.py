"""``lar-prec devices``: the same configuration on several targets, against one naive reference.

Each target (this machine, ``ssh:...``, ``adb:...``) gets one worker thread; its runs are
fresh processes on that target (remote ones through :mod:`lar_prec.runremote`, model and
inputs pushed once). The reference is the naive run (``MGB_USE_MEGDNN_DBG=2``) of the
reference target (default: this machine). Every target's run is compared with it: by var id
when both dumps hold the same vars, else by var name (:func:`lar_prec.namepair.pair_by_name`,
packed layouts brought back to NCHW with :mod:`lar_prec.compare.relayout`), so targets whose
load_and_run rewrote the graph differently still pair.

The report (``"command": "devices"``) holds the design's keys for the target that diverges
most (its vars and roots), and ``targets``: per target its verdict, final-output error,
first root, environment, ``max_err_by_var`` (reference var id -> max_err; null: not finite)
and ``not_ok_status`` (reference var id -> status, for each var of ``not_ok``), which the HTML
page (``lar_prec/report/page/report.js``) draws as a target-by-variable table.
"""
from __future__ import annotations

import logging
import math
import os
import shutil
import threading
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence, Tuple, Union

from lar_prec._lazy import numpy as np  # imported on first use (start-up time)
from lar_prec.errors import AnalysisInterrupted, LarPrecError, UsageError
from lar_prec.run.config import LoadAndRun
from lar_prec.run.once import run_once
from lar_prec.run.record import RunResult
from lar_prec.run.settings import Settings
from lar_prec.run.proc import interrupt_active_runs, reset_interrupt
from lar_prec.run.device import RemoteSessions, RemoteSpec, device_files
from lar_prec.run.device import DEFAULT_REMOTE_LAR
from lar_prec.compare.records import AGREEING
from lar_prec.dumps.folder import DumpFolder
from lar_prec.dumps.binary import dump_file_name, write_binary_dump
from lar_prec.dumps.titles import format_title
from lar_prec.compare.namepair import pair_by_name
from lar_prec.compare.relayout import to_plain
from lar_prec.diagnosis.tree import VarTree
from lar_prec.report.records import _finite
from lar_prec.run.config import get_config
from lar_prec.report.model import from_tree

log = logging.getLogger(__name__)

LOCAL = "local"
from lar_prec.records import PathLike  # noqa: E402
from lar_prec.workflows.common.analysis import (Analysis, StageProgress, Steps, dropped_note, environment_extra, prepare,
                                       ran, reference_flags, write_reports)
from lar_prec.compare.threshold import parse_threshold_spec


@dataclass(frozen=True)
class Target:
    """One place to run: ``local`` (spec None) or a device."""

    name: str  # "local" or the --remote value
    spec: Optional[RemoteSpec]

    @property
    def label(self) -> str:
        """A folder-safe label for its runs."""
        return "".join(c if c.isalnum() or c in "-_." else "_" for c in self.name)


def parse_targets(remotes: Sequence[Union[str, RemoteSpec]], *, local: bool, lar: Optional[str] = None,
                  remote_dir: Optional[str] = None, keep_remote: bool = False) -> List[Target]:
    """Targets of ``--remote`` values (``TARGET`` or ``TARGET=LAR_PATH`` for a per-device
    load_and_run; ``--lar`` otherwise) and ``--local``."""

    out: List[Target] = [Target(LOCAL, None)] if local else []
    for r in remotes:
        if isinstance(r, RemoteSpec):
            spec = r
        else:
            target, eq, path = str(r).partition("=")
            spec = RemoteSpec(target, (path if eq else lar) or DEFAULT_REMOTE_LAR, remote_dir, keep_remote)
        out.append(Target(spec.target, spec))
    names = [t.name for t in out]
    dup = sorted({n for n in names if names.count(n) > 1})
    if dup:
        raise UsageError(f"devices: target {dup[0]!r} is given twice")
    if not out:
        raise UsageError("devices: no target; give --remote ssh:[user@]host[:port] or adb[:serial] (repeatable) "
                         "and/or --local")
    return out


def _reference(targets: List[Target], reference: Optional[str]) -> Target:
    ref = reference or LOCAL
    for t in targets:
        if t.name == ref:
            return t
    if ref == LOCAL:
        return Target(LOCAL, None)  # the naive run only; this machine is not a compared target
    names = list(dict.fromkeys([*(t.name for t in targets), LOCAL]))  # local is always a reference
    raise UsageError(f"--reference {ref!r} is not one of the targets; expected one of {', '.join(names)}")


# --------------------------------------------------------------------------- comparing one target


def same_vars(a: Any, b: Any) -> bool:
    if set(a.ids) != set(b.ids):
        return False
    return all(a[i].var.name == b[i].var.name and a[i].var.shape == b[i].var.shape for i in a.ids)


def renamed_copy(ref_dir: Path, other_dir: Path, dest: Path, ref_dest: Path,
                 pairs: Optional[Sequence[Tuple[int, int]]] = None,
                 layout_format: Optional[str] = None) -> Tuple[int, int, int]:
    """Write the vars of ``other_dir`` that pair by name with ``ref_dir`` into ``dest``, under the
    reference's var ids and titles (values brought to the reference's layout), and the same
    vars of the reference into ``ref_dest`` (links), so the two compare by id and a var with
    no partner (fused or folded away by the rewrite) is left out instead of "missing".
    ``pairs`` ((reference id, other id), ...): pairs made otherwise (``diff`` pairs by the
    stable operator key) instead of by name. ``layout_format``: the operator format the other
    side's graph was rewritten to (``NCHW44``), which settles a shape two layouts fit.
    Returns (reference vars, paired, written)."""
    ra, rb = DumpFolder(ref_dir), DumpFolder(other_dir)
    infos_a = [d.var for d in ra]
    if pairs is None:
        pairs = _name_pairs(ra, [d.var for d in rb])
    dest.mkdir(parents=True, exist_ok=True)
    ref_dest.mkdir(parents=True, exist_ok=True)
    written = 0
    for ida, idb in pairs:
        da, db = ra[ida], rb[idb]
        try:
            arr = db.array()
            if tuple(arr.shape) != tuple(da.var.shape):
                arr, _det = to_plain(arr, da.var.shape, fmt=layout_format, layout=db.var.layout)
                if arr is None:
                    continue
            arr = np.ascontiguousarray(arr, dtype=da.array().dtype)
            write_binary_dump(dest / dump_file_name(ida), arr, format_title(da.var, da.inputs), da.var.dtype)
        except (LarPrecError, ValueError, TypeError) as exc:
            log.info("devices: var %s (%s) not compared: %s", ida, da.var.name, exc)
            continue
        src, link = da.path, ref_dest / da.path.name
        try:
            os.link(src, link)
        except OSError:
            shutil.copyfile(src, link)
        written += 1
    return len(infos_a), len(pairs), written


def _name_pairs(ra: Any, infos_b: List[Any]) -> List[Tuple[int, int]]:
    pairing = pair_by_name([d.var for d in ra], infos_b)
    pairs = [(p.a, p.b) for p in pairing.pairs]
    # model inputs and constants take no part in name pairing; the same name and shape is theirs
    by_name_b = {v.name: v for v in infos_b}
    for s in pairing.skipped_a:
        vb = by_name_b.get(s.name)
        if vb is not None and vb.shape == ra[s.id].var.shape:
            pairs.append((s.id, vb.id))
    return pairs


def _compare(ref: RunResult, run: RunResult, threshold: Any, work: Path) -> Tuple[Any, Dict[str, Any]]:
    """The VarTree of ``run`` against the reference, and how vars were paired: by ``id``, or by
    ``name`` through two folders under ``work/by-name/<label>/`` (kept: they are what was compared)."""

    a, b = ref.dump_dir, run.dump_dir
    assert a is not None and b is not None
    if same_vars(DumpFolder(a), DumpFolder(b)):
        return VarTree.from_folders(a, b, threshold=threshold), {"how": "id"}
    base = work / "by-name" / run.label
    n_ref, n_pairs, written = renamed_copy(a, b, base / "target", base / "reference")
    info = {"how": "name", "dir": str(base), "reference_vars": n_ref, "paired": n_pairs, "compared": written}
    return VarTree.from_folders(base / "reference", base / "target", threshold=threshold), info


def final_outputs(dump_dir: Path) -> List[int]:
    """The vars of a dump no other dumped var consumes: the model's outputs. Taken from the
    reference's whole graph, so a var whose consumer a target fused away is not one."""

    f = DumpFolder(dump_dir)
    used = {i for vid in f.ids for i in f.inputs_of(vid)}
    return [vid for vid in f.ids if vid not in used]


def _target_entry(t: Target, run: RunResult, tree: Any, pairing: Dict[str, Any], is_ref: bool,
                  output_ids: Sequence[int]) -> Dict[str, Any]:

    by_id = {d.id: d for d in tree.diffs}
    outs = [by_id[i] for i in output_ids if i in by_id]
    errs = [d.max_err for d in outs if d.max_err is not None and math.isfinite(d.max_err)]
    roots = tree.roots()
    root = roots[0] if roots else None
    not_ok = [d.id for d in tree.diffs if d.status not in AGREEING]
    final = max(errs) if errs else None
    verdict = (f"diverges: {len(not_ok)} of {len(tree.diffs)} variables not ok"
               + (f"; root {root.name} ({root.opr_type}, var {root.id})" if root else "")) if tree.diverged \
        else f"agrees: all {len(tree.diffs)} variables within the threshold"
    return {"target": t.name, "label": run.label, "reference": is_ref, "run_dir": str(run.dir),
            "pairing": pairing["how"], "pairing_detail": pairing,
            "verdict": verdict, "diverged": bool(tree.diverged), "final_outputs": [d.id for d in outs],
            "final_outputs_not_compared": [i for i in output_ids if i not in by_id],
            "final_output_max_err": _finite(final),
            "root": None if root is None else {"id": int(root.id), "name": root.name, "opr_type": root.opr_type,
                                               "max_err": _finite(root.max_err)},
            "n_roots": len(roots), "n_not_ok": len(not_ok), "not_ok": not_ok,
            "environment": dict(run.environment),
            "max_err_by_var": {str(d.id): _finite(d.max_err) for d in tree.diffs},
            "not_ok_status": {str(d.id): d.status for d in tree.diffs if d.status not in AGREEING}}


# --------------------------------------------------------------------------- the workflow


def devices(
    model: PathLike,
    inputs: Union[str, Sequence[str]],
    targets: Sequence[Target],
    *,
    reference: Optional[str] = None,
    config: str = "default",
    out: Optional[PathLike] = None,
    threshold: Any = "auto",
    lar: Union[LoadAndRun, str, None] = None,
    timeout: Optional[float] = None,
    extra_flags: Sequence[str] = (),
    html: bool = True,
    seed: int = 0,
    progress: Optional[StageProgress] = None,
) -> Any:
    """Run ``config`` on every target (one worker each), compare each with the reference
    target's naive run, and report per target. ``lar`` is this machine's load_and_run; each
    device's is in its RemoteSpec. ``progress``: the runs under way and each one ended
    (:data:`lar_prec.workflows.common.analysis.StageProgress`). Returns a :class:`lar_prec.workflows.Analysis`.

    Raises:
        UsageError (exit 2), RunError/RemoteError (exit 3: the first failed run, after every
        target's runs ended), AnalysisInterrupted (130: every run stopped, local and remote).
    """
    return analyse(Settings(model=model, inputs=inputs, out=out, threshold=threshold, lar=lar, timeout=timeout,
                            extra_flags=tuple(extra_flags), seed=seed, html=html, progress=progress),
                   targets, reference=reference, config=config)


def analyse(settings: Settings, targets: Sequence[Target], *, reference: Optional[str] = None,
            config: str = "default") -> Any:
    """:func:`devices` from one :class:`~lar_prec.run.settings.Settings` record (the CLI's way
    in; its ``lar`` is this machine's load_and_run, its ``remote``, ``jobs`` and local error are
    not read: the targets say where, one worker each)."""
    st = settings  # (s is a session below)
    threshold, timeout, extra_flags = st.threshold, st.timeout, st.extra_flags

    parse_threshold_spec(threshold)  # a bad value fails before anything runs
    get_config(config)
    targets = list(targets)
    ref = _reference(targets, reference)
    prep = prepare(st, "devices")
    model_path, adir, prepared, lar_obj = prep.model, prep.dir, prep.inputs, prep.lar
    naive_flags, dropped = reference_flags(extra_flags)
    jobs: List[Tuple[Target, List[Tuple[str, str]]]] = []
    for t in targets + ([ref] if ref not in targets else []):
        plan = [("naive", f"{t.label}-naive")] if t is ref else []
        if t in targets and not (plan and config == "naive"):  # the reference's naive run is its run too
            plan.append((config, f"{t.label}-{config}"))
        jobs.append((t, plan))
    sessions: Dict[str, RemoteSessions] = {
        t.name: RemoteSessions(t.spec, device_files(model_path, prepared)) for t, _ in jobs if t.spec is not None}
    results: Dict[str, RunResult] = {}
    errors: List[BaseException] = []
    lock = threading.Lock()
    steps = Steps(st.progress, "runs", sum(len(plan) for _, plan in jobs))

    def work(t: Target, plan: List[Tuple[str, str]]) -> None:
        for cfg, label in plan:
            steps.start(label)
            try:
                # the naive reference makes no algorithm choice (and refuses fast-run profiling)
                flags = naive_flags if cfg == "naive" else tuple(extra_flags)
                r = run_once(model_path, prepared, cfg, adir, lar=lar_obj, timeout=timeout, extra_flags=flags,
                             label=label, remote=sessions.get(t.name), model_mode=prep.mode)
            except LarPrecError as exc:
                with lock:
                    errors.append(exc)
                return
            finally:
                steps.stop(label)
            with lock:
                results[label] = r
            steps.done(ran(r))

    pool = ThreadPoolExecutor(max_workers=len(jobs), thread_name_prefix="lar-prec-target")
    try:
        futures = [pool.submit(work, t, plan) for t, plan in jobs]
        for f in futures:
            f.result()
    except KeyboardInterrupt:
        interrupt_active_runs()
        for s in sessions.values():
            s.interrupt()
        pool.shutdown(wait=True)
        reset_interrupt()
        raise AnalysisInterrupted(f"interrupted; every run was stopped and its folder is kept in {adir}",
                                  analysis_dir=adir) from None
    finally:
        pool.shutdown(wait=True)
        for s in sessions.values():
            s.close()
    if errors:
        raise errors[0]
    return _report(model_path, adir, prepared, targets, ref, config, results, threshold, st.html, dropped)


def _report(model_path: Path, adir: Path, prepared: Any, targets: List[Target], ref: Target, config: str,
            results: Dict[str, RunResult], threshold: Any, html: bool, dropped: Sequence[str] = ()) -> Any:
    """Compare every target with the reference and write report.json / report.html."""
    from dataclasses import replace


    naive = results[f"{ref.label}-naive"]
    entries, trees, notes = [], [], []
    outputs = final_outputs(naive.dump_dir)  # type: ignore[arg-type]
    thr = threshold
    for t in targets:
        run = results[f"{t.label}-{config}"]
        tree, pairing = _compare(naive, run, thr, adir)
        thr = tree.threshold if threshold in (None, "auto") and thr in (None, "auto") else thr
        trees.append((t, run, tree))
        entries.append(_target_entry(t, run, tree, pairing, t.name == ref.name, outputs))
        if pairing["how"] == "name":
            notes.append(f"{t.name}: its graph differs from the reference's; {pairing['compared']} of "
                         f"{pairing['reference_vars']} reference vars paired by name and compared, the others "
                         f"(fused, folded or without a convertible layout) are left out")
    # the design's vars/roots: the target that diverges most
    k = max(range(len(trees)), key=lambda i: (trees[i][2].diverged, entries[i]["n_not_ok"],
                                             entries[i]["final_output_max_err"] or 0.0, not entries[i]["reference"]))
    worst_t, _run, worst_tree = trees[k]
    bad = [e for e in entries if e["diverged"]]
    if bad:
        verdict = (f"{len(bad)} of {len(entries)} targets diverge from the naive run on {ref.name}: "
                   + "; ".join(f"{e['target']} (final-output max_err {e['final_output_max_err']}"
                               + (f", root {e['root']['name']}" if e["root"] else "") + ")" for e in bad))
    else:
        verdict = f"all {len(entries)} targets agree with the naive run on {ref.name} ({config})"
    runs = [naive] + [r for _t, r, _tree in trees if r is not naive]
    env_extra, env_notes = environment_extra([r for _t, r, _tree in trees])
    shown = (f"vars and roots are those of the target that diverges most: {worst_t.name}" if bad
             else f"vars are those of target {worst_t.name}")
    if dropped:
        notes.append(dropped_note(dropped, "the targets"))
    notes = [shown] + notes + env_notes
    extra = {"analysis_dir": str(adir), "inputs": prepared.to_json(), "config": config, "reference": ref.name,
             "shown_target": worst_t.name, "targets": entries, **env_extra}
    report = from_tree(worst_tree, command="devices", runs=runs, model=str(model_path), verdict=verdict,
                       notes=notes, extra=extra)
    report = replace(report, verdict=verdict)
    json_path, html_path = write_reports(report, adir, html)
    return Analysis("devices", adir, report, worst_tree, tuple(runs), json_path, html_path)
