"""``lar-prec shake``: does the output jitter, where does the jitter start, why, and what
removes it?

A shake runs one configuration several times in fresh processes (``--repeat``), or under
each thread count (``--threads``), or with the input at each position of a batch
(``--batch-positions``); run 1 is the reference. Each later run is hashed per variable as it
finishes and keeps only what differs from run 1 (:mod:`.store`). Under fast-run every
run writes its own algorithm cache (:mod:`.algos`), so each operator's algorithm is
known per run. Every root and every var that is not ok gets a cause from one vocabulary
(:mod:`.causes`); local error compares like with like: each diverging run's operator
against run 1's on run 1's inputs, under that run's own algorithms.
"""
from __future__ import annotations

import shutil
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Dict, List, Mapping, Optional, Sequence, Set, Tuple, Union

from lar_prec.compare.threshold import Threshold, parse_threshold_spec
from lar_prec.diagnosis.local_analysis import LocalAnalysis, run_local
from lar_prec.diagnosis.local_plan import off_reason
from lar_prec.dumps.folder import DumpFolder
from lar_prec.errors import AnalysisInterrupted, LarPrecError, UsageError
from lar_prec.records import PathLike, json_number
from lar_prec.report.local import report_ids
from lar_prec.report.model import from_tree
from lar_prec.run.config import LoadAndRun, get_config
from lar_prec.run.device import RemoteSessions, RemoteSpec, open_sessions
from lar_prec.run.record import RunResult
from lar_prec.run.settings import Prepared, Settings
from lar_prec.workflows.shake import causes as jc
from lar_prec.workflows.shake import algos as algos_mod, modes
from lar_prec.workflows.common.analysis import (Analysis, Planned, StageProgress, environment_extra, prepare,
                                                run_plan, with_inputs, write_reports)
from lar_prec.workflows.shake.jitter import compare_runs, merge_comparisons, shake_verdict
from lar_prec.workflows.shake.modes import (BATCH_MODE, REPEAT_MODE, THREADS_MODE, ShakeRun, observer_check,
                                            parse_threads, plan_batch, plan_repeat, plan_threads, remove_tree,
                                            slice_dump)
from lar_prec.workflows.shake.store import RunStore, var_digest
from lar_prec.diagnosis.tree import VarTree

SHAKE_CONFIGS = ("default", "reproducible", "fast-run")
#: at most this many diverging runs (distinct algorithm sets) get a local-error run of their own
MAX_LOCAL_RUNS = 3


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
    keep_all: bool = False,
    threads: Union[str, Sequence[int], None] = None,
    batch_positions: Optional[int] = None,
    observer: bool = False,
    env: Optional[Mapping[str, Optional[str]]] = None,
) -> Analysis:
    """Run one configuration several times; find where the outputs start to differ, and why.

    Jitter is any difference from run 1: the default threshold is bitwise equality (0). Roots
    are the first variables that differ while their inputs are equal; each root, and each var
    that is not ok, gets a ``cause`` (``docs/jitter-causes.md``).

    Args:
        repeat: runs of ``config`` (at least 2) in the repeat mode.
        config: ``default``, ``reproducible`` or ``fast-run``.
        jobs: runs at once. Runs sharing the cores time their algorithms differently, which
            is part of what ``fast-run`` jitter is about; 1 is the conservative choice.
        threshold: 0 (bitwise, the default), a number, ``"auto"`` or ``"band"``.
        explain: when a root differs with the same algorithm, rerun with the algorithms pinned
            (fast-run) and with ``--reproducible`` to confirm a non-deterministic kernel.
        local: when there is jitter, measure the local error of every operator: each diverging
            run's operators (its own algorithms, read from its cache) on run 1's inputs,
            against run 1 (at most :data:`MAX_LOCAL_RUNS` algorithm sets).
        keep_all: keep every run's whole dump (default: run 1 whole, later runs only the vars
            that differ from run 1).
        threads: thread counts (``"1,2,4"``): the threads mode instead of repeats.
        batch_positions: N: the batch-position mode instead of repeats.
        observer: one more run without ``--bin-io-dump`` (outputs only), compared bitwise
            with the dumped runs.
        env: environment changes of every run (a value None removes the variable), local
            error's layerwise runs included.
        Other arguments as :func:`naive_vs_default`.

    Raises:
        As :func:`naive_vs_default`.
    """
    return analyse(Settings(model=model, inputs=inputs, out=out, threshold=threshold, lar=lar, timeout=timeout,
                            extra_flags=tuple(extra_flags), env=env, seed=seed, jobs=jobs, keep_going=keep_going,
                            remote=remote, local=local, local_checks=local_checks, html=html, progress=progress),
                   repeat=repeat, config=config, explain=explain, keep_all=keep_all, threads=threads,
                   batch_positions=batch_positions, observer=observer)


def analyse(settings: Settings, *, repeat: int = 3, config: str = "default", explain: bool = True,
            keep_all: bool = False, threads: Union[str, Sequence[int], None] = None,
            batch_positions: Optional[int] = None, observer: bool = False) -> Analysis:
    """:func:`shake` from one :class:`~lar_prec.run.settings.Settings` record (the CLI's way in)
    and shake's own options."""
    s = settings
    extra_flags, remote = s.extra_flags, s.remote
    if config not in SHAKE_CONFIGS:
        raise UsageError(f"shake --config must be one of {', '.join(SHAKE_CONFIGS)}, got {config!r}")
    if threads is not None and batch_positions is not None:
        raise UsageError("--threads and --batch-positions are two shake modes: give one of them")
    mode = THREADS_MODE if threads is not None else BATCH_MODE if batch_positions is not None else REPEAT_MODE
    if mode == REPEAT_MODE and repeat < 2:
        raise UsageError(f"--repeat must be at least 2 to see jitter, got {repeat}")
    counts = parse_threads(",".join(map(str, threads)) if isinstance(threads, (list, tuple)) else str(threads)) \
        if threads is not None else ()
    if counts and "multithread" in {f.split("=")[0].lstrip("-").replace("-", "_") for f in extra_flags}:
        raise UsageError("--threads sets --multithread for each run: leave it out of the load_and_run flags")
    if remote is not None and (mode == BATCH_MODE or observer):
        raise UsageError(("--batch-positions" if mode == BATCH_MODE else "--observer")
                         + " runs on this machine only, not over --remote")
    spec = parse_threshold_spec(s.threshold)
    prep = prepare(s, "shake")
    adir, prepared = prep.dir, prep.inputs
    notes: List[str] = []
    if mode == REPEAT_MODE:
        plan = plan_repeat(config, repeat)
    elif mode == THREADS_MODE:
        plan = plan_threads(config, counts)
    else:
        plan, more = plan_batch(config, int(batch_positions or 0), prepared, adir, s.seed)
        notes += more
    sessions = open_sessions(remote, prep.model, prepared)
    if hasattr(s.progress, "expect"):  # one counter over the first run and the repeats
        s.progress.expect("runs", len(plan))
    shk = _Shake(prep, config, tuple(extra_flags), plan, mode, RunStore(adir, keep_all=keep_all), sessions,
                 sessions is not None)
    try:
        shk.run_all()
        shk.compare(spec.threshold, s.progress)
        causes = shk.causes()
        if explain and mode == REPEAT_MODE and any(c.cause == jc.SAME_ALGORITHM for c in causes.values()):
            shk.explain(repeat)
            causes = shk.causes()
        obs = shk.observer() if observer else None
    finally:
        if sessions is not None:
            sessions.close()
    off = off_reason(local=s.local)
    if off is None and not shk.tree.diverged:
        off = "local error not measured: no jitter"
    if off is None and mode == BATCH_MODE:
        off = ("local error not measured in the batch-position mode: the layerwise model runs one batch shape; "
               "the roots come from the sliced dumps")
    locals_, off = shk.measure_local(off, bitwise=shk.tree.threshold.value == 0, checks=s.local_checks, lar=prep.lar,
                                     remote=remote, timeout=s.timeout)
    shk.store.drop_views()
    report = shk.report(spec, causes, locals_, off, obs, notes)
    report = with_inputs(report, prep.inputs)
    json_path, html_path = write_reports(report, adir, s.html)
    return Analysis("shake", adir, report, shk.tree, tuple(shk.all_runs), json_path, html_path)


@dataclass
class _Shake:
    """One shake under way: its plan, runs, store and what was learnt so far."""

    prep: Prepared
    config: str
    user_flags: Tuple[str, ...]
    plan: List[ShakeRun]
    mode: str
    store: RunStore
    sessions: Optional[RemoteSessions]
    remote: bool
    runs: List[RunResult] = field(default_factory=list)
    all_runs: List[RunResult] = field(default_factory=list)
    caches: Dict[str, Path] = field(default_factory=dict)
    verbose_runs: Set[str] = field(default_factory=set)  # runs whose --verbose log names their algorithms
    run_flags: Dict[str, Tuple[str, ...]] = field(default_factory=dict)
    per_run_algos: Dict[str, Dict[int, str]] = field(default_factory=dict)
    algo_notes: List[str] = field(default_factory=list)
    sliced_out: Dict[str, List[int]] = field(default_factory=dict)
    steps: List[Dict[str, object]] = field(default_factory=list)
    reruns: List[str] = field(default_factory=list)
    tree: VarTree = None  # type: ignore[assignment]
    errs: Dict[str, Dict[int, Optional[float]]] = field(default_factory=dict)
    groups: Dict[int, List[List[str]]] = field(default_factory=dict)
    differing: Dict[int, int] = field(default_factory=dict)
    local_freed: Optional[int] = None
    in_process: Any = None  # MegEngine's VarValueChecker in one process (modes.in_process_check)

    # ------------------------------------------------------------------ runs

    @property
    def labels(self) -> List[str]:
        return [r.label for r in self.plan]

    @property
    def flags(self) -> Tuple[str, ...]:
        return tuple(get_config(self.config).flags) + self.user_flags

    def _planned(self, r: ShakeRun) -> Planned:
        own, where = algos_mod.cache_flags(self.flags + r.flags, self.prep.dir, r.label, remote=self.remote)
        if where is not None:
            self.caches[r.label] = Path(where)
        own += algos_mod.verbose_flags(self.flags + r.flags + own)  # the heuristic's choices, in the log
        if algos_mod.logs_algorithms(self.flags + r.flags + own):
            self.verbose_runs.add(r.label)
        self.run_flags[r.label] = r.flags + own
        return Planned(self.config, r.label, extra_flags=r.flags + own, inputs=r.inputs)

    def _finished(self, rec: RunResult, r: ShakeRun, *, base: bool) -> None:
        """In the run's worker thread, as it ends: its algorithms, then (batch) the sample's
        slice, then hash and prune."""
        cache = self.caches.get(r.label)
        if cache is not None and not cache.is_absolute():  # written into the device's run folder
            cache = rec.dir / cache
            self.caches[r.label] = cache
        dump = Path(rec.dump_dir)  # type: ignore[arg-type]
        if r.label in self.verbose_runs:
            try:
                text = (rec.dir / "stderr.txt").read_text(encoding="utf-8", errors="replace")
                found = algos_mod.verbose_algorithms(text, dump)
                if found:  # a binary that does not log MegEngine's chooser names none
                    self.per_run_algos[r.label] = found
            except (OSError, LarPrecError) as exc:
                self.algo_notes.append(f"the algorithms of run {r.label} cannot be told from its log: {exc}")
        if cache is not None:
            got, notes = algos_mod.read_caches({r.label: cache}, {r.label: dump},
                                               reproducible="--reproducible" in self.flags)
            self.per_run_algos.update(got)
            self.algo_notes.extend(notes)
        if base:
            self.store.set_base(r.label, dump)
            return
        if r.role == jc.BATCH_RUN:
            sliced = rec.dir / "sample-slice"
            _n, skipped = slice_dump(dump, sliced, DumpFolder(self.store.base.dump), int(r.position or 0),
                                     int(r.batch or 0))
            self.sliced_out[r.label] = skipped
            if not self.store.keep_all:
                remove_tree(dump)
            dump = sliced
        self.store.add(r.label, dump)

    def run_all(self) -> None:
        base, rest = self.plan[0], self.plan[1:]
        first = run_plan(self.prep, [self._planned(base)], extra_flags=self.user_flags, sessions=self.sessions)
        self._finished(first[0], base, base=True)
        self.in_process = modes.in_process_check(self, first[0])  # before the long part: one process, a few s
        by_label = {r.label: r for r in rest}
        later = run_plan(self.prep, [self._planned(r) for r in rest], extra_flags=self.user_flags,
                         sessions=self.sessions, after=lambda rec: self._finished(rec, by_label[rec.label], base=False))
        self.runs = first + later
        self.all_runs = list(self.runs)

    # ------------------------------------------------------------------ comparing

    def compare(self, threshold: Optional[Threshold], progress: Optional[StageProgress]) -> None:
        """Compare once per distinct set of differences from run 1 (runs that differ alike
        share one comparison), merge into one tree, and keep each run's error per var."""
        labels = self.labels
        sigs: Dict[frozenset, List[str]] = {}
        for lbl in labels[1:]:
            digests = self.store.runs[lbl].digests
            sigs.setdefault(frozenset((v, digests.get(v)) for v in self.store.differing(lbl)), []).append(lbl)
        reps = [ls[0] for sig, ls in sigs.items() if sig] or [labels[1]]
        comps = compare_runs([self.store.base.dump] + [self.store.view(lbl) for lbl in reps], threshold, progress)
        merged, _ = merge_comparisons(comps)
        self.tree = VarTree(merged, threshold=comps[0].threshold,
                            source=f"{len(labels)} runs against {self.store.base.dump}")
        comp_of = {lbl: comps[reps.index(ls[0])] for sig, ls in sigs.items() if sig for lbl in ls}
        for lbl in labels[1:]:
            c = comp_of.get(lbl)
            self.errs[lbl] = {d.id: json_number(d.max_err) for d in c.diffs} if c is not None else {}
        self.groups = self.store.distinct(labels)
        self.differing = {vid: sum(len(g) for g in gs[1:]) for vid, gs in self.groups.items()}
        base_ids = set(self.store.base.digests)
        for vid in base_ids:  # a var some runs did not dump: they differ there too
            missing = sum(1 for lbl in labels[1:] if vid not in self.store.runs[lbl].digests)
            if missing:
                self.differing[vid] = self.differing.get(vid, 0) + missing

    def err(self, label: str, vid: int) -> Optional[float]:
        if label == self.labels[0]:
            return 0.0
        e = self.errs.get(label, {})
        if vid in e:
            return e[vid]
        return 0.0 if vid not in self.store.differing(label) else None

    # ------------------------------------------------------------------ algorithms and causes

    def algorithm_choice(self) -> Dict[str, object]:
        """The report's ``algorithm_choice``: whether each run's algorithms are known, from where."""
        user = algos_mod.user_cache(self.flags)
        if self.per_run_algos and self.verbose_runs and not self.caches:
            return {"known": True, "how": algos_mod.HOW_VERBOSE, "problems": list(self.algo_notes)}
        if self.per_run_algos:
            return {"known": True, "how": "each run's own --fast-run-algo-policy cache (written by the run)",
                    "caches": {lbl: str(p) for lbl, p in self.caches.items()},
                    "problems": list(self.algo_notes)}
        if user is not None:
            return {"known": False, "why": algos_mod.USER_CACHE.format(path=user)}
        if self.caches:
            return {"known": False, "why": "; ".join(self.algo_notes) or "no run wrote its algorithm cache"}
        return {"known": False, "why": algos_mod.HEURISTIC_UNKNOWN.format(config=self.config)}

    def algorithms_by_var(self) -> Optional[Dict[int, Dict[str, str]]]:
        if not self.per_run_algos:
            return None
        return algos_mod.by_var(self.per_run_algos, self.labels)

    def evidence(self) -> jc.Evidence:
        choice = self.algorithm_choice()
        return jc.Evidence({r.label: r.role for r in self.plan}, self.algorithms_by_var(),
                           str(choice.get("why", "")), {r.label: r.setting for r in self.plan}, tuple(self.reruns))

    def causes(self) -> Dict[int, jc.Cause]:
        if not self.tree.diverged:
            return {}
        roots = [r.id for r in self.tree.roots()]
        return jc.assign(self.tree.diffs, roots, self.groups, self.evidence())

    def explain(self, repeat: int) -> None:
        """Reruns that confirm a non-deterministic kernel: with run 1's algorithms pinned
        (fast-run), and with ``--reproducible``; each group compared within itself."""
        n = max(2, min(repeat, 3))
        more: List[RunResult] = []
        if algos_mod.records_algorithms(self.flags) and algos_mod.user_cache(self.flags) is None:
            base_cache = self.caches.get(self.labels[0])
            if base_cache is not None and base_cache.is_file() and not self.remote:
                pinned_cache: Union[Path, str] = self.prep.dir / "algorithms" / "pinned-run-1.cache"
                shutil.copyfile(base_cache, pinned_cache)
                how = f"every pinned run reads a copy of run 1's cache ({pinned_cache})"
            else:  # on a device: the first pinned run profiles and writes the cache, the others read it
                sess = self.sessions
                pinned_cache = (f"{sess.get().remote_dir}/{self.prep.dir.name}-pinned.cache" if sess is not None  # type: ignore[union-attr]
                                else self.prep.dir / "algorithms" / "pinned.cache")
                how = "the first pinned run writes the cache, the others read it"
            flags = ("--fast-run-algo-policy", str(pinned_cache))
            labels = [f"{self.config}-pinned-{k}" for k in range(1, n + 1)]
            runs = self._rerun(labels, self.config, flags, first_alone="writes" in how)
            more += runs
            differ = self._group_differs(labels)
            self.steps.append({"step": "algorithms pinned by --fast-run-algo-policy", "cache": str(pinned_cache),
                               "how": how, "runs": labels, "jitter": differ})
            self.reruns.append(f"runs with run 1's algorithms pinned ({', '.join(labels)}) "
                               + ("still differ: the same algorithms give other results" if differ else "agree"))
        if self.config != "reproducible":
            labels = [f"reproducible-{k}" for k in range(1, n + 1)]
            runs = self._rerun(labels, "reproducible", ())
            more += runs
            differ = self._group_differs(labels)
            self.steps.append({"step": "--reproducible", "runs": labels, "jitter": differ})
            self.reruns.append("--reproducible runs " + (
                "still differ: not a kernel MegEngine marks non-reproducible (look at uninitialised memory or "
                "random operators)" if differ else "agree: a kernel MegEngine marks non-reproducible; "
                "--reproducible removes the jitter"))
        self.all_runs += more

    def _rerun(self, labels: Sequence[str], config: str, flags: Tuple[str, ...], first_alone: bool = False
               ) -> List[RunResult]:
        planned = [Planned(config, lbl, extra_flags=flags) for lbl in labels]
        out: List[RunResult] = []
        after = lambda rec: self.store.add(rec.label, Path(rec.dump_dir))  # noqa: E731
        if first_alone:
            out += run_plan(self.prep, planned[:1], extra_flags=self.user_flags, sessions=self.sessions, jobs=1,
                            after=after)
            planned = planned[1:]
        out += run_plan(self.prep, planned, extra_flags=self.user_flags, sessions=self.sessions, after=after)
        return out

    def _group_differs(self, labels: Sequence[str]) -> bool:
        first = self.store.runs[labels[0]].digests
        return any(self.store.runs[lbl].digests != first for lbl in labels[1:])

    # ------------------------------------------------------------------ observer

    def observer(self) -> Dict[str, object]:
        base = self.plan[0]
        flags = tuple(self.run_flags.get(base.label, ()))
        cache = self.caches.get(base.label)
        if cache is not None and cache.is_file():  # run 1's algorithms, so only the dump differs
            pinned = self.prep.dir / "algorithms" / "observer.cache"
            shutil.copyfile(cache, pinned)
            flags = tuple(f for f in base.flags) + ("--fast-run-algo-policy", str(pinned))
        label = "observer"
        try:
            rec = run_plan(self.prep, [Planned(self.config, label, extra_flags=flags, inputs=base.inputs,
                                               outputs_only=True)], extra_flags=self.user_flags,
                           sessions=self.sessions)[0]
        except AnalysisInterrupted:
            raise
        except LarPrecError as exc:  # e.g. a load_and_run in lite mode, which refuses --bin-out-dump
            why = f"observer check could not run: {exc}"
            return {"checked": False, "differs": False, "why": why, "summary": why, "run": label}
        self.all_runs.append(rec)
        digests = {lbl: self.store.runs[lbl].digests for lbl in self.labels}
        res = observer_check(Path(rec.out_dump), DumpFolder(self.store.base.dump), digests, var_digest)  # type: ignore[attr-defined]
        res["run"] = label
        return res

    # ------------------------------------------------------------------ local error

    def measure_local(self, off: Optional[str], *, bitwise: bool, checks: bool, lar: Any, remote: Any,
                      timeout: Optional[float]) -> Tuple[Dict[str, LocalAnalysis], Optional[str]]:
        """Local error like with like: for each diverging run (one per distinct algorithm set,
        at most :data:`MAX_LOCAL_RUNS`), the layerwise model under that run's own flags and
        algorithms, fed run 1's values, against run 1."""
        if off is not None:
            return {}, off
        cfg = get_config(self.config).with_extra(self.user_flags, self.prep.settings.env)
        chosen: List[str] = []
        seen: set = set()
        algos = self.per_run_algos
        for lbl in self.labels[1:]:
            if not self.store.differing(lbl):
                continue
            key = (tuple(sorted(algos.get(lbl, {}).items())), self.run_flags.get(lbl, ())[:2])
            if key in seen:
                continue
            seen.add(key)
            chosen.append(lbl)
        out: Dict[str, LocalAnalysis] = {}
        why: Optional[str] = None
        lw = None
        for lbl in chosen[:MAX_LOCAL_RUNS]:
            flags = self._local_flags(lbl)
            test_cfg = cfg.with_extra(flags)
            out_dir = self.prep.dir / ("local" if not out else f"local-{lbl}")
            try:
                la = run_local(self.prep.model, self.store.base.dump, self.store.view(lbl), test_cfg, out_dir,
                               reference_config=cfg, checks=checks, bitwise=bitwise, timeout=timeout,
                               lar=lar, remote=remote, repros=not out, layerwise=lw,
                               repro_only={r.id for r in self.tree.roots()})  # the jitter's roots, not every wobble
            except AnalysisInterrupted:
                raise
            except LarPrecError as exc:
                where = (f" on {remote.target}" if remote is not None else
                         f" with {lar.describe()}" if lar is not None and not lar.is_bundled else "")
                why = f"local error could not be measured{where} ({type(exc).__name__}): {exc}"
                break
            except KeyboardInterrupt:
                raise AnalysisInterrupted(f"interrupted while measuring local error; every run folder is kept in "
                                          f"{self.prep.dir}", analysis_dir=self.prep.dir) from None
            out[lbl] = la
            lw = la.result.layerwise
            if not self.store.keep_all:  # before the next measurement: one at a time on disk
                self.drop_local_dumps(la)
        if not out:
            return {}, why or "local error not measured: no run differs from run 1"
        return out, None

    def drop_local_dumps(self, la: LocalAnalysis) -> None:
        """Local error's feeds and layerwise dump, once measured (local.json and the repro
        folders keep what a reader needs), so they do not pile up on disk."""
        freed = 0
        for rec in la.result.runs:
            if rec.dump_dir is not None and Path(rec.dump_dir).is_dir():
                freed += remove_tree(Path(rec.dump_dir))
        for feeds in la.dir.glob("inputs-*"):
            freed += remove_tree(feeds)
        self.local_freed = (self.local_freed or 0) + freed

    def _local_flags(self, label: str) -> Tuple[str, ...]:
        """The flags of run ``label`` for its layerwise run: its own (thread count), with its
        algorithm cache copied (the layerwise run writes it back at its end)."""
        flags = list(self.run_flags.get(label, ()))
        cache = self.caches.get(label)
        if "--fast-run-algo-policy" in flags:
            i = flags.index("--fast-run-algo-policy")
            del flags[i:i + 2]
        if cache is not None and cache.is_file():
            copy = self.prep.dir / "algorithms" / f"{label}.local.cache"
            shutil.copyfile(cache, copy)
            flags += ["--fast-run-algo-policy", str(copy)]
        return tuple(flags)

    # ------------------------------------------------------------------ report

    def report(self, spec: Any, causes: Mapping[int, jc.Cause], locals_: Mapping[str, LocalAnalysis],
               off: Optional[str], obs: Optional[Dict[str, object]], notes: List[str]) -> Any:
        la = next(iter(locals_.values()), None)
        roots_by = spec.roots_by(la is not None)
        tree = self.tree
        roots = [(r.name, r.opr_type, r.id) for r in tree.roots()] if tree.diverged else []
        if tree.diverged and la is not None and roots_by == "local":
            to_report = report_ids(la)[1]
            roots = [(r.name, r.opr_type, to_report.get(r.id, r.id)) for r in la.verdict.roots]
        causes = dict(causes)
        ev = self.evidence()
        for _n, _t, rid in roots:  # a root by local error the dumps could not name: its own cause
            if rid not in causes or causes[rid].cause == jc.INHERITED:
                causes[rid] = jc.root_cause(rid, self.groups.get(rid, ()), ev)
        root_causes = [causes[r[2]] for r in roots if r[2] in causes]
        from_shake = _ReportParts(self, causes, locals_, obs)
        cause = jc.model_cause(root_causes, bool(obs and obs.get("differs")))
        verdict = shake_verdict(tree, roots, max(self.differing.values(), default=0), len(self.plan),
                                self.describe(), cause if tree.diverged else None, bitwise=tree.threshold.value == 0,
                                observer=str(obs["summary"]) if obs and obs.get("differs") else None)
        env_extra, env_notes = environment_extra(self.all_runs)
        extra = {"analysis_dir": str(self.prep.dir), "mode": self.mode, "repeat": len(self.plan), "config": self.config,
                 "inputs": self.prep.inputs.to_json(), "explanation": self.steps, **env_extra,
                 "shake_runs": [{"label": r.label, "role": r.role, "setting": r.setting} for r in self.plan],
                 "algorithm_choice": self.algorithm_choice(),
                 "storage": {**self.store.summary(), **({"local_bytes_removed": self.local_freed,
                             "local": "local error's feeds and layerwise dumps removed once measured (local.json and "
                                      "the repro folders stay)"} if self.local_freed is not None else {})},
                 "cause_vocabulary": list(jc.CAUSES)}
        if obs is not None:
            extra["observer"] = obs
        if self.in_process is not None:
            extra["in_process_check"] = {**self.in_process.to_json(), "words": self.in_process.words()}
            notes = [*notes, self.in_process.words()]
        all_notes = ([str(obs["summary"])] if obs and obs.get("differs") else []) + notes + env_notes
        all_notes += from_shake.notes()
        report = from_tree(tree, command="shake", runs=self.all_runs, model=str(self.prep.model), verdict=verdict,
                           cause=cause, notes=all_notes, extra=extra, local=la, roots_by=roots_by, local_off=off,
                           runs_differing=self.differing)
        return from_shake.apply(report)

    def describe(self) -> str:
        if self.mode == THREADS_MODE:
            counts = [r.flags[-1] for r in self.plan if r.role != jc.REPEAT]
            return f"{self.config} runs under {', '.join(counts)} threads (1 thread twice)"
        if self.mode == BATCH_MODE:
            return f"{self.config} runs of the sample alone and at each position of a batch of {self.plan[-1].batch}"
        return f"{len(self.plan)} {self.config} runs"


class _ReportParts:
    """What a shake adds to its report: per var its results per run, algorithms, causes and
    local error per run; per root its cause; the agreement of dump roots and local error."""

    def __init__(self, shk: _Shake, causes: Mapping[int, jc.Cause], locals_: Mapping[str, LocalAnalysis],
                 obs: Optional[Dict[str, object]]) -> None:
        self.shk, self.causes, self.locals, self.obs = shk, causes, locals_, obs
        self.algos = shk.algorithms_by_var() or {}
        self.local_by_run: Dict[int, Dict[str, Optional[float]]] = {}
        for lbl, la in locals_.items():
            to_report = report_ids(la)[1]
            for lv in la.result.vars:
                rid = to_report.get(lv.id, lv.id)
                self.local_by_run.setdefault(rid, {})[lbl] = json_number(lv.local_err)
        self.local_roots: Dict[str, List[int]] = {}
        for lbl, la in locals_.items():
            to_report = report_ids(la)[1]
            self.local_roots[lbl] = [to_report.get(r.id, r.id) for r in la.verdict.roots]

    def var_extra(self, vid: int) -> Dict[str, object]:
        shk = self.shk
        groups = shk.groups.get(vid, [])
        d: Dict[str, object] = {"n_results": len(groups)}
        algos = self.algos.get(vid)
        if algos:
            d["algorithms"] = algos
            if algos_mod.differs(algos):
                d["algorithm_differs"] = True
        if len(groups) > 1:
            d["results"] = [{"runs": g, "max_err": shk.err(g[0], vid),
                             **({"algorithm": algos[g[0]]} if algos and g[0] in algos else {})} for g in groups]
        if vid in self.local_by_run:
            d["local_by_run"] = self.local_by_run[vid]
        c = self.causes.get(vid)
        if c is not None:
            d.update(c.to_json())
        return d

    def apply(self, report: Any) -> Any:
        vars_ = tuple(replace(v, extra={**v.extra, **self.var_extra(v.id)}) for v in report.vars)
        names = {v.id: v.name for v in vars_}
        roots = []
        for r in report.roots:
            c = self.causes.get(r.id)
            extra = dict(r.extra)
            if c is not None:
                extra.update(c.to_json())
                extra["cause_text"] = c.text(names)
            algos = self.algos.get(r.id)
            if algos:
                extra["algorithms"] = algos
            roots.append(replace(r, extra=extra))
        extra = dict(report.extra)
        agreement = self.agreement(report, names)
        if agreement is not None:
            extra["local"] = {**extra.get("local", {}), "agreement": agreement, "runs_measured": list(self.locals),
                              "compared_like_with_like": (
                                  "each measured run's operators, under that run's own flags and algorithms "
                                  "(its --fast-run-algo-policy cache), on run 1's inputs, against run 1")}
        notes = list(report.notes)
        if agreement is not None and (not agreement["agree"] or agreement.get("local_roots_not_dump_roots")):
            notes.insert(0, str(agreement["why"]))
        return replace(report, vars=vars_, roots=tuple(roots), extra=extra, notes=tuple(notes))

    def notes(self) -> List[str]:
        shk = self.shk
        out = list(shk.algo_notes)
        cut = {lbl: ids for lbl, ids in shk.sliced_out.items() if ids}
        if cut:
            n = len(set().union(*cut.values()))
            out.append(f"{n} var(s) have no batch dimension to cut back to the sample (or another name in the batch "
                       "run): not compared in the batch-position mode")
        return out

    def agreement(self, report: Any, names: Mapping[int, str]) -> Optional[Dict[str, object]]:
        """Do the roots the dumps name and the local error agree? If not, one line why."""
        if not self.locals:
            return None
        dump_roots = [r.id for r in self.shk.tree.roots()]
        local_any = {rid for ids in self.local_roots.values() for rid in ids}
        missing = [rid for rid in dump_roots if rid not in local_any]
        extra_roots = sorted(local_any - set(dump_roots))
        measured = list(self.locals)
        if not missing and not extra_roots:
            return {"agree": True, "why": f"the dump roots are the operators local error finds ({', '.join(measured)} "
                                          "measured against run 1)"}
        if missing:
            r = missing[0]
            runs = [lbl for g in self.shk.groups.get(r, [])[1:] for lbl in g]
            unmeasured = [lbl for lbl in runs if lbl not in measured]
            if runs and all(lbl in unmeasured for lbl in runs):
                why = (f"root {names.get(r, r)} (var {r}) differs only in {', '.join(runs[:4])}, whose algorithms "
                       f"were not measured by local error (at most {MAX_LOCAL_RUNS} algorithm sets are)")
            elif not self.shk.per_run_algos:
                why = (f"root {names.get(r, r)} (var {r}) has no local error: the layerwise run is one more run, "
                       "and a non-deterministic kernel need not repeat its jitter there")
            else:
                why = (f"root {names.get(r, r)} (var {r}) has no local error under the measured runs' own "
                       "algorithms: its jitter did not repeat on run 1's inputs (a non-deterministic kernel)")
            return {"agree": False, "why": "dump roots and local error differ: " + why, "dump_roots_without_local": missing,
                    "local_roots_not_dump_roots": extra_roots}
        shown = ", ".join(f"{names.get(i, i)} (var {i})" for i in extra_roots[:3])
        return {"agree": True, "why": (f"the dump roots have local error, and {len(extra_roots)} operator(s) downstream "
                                       f"also change the result on run 1's inputs ({shown}"
                                       f"{' ...' if len(extra_roots) > 3 else ''}): the dumps cannot name them, "
                                       "their inputs already differ"),
                "local_roots_not_dump_roots": extra_roots}
