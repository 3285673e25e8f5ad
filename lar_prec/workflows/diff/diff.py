"""``lar-prec diff``: the same model and input in two environments A and B (a build, a device,
load_and_run flags, environment variables), each run at least twice; per operator ``equal``,
``within_jitter``, ``within_rounding`` (outside jitter, but each side within its operator's
bound of the naive reference: :mod:`.rounding`), ``outside_jitter`` or ``nonfinite``
(:mod:`.judge`), the first operator outside as the root, its local error (B's operator on A's
inputs, against A) where the graphs are one, which side the float64 oracle finds nearer, and
whether B's wrong value is the same bits in each of its runs
(:mod:`lar_prec.workflows.common.nondeterminism`). Or two analysis folders made before
(:func:`diff_folders`): no runs.

Example::

    from lar_prec.workflows.diff.diff import diff
    from lar_prec.workflows.diff.sides import Side
    d = diff("model.mge", ["data:x.npy"], Side("a"), Side("b", flags=("--multithread", "2")))
    print(d.report.verdict, d.exit_code)
"""
from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from types import SimpleNamespace
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple

from lar_prec.diagnosis.local import compute_dtype, layout_fmt
from lar_prec.errors import AnalysisInterrupted, LarPrecError, UsageError
from lar_prec.records import PathLike, json_number
from lar_prec.report.model import Report, from_tree
from lar_prec.report.records import ReportRun, run_from_result
from lar_prec.run.config import get_config, resolve_load_and_run
from lar_prec.run.dirs import new_analysis_dir
from lar_prec.store.db import open_store
from lar_prec.run.settings import Prepared, Settings
from lar_prec.workflows.common.analysis import (Analysis, environment_extra, measure_local, prepare, with_inputs,
                                                write_reports)
from lar_prec.workflows.diff.judge import (DIFFERS, EQUAL, NONFINITE, OUTSIDE, ROUNDING, WITHIN, Judged, judge,
                                           with_rounding)
from lar_prec.workflows.diff.rounding import (Rounding, judge_rounding, measure_side, naive_reference, not_judged,
                                              side_config)
from lar_prec.workflows.diff.sides import Side, SideResult, identical_sides, read_side, run_side
from lar_prec.workflows.common.nondeterminism import RunToRun, from_band
from lar_prec.workflows.common.verdicts import annotate_oracle

#: the oracle's findings in a diff's words (``which_side``: reference is A, test is B)
DIFF_WORDS = {"test": "B is off exact arithmetic, A is not", "reference": "A is off exact arithmetic, B is not",
              "both": "both are off exact arithmetic", "neither": "both are within rounding of exact arithmetic"}
_SIDE_NAMES = {"reference": "a", "test": "b"}  # which side is off: which_side's words in a diff
#: a root's local keys (of its var) the report repeats on the root
_ROOT_LOCAL = ("local_err", "floor", "label", "margin")


def diff(model: PathLike, inputs: Sequence[str], a: Side, b: Side, *, repeat: int = 2, config: str = "default",
         extra_flags: Sequence[str] = (), out: Optional[PathLike] = None, remote_dir: Optional[str] = None,
         keep_remote: bool = False, timeout: Optional[float] = None, seed: int = 0, html: bool = True,
         local: bool = True, progress: Any = None) -> Analysis:
    """Run A and B ``repeat`` times each (``extra_flags`` on both, each side's own on top) and
    judge B against A per operator. Returns an :class:`~lar_prec.workflows.common.analysis.Analysis`
    (``command`` ``diff``; exit code 1 when an operator is outside jitter or nonfinite).

    Raises:
        UsageError (exit 2): bad inputs, a build that does not exist, identical sides;
        RunError (exit 3): a run failed; AnalysisInterrupted (130).
    """
    same = identical_sides(a, b)
    if same:
        raise UsageError(f"nothing to diff: {same}")
    if repeat < 2:
        raise UsageError(f"--repeat {repeat}: each side runs at least 2 times (its jitter is what a difference "
                         "is judged against)")
    for side in (a, b):
        side.spec(remote_dir, keep_remote)  # a bad target or path: exit 2 before anything runs
    # the record is side A's (its build or its device); each side's runs add their own on top
    prep = prepare(Settings(model=model, inputs=inputs, out=out, lar=a.lar if not a.remote else None, timeout=timeout,
                            extra_flags=tuple(extra_flags), seed=seed, remote=a.spec(remote_dir, keep_remote),
                            local=local, html=html), "diff")
    model_path, adir, prepared = prep.model, prep.dir, prep.inputs
    if not b.remote:
        resolve_load_and_run(b.lar)
    specs = [f"{i.name}:{i.path}" for i in prepared.items]  # both sides read the very same files
    kw = dict(repeat=repeat, config=config, extra_flags=extra_flags, remote_dir=remote_dir, keep_remote=keep_remote,
              timeout=timeout, seed=seed, progress=progress)
    ra = run_side(model_path, specs, a, adir / "a", **kw)  # type: ignore[arg-type]
    rb = run_side(model_path, specs, b, adir / "b", **kw)  # type: ignore[arg-type]
    j = judge(ra, rb, adir)
    if not local:
        j = replace(j, rounding=not_judged("rounding not judged (--no-local): each side's local error against the "
                                           "naive reference is what tells rounding from a precision change"))
    elif j.differing():
        j = with_rounding(j, _rounding(prep, j, a, b, ra, rb, config, remote_dir, keep_remote))
    la, off = _local_error(prep, j, ra, rb, a, b, config, remote_dir, keep_remote)
    report = diff_report(j, ra, rb, model=str(model_path), adir=adir, local=la, local_off=off,
                         extra={"inputs": prepared.to_json(), "config": config, "repeat": repeat},
                         run_to_run=b_run_to_run(j, rb))
    report = with_oracle(report, model_path, j, adir, la, layout_fmt(tuple(extra_flags) + b.flags))
    report = with_inputs(report, prepared)
    json_path, html_path = write_reports(report, adir, html)
    return Analysis("diff", adir, report, j.tree, tuple(ra.runs) + tuple(rb.runs), json_path, html_path)


def diff_folders(dir_a: PathLike, dir_b: PathLike, *, out: Optional[PathLike] = None, html: bool = True) -> Analysis:
    """Judge two analysis folders made before (a shake's, a diff side's, or any analysis' test run):
    no runs. The oracle runs when the model they name is still there; local error needs runs
    (``lar-prec diff MODEL``).

    Raises:
        UsageError (exit 2): not analysis folders, their dumps gone, or one folder twice.
    """
    if Path(dir_a).resolve() == Path(dir_b).resolve():
        raise UsageError(f"nothing to diff: {dir_a} is given as both sides")
    ra, rb = read_side("a", dir_a), read_side("b", dir_b)
    adir = new_analysis_dir(out, "diff", needed=[dir_a, dir_b]).resolve()
    j = judge(ra, rb, adir)
    model = ra.model if ra.model and Path(ra.model).is_file() else None
    j = replace(j, rounding=not_judged("rounding not judged: diff of two analysis folders runs nothing (each side's "
                                       "local error against the naive reference needs runs: lar-prec diff MODEL)"))
    report = diff_report(j, ra, rb, model=model, adir=adir, local=None,
                         local_off="local error not measured: diff of two analysis folders runs nothing",
                         run_to_run=b_run_to_run(j, rb))
    if model is not None:
        report = with_oracle(report, Path(model), j, adir)
    json_path, html_path = write_reports(report, adir, html)
    return Analysis("diff", adir, report, j.tree, (), json_path, html_path)


def store_run_folders(url: str, runs: Sequence[str]) -> List[str]:
    """The analysis folders of two runs of the store (uids or their prefixes), for :func:`diff_folders`.

    Raises:
        UsageError / StoreError (exit 2): no such run, more than one, or its folder is gone.
    """
    out = []
    with open_store(url) as store:
        for uid in runs:
            rows = store.runs(uid=uid)
            if len(rows) != 1:
                raise UsageError(f"store {url}: {'no' if not rows else 'more than one'} run {uid!r} (a run uid or a "
                                 "prefix of one, as lar-prec history lists them)")
            folder = rows[0].get("analysis_dir")
            if not folder or not Path(folder).is_dir():
                raise UsageError(f"store {url}: run {uid} was made in {folder or 'an unknown folder'}, which is gone: "
                                 "diff needs its dumps (lar-prec history --diff compares the stored summaries)")
            out.append(str(folder))
    return out


def _rounding(prep: Prepared, j: Judged, a: Side, b: Side, ra: SideResult, rb: SideResult, config: str,
              remote_dir: Optional[str], keep_remote: bool) -> Rounding:
    """Each side against the naive reference by local error (:mod:`.rounding`): the naive run
    and the layerwise build here (side A's build, or the bundled one when A is on a device),
    each side's layerwise run where it ran."""
    adir, extra_flags, timeout = prep.dir, prep.settings.extra_flags, prep.settings.timeout
    out = adir / "rounding"
    try:
        try:
            ref = naive_reference(prep.model, prep.inputs, out, lar=resolve_load_and_run(a.lar if not a.remote else "bundled"),
                                  extra_flags=extra_flags, timeout=timeout)
        except AnalysisInterrupted:
            raise
        except LarPrecError as exc:
            return not_judged(f"rounding not judged: the naive reference could not be made ({type(exc).__name__}: "
                              f"{' '.join(str(exc).split())[:300]})")
        bounds = []
        for side, res in ((a, ra), (b, rb)):
            spec = side.spec(remote_dir, keep_remote)
            bounds.append(measure_side(ref, side.name, res.dump, side_config(config, extra_flags, side),
                                       out / side.name, lar=None if spec else resolve_load_and_run(side.lar),
                                       remote=spec, timeout=timeout))
    except KeyboardInterrupt:
        raise AnalysisInterrupted(f"interrupted while measuring each side against the naive reference; every run "
                                  f"folder is kept in {adir}", analysis_dir=adir) from None
    dtypes = tuple(compute_dtype(side_config(config, extra_flags, side).flags) for side in (a, b))
    return judge_rounding(j, ref, bounds[0], bounds[1], outside=OUTSIDE, differs=DIFFERS, dtypes=dtypes)


def b_run_to_run(j: Judged, rb: SideResult) -> Optional[RunToRun]:
    """Whether B's wrong values (its vars outside, B's ids) are the same bits in each of its
    runs, from the jitter its repeats measured; None when nothing is outside or B ran once."""
    wrong = j.differing()
    if not wrong or not rb.measured or len(rb.runs) < 2:
        return None
    a_to_b = {a_id: b_id for b_id, a_id in j.b_to_a.items()}
    flags = " ".join(str(x) for x in (rb.setting.get("flags") or ()))
    return from_band(rb.dump, rb.band, watched=[a_to_b[i] for i in wrong if i in a_to_b], runs=len(rb.runs),
                     under=flags)


def _local_error(prep: Prepared, j: Judged, ra: SideResult, rb: SideResult, a: Side, b: Side, config: str,
                 remote_dir: Optional[str], keep_remote: bool) -> Tuple[Any, Optional[str]]:
    """B's operators on A's inputs, against A (where B ran: its build or its device)."""
    extra_flags = prep.settings.extra_flags
    if not prep.settings.local:
        return None, "local error not measured (--no-local)"
    if j.pairing.get("how") != "id":
        return None, ("local error not measured: the two sides ran different graphs (paired by operator key), "
                      "and the layerwise model is fed by var id")
    if not j.differing():
        return None, ("local error not measured: no operator is outside jitter" if not j.counts()[ROUNDING] else
                      "local error of B on A's inputs not measured: no operator is outside rounding")
    cfg = get_config(config)
    b_cfg = cfg.with_extra(tuple(extra_flags) + b.flags, dict(b.env))
    a_cfg = cfg.with_extra(tuple(extra_flags) + a.flags, dict(a.env))
    spec = b.spec(remote_dir, keep_remote)
    # the layerwise runs go where B ran: the prepared analysis with B's build or device
    b_side = replace(prep, lar=None if spec else resolve_load_and_run(b.lar),
                     settings=replace(prep.settings, remote=spec))
    return measure_local(b_side, ra.dump, rb.dump, b_cfg, None, reference_config=a_cfg)


def _runs(side: SideResult) -> List[ReportRun]:
    """The side's runs, labelled ``a:default-1`` (both sides run ``default-1``)."""
    return [replace(r if isinstance(r, ReportRun) else run_from_result(r), label=f"{side.name}:{r.label}")
            for r in side.runs]


def diff_report(j: Judged, ra: SideResult, rb: SideResult, *, model: Optional[str], adir: Path, local: Any = None,
                local_off: Optional[str] = None, extra: Optional[Mapping[str, Any]] = None,
                notes: Sequence[str] = (), run_to_run: Optional[RunToRun] = None) -> Report:
    """The Report (``command`` ``diff``) of a judgement: the design's vars and roots (statuses by
    jitter and rounding), each var's ``diff`` verdict, ``jitter_a``/``jitter_b`` and
    ``rounding``, the sides, the pairing, the rounding tier and B's run-to-run answer."""
    counts = j.counts()
    rnd: Optional[Rounding] = j.rounding
    runs = _runs(ra) + _runs(rb)
    # what differs between the sides' environments (host, binary, CPU, MGB_* variables)
    env_extra, env_notes = environment_extra([SimpleNamespace(label=r.label, environment=r.extra.get("environment") or {},
                                                              remote=r.extra.get("remote")) for r in runs])
    more = [f"side {s.name.upper()} made one run: its jitter is not measured (taken as 0)"
            for s in (ra, rb) if not s.measured]
    if j.pairing.get("how") == "key":
        more.append(f"the two sides ran different graphs: {j.pairing['compared']} of {j.pairing['reference_vars']} "
                    f"variables of A paired by operator key and compared ({len(j.pairing['unpaired_a'])} of A and "
                    f"{len(j.pairing['unpaired_b'])} of B without a partner: see diff_pairing)")
    if rnd is not None and rnd.why:
        more.append(rnd.why)
    if run_to_run is not None:
        more.append(f"side B, its {run_to_run.runs} runs compared: {run_to_run.words}")
    top = {"analysis_dir": str(adir), "sides": {"a": ra.to_json(), "b": rb.to_json()}, "diff_pairing": dict(j.pairing),
           "diff_counts": counts, "outputs": list(j.outputs),
           "rounding": rnd.to_json() if rnd is not None else {"measured": False, "why": None, "reference": None,
                                                               "a": None, "b": None, "within": 0},
           "run_to_run": None if run_to_run is None else {"side": "b", **run_to_run.to_json()},
           **(extra or {}), **env_extra}
    report = from_tree(j.tree, command="diff", runs=runs, model=model, verdict=_verdict(j, counts), extra=top,
                       notes=list(notes) + more + env_notes, local=local,
                       roots_by=None if local is None and local_off is None else "fixed", local_off=local_off)
    vars_ = tuple(replace(v, extra={**v.extra, "diff": j.verdicts.get(v.id), "jitter_a": json_number(j.jitter[v.id][0]),
                                    "jitter_b": json_number(j.jitter[v.id][1]),
                                    "rounding": rnd.var_json(v.id) if rnd is not None else None})
                  if v.id in j.verdicts else v for v in report.vars)
    by_id = {v.id: v for v in vars_}
    # each root with its local error on A's inputs (B's operator against A) and that rounding floor
    roots = tuple(replace(r, extra={**r.extra, **{k: by_id[r.id].extra[k] for k in _ROOT_LOCAL + ("rounding",)
                                                  if k in by_id[r.id].extra}})
                  if r.id in by_id else r for r in report.roots)
    thr = replace(report.threshold, reason="0: bitwise equal is 'equal'; a variable that differs is held to the "
                                           "jitter of both sides, j_A + j_B (its own threshold), then to each "
                                           "side's operator bound of the naive reference (within rounding)")
    return replace(report, vars=vars_, roots=roots, threshold=thr)


def _verdict(j: Judged, counts: Mapping[str, int]) -> str:
    n = len(j.verdicts)
    judged = j.rounding is not None and j.rounding.measured
    if counts[OUTSIDE] or counts[NONFINITE]:
        roots = j.tree.roots()
        first = f"; first: {roots[0].name} ({roots[0].opr_type}, var {roots[0].id})" if roots else ""
        nf = f" ({counts[NONFINITE]} NaN/Inf on one side only)" if counts[NONFINITE] else ""
        if judged:
            kept = f"; {counts[ROUNDING]} more within rounding" if counts[ROUNDING] else ""
            return (f"outside rounding: {counts[OUTSIDE] + counts[NONFINITE]} of {n} variables differ by more than "
                    f"the two sides vary by themselves and more than each side's rounding allows (a precision "
                    f"change){nf}{kept}{first}")
        return (f"outside jitter: {counts[OUTSIDE] + counts[NONFINITE]} of {n} variables differ by more than the "
                f"two sides vary by themselves{nf}{first}")
    if counts[ROUNDING]:
        return (f"within rounding: {counts[ROUNDING]} of {n} variables differ by more than the two sides vary by "
                f"themselves, each side within its operators' bounds of the naive reference (a kernel change, both "
                f"correct); {counts[WITHIN]} within jitter, {counts[EQUAL]} equal")
    if counts[WITHIN]:
        return (f"within jitter: {counts[WITHIN]} of {n} variables differ, each by no more than the two sides vary "
                f"by themselves; {counts[EQUAL]} equal")
    return f"equal: A and B give bitwise the same result in all {n} variables"


def with_oracle(report: Report, model: Path, j: Judged, adir: Path, la: Any = None, fmt: Optional[str] = None) -> Report:
    """Each first root told which side the float64 oracle finds nearer exact arithmetic, each
    side on the inputs it computed from (B on A's inputs where local error measured it):
    ``oracle`` (``a_err``, ``b_err``, rounding units where the operator has them) and ``nearer``
    (a, b or tie); and, where the oracle can tell, ``wrong_side`` (a, b, both, neither)."""

    def annotate(k: int, r: Any, s: Any, same_inputs: bool) -> Tuple[Any, Optional[str]]:
        extra: Dict[str, Any] = {**r.extra, "oracle": {
            "a_err": json_number(s.reference_err), "b_err": json_number(s.test_err),
            "a_units": json_number(s.reference_units), "b_units": json_number(s.test_units), "why": s.why or None}}
        if s.reference_err is None or s.test_err is None:
            return replace(r, extra=extra), None
        ea, eb = s.reference_err, s.test_err
        extra["nearer"] = "a" if ea < eb else "b" if eb < ea else "tie"
        on = "both on A's inputs" if same_inputs else "each on its own run's inputs"
        note = (f"float64 oracle ({on}): root #{k} {r.name}: A {ea:.3g} from it, B {eb:.3g}: "
                + ("equally near" if ea == eb else f"{extra['nearer'].upper()} nearer"))
        if s.side != "unknown":
            extra["wrong_side"] = _SIDE_NAMES.get(s.side, s.side)
            extra["oracle"]["floor"] = json_number(s.floor)
            note += f"; {DIFF_WORDS[s.side]}"
        return replace(r, extra=extra), note

    # A's whole dump is the reference (a var left unpaired is still A's input); B's values in A's ids
    report = annotate_oracle(report, model, j.a_dump, j.dirs[1], la, fmt, adir, annotate)
    near = report.roots[0].extra.get("nearer") if report.roots else None
    if near in ("a", "b") and report.n_not_ok:
        report = replace(report, verdict=report.verdict + f"; nearer float64 there: {near.upper()}")
    return report


__all__ = ["diff", "diff_folders", "diff_report", "with_oracle", "DIFF_WORDS", "Side"]
