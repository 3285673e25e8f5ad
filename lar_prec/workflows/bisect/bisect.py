"""``lar-prec bisect``: which build of load_and_run brought a change, and where it starts.

An ordered list of builds (load_and_run programs, or a folder of them sorted by name), one good
end and one bad end. "Bad" is lar-prec's own, not a user's script: the good end runs
``--repeat`` times (a shake of its own: each variable's jitter, its band); a build is bad when
one of the model's outputs (or the ``--operator`` variable) is **outside rounding** in its run,
judged per variable as ``lar-prec diff`` does (:mod:`lar_prec.workflows.diff.judge`: paired by
id, or by operator key when the build's graph differs): outside the good end's band, and not
within rounding (:mod:`lar_prec.workflows.diff.rounding`: the good end and the build each
measured against the naive reference by local error, each operator within its bound). Two
correct builds whose kernels sum in another order are not a change. A bad build runs once more:
whether its wrong value is the same bits (a deterministic bug) or differs run to run, and which
operator (:mod:`lar_prec.workflows.common.nondeterminism`). A build that cannot load the model or
crashes is skipped, never bad (``git bisect run``'s exit 125).

Both ends are checked first: the good end must run, the bad end must run and leave the band;
else the bisection says so and stops. Then each step analyses the untested build that best
halves the builds the first bad one may still be: at most ceil(log2 N) + 2 analyses for N builds,
plus one per skipped build it meets. Every result is cached for the bisection, and with a store
(``store``) in the store: the good end as its shake, each build as a ``diff`` run against it, so a
second bisection over the same builds, model, input and options reuses them (and they become
history). The answer: the first bad build and the root operator in it (the first operator outside
the band), with that build's diff report; when skipped builds hide which one it is, the range.

The result is the JSON object ``lar-prec.bisect/1`` (the page draws it by its ``schema``).
"""
from __future__ import annotations

import hashlib
import json
import logging
import math
import re
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple, Union

from lar_prec.dumps.folder import DumpFolder
from lar_prec.dumps.keys import dump_keys
from lar_prec.errors import (AnalysisInterrupted, DumpFolderError, DumpFormatError, LarPrecError, RunError,
                             UsageError)
from lar_prec.outputs import atomic_write_text, json_text, sha256_file
from lar_prec.run.dirs import finish_analysis_dir
from lar_prec.records import PathLike, json_number
from lar_prec.report.html import write_html
from lar_prec.report.model import read_json, write_json
from lar_prec.run.config import LoadAndRun, load_and_run_version, program_problem, resolve_load_and_run
from lar_prec.run.inputs import PreparedInputs, input_summary
from lar_prec.run.once import run_once
from lar_prec.run.record import read_run_json
from lar_prec.run.settings import Settings
from lar_prec.store.db import open_store
from lar_prec.store.summary import Summary, run_summary, summary_from_report
from lar_prec.workflows.common.analysis import prepare
from lar_prec.workflows.devices.devices import final_outputs
from lar_prec.workflows.diff.diff import diff_report
from lar_prec.workflows.diff.judge import DIFFERS, OUTSIDE, ROUNDING, Judged, judge, with_rounding
from lar_prec.workflows.diff.rounding import (Reference, SideBound, judge_rounding, measure_side, naive_reference,
                                              not_judged, side_config)
from lar_prec.workflows.diff.sides import MIN_RUNS, Side, SideResult, read_side, run_side
from lar_prec.workflows.common.nondeterminism import RunToRun, rerun_and_compare
from lar_prec.diagnosis.local import compute_dtype

log = logging.getLogger(__name__)
SCHEMA = "lar-prec.bisect/1"
GOOD, BAD, SKIP, UNTESTED = "good", "bad", "skip", "untested"
#: what a build's result holds (and the store keeps, as the run's settings)
_RESULT_KEYS = ("verdict", "why", "dir", "output_max_err", "n_outside", "n_within_rounding", "root", "run_to_run")
#: what "bad" means (in the cache key: a result judged by another rule is not reused)
RULE = "outside rounding"


@dataclass(frozen=True)
class Build:
    """One build of the list: its 1-based ``index``, its path as given, and its load_and_run."""

    index: int
    path: str
    lar: LoadAndRun

    @property
    def name(self) -> str:
        return Path(self.path).name or self.path

    def label(self) -> str:
        return f"#{self.index} {self.name}"

    def identity(self) -> str:
        """What the cache knows the build by: its file's sha256 (the bundled runner: its version)."""
        return load_and_run_version(self.lar) if self.lar.is_bundled else sha256_file(str(self.lar.path))


def _natural(name: str) -> List[Any]:
    return [int(t) if t.isdigit() else t for t in re.split(r"(\d+)", name)]


def parse_builds(builds: Union[str, Sequence[str]]) -> List[Build]:
    """``--builds`` as :func:`read_builds` reads it, without the entries it leaves out."""
    return read_builds(builds)[0]


def read_builds(builds: Union[str, Sequence[str]]) -> Tuple[List[Build], List[Dict[str, str]]]:
    """``--builds``: a folder (its programs, sorted by name, numbers in names as numbers) or paths
    joined by commas (or a list), in order; and every entry of the folder left out, with why (a
    build that lost its x bit may be the first bad one: the result names it).

    Raises:
        UsageError / LoadAndRunNotFound (exit 2): fewer than 2 builds, or a listed one that cannot run.
    """
    left_out: List[Dict[str, str]] = []
    if isinstance(builds, str) and "," not in builds and Path(builds).is_dir():
        folder = Path(builds)
        items = []
        for p in sorted(folder.iterdir(), key=lambda q: _natural(q.name)):
            why = "a hidden file (its name starts with '.')" if p.name.startswith(".") else program_problem(str(p))
            if why:
                left_out.append({"path": str(p), "why": why})
            else:
                items.append(str(p))
        where = f"folder {builds} holds"
    else:
        items = [x.strip() for x in (builds.split(",") if isinstance(builds, str) else builds) if str(x).strip()]
        where = "--builds names"
    if len(items) < 2:
        skipped = "; left out: " + ", ".join(f"{Path(e['path']).name} {e['why']}" for e in left_out) if left_out else ""
        raise UsageError(f"{where} {len(items)} build(s): bisect needs an ordered list of at least 2 load_and_run "
                         f"builds (a folder of them, or PATH,PATH,...){skipped}")
    return [Build(k, item, resolve_load_and_run(item)) for k, item in enumerate(items, 1)], left_out


def pick(builds: Sequence[Build], which: str, option: str) -> int:
    """The position (0-based) of ``--good``/``--bad``: a 1-based index, a path or a file name.

    Raises:
        UsageError (exit 2): no build, or more than one, answers to it.
    """
    text = str(which).strip()
    if text.isdigit():
        k = int(text)
        if not 1 <= k <= len(builds):
            raise UsageError(f"{option} {which}: there are builds 1 to {len(builds)}")
        return k - 1
    found = [i for i, b in enumerate(builds)
             if text in (b.path, b.name) or (b.lar.path is not None and Path(text).resolve() == Path(b.lar.path))]
    if len(found) != 1:
        raise UsageError(f"{option} {which}: {'no' if not found else 'more than one'} build of the list is "
                         f"{which!r} (give its index 1-{len(builds)}, path or file name)")
    return found[0]


@dataclass
class _Bisect:
    """One bisection under way: the builds, the good end's side, each build's result so far."""

    model: Path
    specs: Tuple[str, ...]
    prepared: PreparedInputs
    adir: Path
    builds: List[Build]
    config: str
    flags: Tuple[str, ...]
    env: Tuple[Tuple[str, Optional[str]], ...]
    repeat: int
    timeout: Optional[float]
    seed: int
    operator: Optional[str]
    store: Any = None
    on_build: Optional[Callable[[Dict[str, Any]], None]] = None
    local: bool = True
    good: Optional[SideResult] = None
    good_index: int = 0
    op_id: Optional[int] = None
    entries: Dict[int, Dict[str, Any]] = field(default_factory=dict)
    reports: Dict[int, Any] = field(default_factory=dict)
    analyses: int = 0
    reused: int = 0
    runs: int = 0
    #: the naive reference and the good end against it (made when a build first leaves the band)
    ref: Optional[Reference] = None
    good_bound: Optional[SideBound] = None
    rounding_off: Optional[str] = None

    # ------------------------------------------------------------------ cache keys

    def _key(self, kind: str, build: Build) -> str:
        """What a cached result answers: this model, input, configuration, flags, environment and
        build (and, for a build's verdict, the good end and ``--operator`` it was judged by)."""
        parts = {"kind": kind, "model": sha256_file(str(self.model)),
                 "inputs": [i.sha256 for i in self.prepared.items], "config": self.config, "flags": list(self.flags),
                 "env": sorted([list(e) for e in self.env]), "build": build.identity()}
        if kind == "build":
            parts.update(good=self.builds[self.good_index].identity(), operator=self.operator,
                         rule=RULE if self.local else "outside jitter")
        else:  # the band of more runs is another band
            parts.update(repeat=self.repeat)
        return hashlib.sha256(json.dumps(parts, sort_keys=True, allow_nan=False).encode()).hexdigest()[:32]

    def _cached(self, command: str, setting: str, key: str) -> Optional[Dict[str, Any]]:
        if self.store is None:
            return None
        rows = [r for r in self.store.runs(model=sha256_file(str(self.model)))
                if r["command"] == command and (r["settings"] or {}).get(setting) == key]
        return rows[-1] if rows else None

    def _write(self, summary: Any) -> None:
        if self.store is not None:
            self.store.write(summary)

    # ------------------------------------------------------------------ the good end

    def measure_good(self, g: int) -> None:
        """The good end's band: from the store (its shake folder still on disk), else measured."""
        b = self.builds[g]
        self.good_index = g
        key = self._key("good", b)
        row = self._cached("shake", "bisect_good", key)
        if row is not None and row.get("analysis_dir"):
            try:
                self.good = read_side("a", row["analysis_dir"])
            except LarPrecError:
                self.good = None
        source = "store" if self.good is not None else "run"
        if self.good is None:
            out = self.adir / f"{b.index:02d}-good-{_safe(b.name)}"
            try:
                self.good = run_side(self.model, self.specs, Side("a", lar=b.path, env=self.env), out,
                                     repeat=self.repeat, config=self.config, extra_flags=self.flags,
                                     timeout=self.timeout, seed=self.seed)
            except RunError as exc:
                raise RunError(f"bisect: the good end {b.label()} cannot run the model ({exc}): it must run to "
                               "measure the band the other builds are judged by; choose a good end that runs",
                               run_dir=exc.run_dir, returncode=exc.returncode, argv=exc.argv,
                               stderr_tail=exc.stderr_tail) from None
            self.analyses += 1
            self.runs += len(self.good.runs)
            if self.store is not None:
                self._write(summary_from_report(read_json(self.good.dir / "report.json"),
                                                settings={"bisect_good": key}))
        else:
            self.reused += 1
        self.op_id = self._operator_id()
        jit = [v for v in self.good.band.values() if math.isfinite(v)]
        self._enter(g, {"verdict": GOOD, "source": source, "dir": str(self.good.dir),
                        "why": f"the good end: {len(self.good.runs)} runs measure the band (largest jitter "
                               f"{max(jit) if jit else 0.0:.3g})"})

    def _operator_id(self) -> Optional[int]:
        if self.operator is None:
            return None
        assert self.good is not None
        folder = DumpFolder(self.good.dump)
        keys = dump_keys(self.good.dump)
        by_key = {k: i for i, k in keys.items()}
        for cand in (f"n/{self.operator}", self.operator):
            if cand in by_key:
                return by_key[cand]
        named = [i for i in folder.ids if folder[i].var.name == self.operator]
        if named:
            return named[-1]
        if self.operator.isdigit() and int(self.operator) in folder:
            return int(self.operator)
        shown = ", ".join(folder[i].var.name for i in list(folder.ids)[-4:])
        raise UsageError(f"--operator {self.operator}: no variable of that name, key or id in the good end's dump "
                         f"{self.good.dump} (its last ones: {shown})")

    # ------------------------------------------------------------------ one build

    def _enter(self, i: int, entry: Dict[str, Any]) -> Dict[str, Any]:
        b = self.builds[i]
        full = {"index": b.index, "build": b.name, "path": b.path, "verdict": entry["verdict"], "source": None,
                "why": "", "dir": None, "output_max_err": None, "n_outside": None, "root": None, **entry}
        self.entries[i] = full
        if self.on_build is not None:
            self.on_build(full)
        return full

    def verdict(self, i: int) -> str:
        return self.entries[i]["verdict"] if i in self.entries else UNTESTED

    def probe(self, i: int) -> Dict[str, Any]:
        """Build ``i`` judged against the good end's band: from the cache, else one run of it."""
        if i in self.entries:
            return self.entries[i]
        b = self.builds[i]
        key = self._key("build", b)
        row = self._cached("diff", "bisect_key", key)
        cached = (row or {}).get("settings", {}).get("bisect_result")
        # the store is data: a result that is not one of ours is not reused
        if isinstance(cached, dict) and cached.get("verdict") in (GOOD, BAD, SKIP):
            self.reused += 1
            root = cached.get("root")
            root = root if isinstance(root, dict) and {"id", "name", "opr_type"} <= set(root) else None
            if root is not None and not isinstance(root.get("local_roots", []), list):
                root = {**root, "local_roots": []}
            return self._enter(i, {**{k: cached.get(k) for k in _RESULT_KEYS}, "root": root, "source": "store"})
        self.analyses += 1
        out = self.adir / f"{b.index:02d}-{_safe(b.name)}"
        self.runs += 1
        try:
            rec = run_once(self.model, self.prepared, self.config, out, lar=b.lar, timeout=self.timeout,
                           extra_flags=self.flags, extra_env=dict(self.env), label="run")
        except RunError as exc:
            result = {"verdict": SKIP, "dir": str(out),
                      "why": f"cannot run the model (skipped, not bad): {_first_line(str(exc), exc.stderr_tail)}"}
            self._write_skip(out, exc, key, result)
            return self._enter(i, {**result, "source": "run"})
        side = SideResult("b", out, Path(str(rec.dump_dir)), {}, (rec,), {"build": b.lar.describe()}, str(self.model),
                          measured=False)
        try:
            j = judge(self.good, side, out)  # type: ignore[arg-type]
        except (DumpFolderError, DumpFormatError) as exc:  # it ran, but what it wrote is no dump: untestable
            result = {"verdict": SKIP, "dir": str(out), "why": f"its dump cannot be read (skipped, not bad): {exc}"}
            return self._enter(i, {**result, "source": "run"})
        watched = [self.op_id] if self.op_id is not None else list(j.outputs)
        if j.differing(watched):  # outside the band: rounding, or a change?
            j = self._rounding(j, b, side, out)
        result = self._result(j, out)
        rtr = self._again(j, b, side, out, watched) if result["verdict"] == BAD else None
        if rtr is not None:
            result["run_to_run"] = rtr.to_json()
            result["why"] += f"; run again: {rtr.words}"
        report = diff_report(j, self.good, side, model=str(self.model), adir=out,  # type: ignore[arg-type]
                             extra={"bisect": {"build": b.label(), "good": self.builds[self.good_index].label(),
                                               **{k: result[k] for k in ("verdict", "why")}}},
                             notes=[f"bisect: build {b.label()} (one run) against the good end's band"],
                             run_to_run=rtr)
        write_json(report, out / "report.json")
        self.reports[i] = report
        if self.store is not None:
            self._write(summary_from_report(report, settings={"bisect_key": key, "bisect_result": result}))
        return self._enter(i, {**result, "source": "run"})

    def _rounding(self, j: Judged, b: Build, side: SideResult, out: Path) -> Judged:
        """Move the vars outside the band that are within rounding (the good end and this build
        each against the naive reference; the reference and the good end measured once)."""
        if not self.local:
            return replace(j, rounding=not_judged("rounding not judged (--no-local): bad is outside the band"))
        g = self.builds[self.good_index]
        try:
            if self.ref is None and self.rounding_off is None:
                try:
                    self.ref = naive_reference(self.model, self.prepared, self.adir / "rounding", lar=g.lar,
                                               extra_flags=self.flags, timeout=self.timeout)
                    self.runs += 1
                    self.good_bound = measure_side(self.ref, "a", self.good.dump if self.good else None,  # good end
                                                   self._cfg(), self.adir / "rounding" / "good", lar=g.lar,
                                                   timeout=self.timeout)
                    self.runs += self.good_bound.runs
                except (AnalysisInterrupted, KeyboardInterrupt):
                    raise
                except LarPrecError as exc:
                    self.rounding_off = (f"rounding not judged: the naive reference could not be made "
                                         f"({type(exc).__name__}: {' '.join(str(exc).split())[:300]})")
            if self.ref is None or self.good_bound is None:
                return replace(j, rounding=not_judged(self.rounding_off or "rounding not judged"))
            mine = measure_side(self.ref, "b", side.dump, self._cfg(), out / "rounding", lar=b.lar, timeout=self.timeout)
            self.runs += mine.runs
        except KeyboardInterrupt:
            raise AnalysisInterrupted(f"interrupted; every build's folder is kept in {self.adir}",
                                      analysis_dir=self.adir) from None
        dt = compute_dtype(self._cfg().flags)
        return with_rounding(j, judge_rounding(j, self.ref, self.good_bound, mine, outside=OUTSIDE, differs=DIFFERS,
                                               dtypes=(dt, dt)))

    def _cfg(self) -> Any:
        return side_config(self.config, self.flags, Side("x", env=self.env))

    def _again(self, j: Judged, b: Build, side: SideResult, out: Path, watched: List[int]) -> Optional[RunToRun]:
        """A bad build run once more: its wrong watched values the same bits, or not (None when
        that run fails: the bisection's answer stands)."""
        a_to_b = {a_id: b_id for b_id, a_id in j.b_to_a.items()}
        wrong = [a_to_b[i] for i in j.differing(watched) if i in a_to_b]

        def rerun() -> Path:
            self.runs += 1
            rec = run_once(self.model, self.prepared, self.config, out, lar=b.lar, timeout=self.timeout,
                           extra_flags=self.flags, extra_env=dict(self.env), label="run-again")
            return Path(str(rec.dump_dir))

        try:
            return rerun_and_compare(side.dump, rerun, watched=wrong, under=" ".join(self.flags))
        except KeyboardInterrupt:
            raise AnalysisInterrupted(f"interrupted; every build's folder is kept in {self.adir}",
                                      analysis_dir=self.adir) from None
        except (RunError, DumpFolderError, DumpFormatError):
            return None

    def _result(self, j: Judged, out: Path) -> Dict[str, Any]:
        """Bad or good, and why: the watched vars (the model's outputs, or ``--operator``'s)."""
        watched = [self.op_id] if self.op_id is not None else list(j.outputs)
        names = {d.id: d.name for d in j.tree.diffs}
        errs = [d.max_err for d in j.tree.diffs if d.id in watched and d.max_err is not None]
        roots = j.tree.roots()
        root = roots[0] if roots else None
        res: Dict[str, Any] = {"dir": str(out), "output_max_err": json_number(max(errs)) if errs else None,
                               "n_outside": len(j.differing()), "n_within_rounding": j.counts()[ROUNDING],
                               "run_to_run": None,
                               "root": None if root is None else {"id": int(root.id), "name": root.name,
                                                                  "opr_type": root.opr_type,
                                                                  "max_err": json_number(root.max_err),
                                                                  "local_roots": _local_roots(j)}}
        what = "the --operator variable" if self.op_id is not None else "output"
        lost, out_of_band = j.unpaired(watched), j.differing(watched)
        if lost:
            return {**res, "verdict": BAD, "why": f"{what} var {lost[0]} has no partner in this build's graph"}
        if out_of_band:
            k = out_of_band[0]
            d = j.tree.node(k)
            judged = j.rounding is not None and j.rounding.measured
            how = "outside rounding" if judged else j.verdicts[k].replace('_', ' ')
            return {**res, "verdict": BAD,
                    "why": f"{what} {names.get(k, k)} leaves the good end's band: {how}, "
                           f"max_err {_num(d.max_err)} > band {_num(j.jitter[k][0])}"}
        rounded = [k for k in watched if j.verdicts.get(k) == ROUNDING]
        if rounded:
            return {**res, "verdict": GOOD,
                    "why": f"{what}s outside the good end's band but within rounding (largest max_err "
                           f"{_num(max(errs) if errs else 0.0)}): the good end and this build each within every "
                           "operator's bound of the naive reference, a kernel change, both correct"}
        return {**res, "verdict": GOOD, "why": f"{what}s within the good end's band (largest max_err "
                                                f"{_num(max(errs) if errs else 0.0)})"}

    def _write_skip(self, out: Path, exc: RunError, key: str, result: Dict[str, Any]) -> None:
        if self.store is None or exc.run_dir is None:
            return
        try:
            runs = [read_run_json(exc.run_dir)]
        except LarPrecError:
            return
        self._write(Summary(run_summary("diff", f"skipped: {result['why']}", exc.exit_code, runs=runs,
                                        analysis_dir=str(out), n_vars=0, n_not_ok=0, n_roots=0, output_err=None,
                                        inputs=self.prepared.to_json(), model=str(self.model),
                                        settings={"bisect_key": key, "bisect_result": result}), ()))

    # ------------------------------------------------------------------ the search

    def search(self, g: int, b: int) -> Tuple[int, int]:
        """Bisect between a good ``g`` and a bad ``b``: (the last good, the first bad) found."""
        lo, hi = g, b
        while True:
            cands = [i for i in range(lo + 1, hi) if self.verdict(i) == UNTESTED]
            if not cands:
                return lo, hi
            # the build that best halves where the first bad one may be (lo+1 .. hi); ties: the later
            p = min(cands, key=lambda i: (max(i - lo, hi - i), -i))
            v = self.probe(p)["verdict"]
            if v == BAD:
                hi = p
            elif v == GOOD:
                lo = p


def _local_roots(j: Judged) -> List[str]:
    """The build's operators out of their bound of the naive reference (its local roots), where
    rounding was judged: the operator to look at when the first var outside was fused away."""
    r = j.rounding
    return [name for _i, name in r.b.roots] if r is not None and r.measured else []


def _safe(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.+-]", "_", name)[:60] or "build"


def _first_line(*texts: str) -> str:
    for t in texts:
        for ln in (t or "").splitlines():
            if ln.strip():
                return ln.strip()[:300]
    return "no message"


def _num(x: Optional[float]) -> str:
    return "NaN/Inf" if x is None or not math.isfinite(x) else f"{x:.3g}"


def bisect(model: PathLike, inputs: Union[str, Sequence[str]], builds: Union[str, Sequence[str]], good: str,
           bad: str, *, operator: Optional[str] = None, repeat: int = 2, config: str = "default",
           extra_flags: Sequence[str] = (), env: Optional[Dict[str, Optional[str]]] = None,
           out: Optional[PathLike] = None, store: Optional[str] = None, timeout: Optional[float] = None,
           seed: int = 0, html: bool = True, on_build: Optional[Callable[[Dict[str, Any]], None]] = None,
           local: bool = True) -> Dict[str, Any]:
    """Find the first bad build between ``good`` and ``bad`` (index, path or name of ``builds``)
    and the root operator in it. Returns the ``lar-prec.bisect/1`` object (``exit_code`` 1 when a
    first bad build is found, 0 when the bad end stays within the band or within rounding; with
    ``local`` False bad is outside the band, rounding not judged), also written as
    ``bisect.json`` (and ``bisect.html``) in the analysis folder. ``on_build(entry)`` is called
    as each build's result is known.

    Raises:
        UsageError (exit 2): fewer than 2 builds, a build that does not exist, ends in the wrong
        order, a bad ``--operator``; RunError (exit 3): an end cannot run the model;
        StoreError (exit 2): the store.
    """
    blist, left_out = read_builds(builds)
    for e in left_out:
        log.warning("--builds: left out %s: it %s", e["path"], e["why"])
    g, b = pick(blist, good, "--good"), pick(blist, bad, "--bad")
    if g >= b:
        raise UsageError(f"--good {good} (build {g + 1}) must come before --bad {bad} (build {b + 1}) in the list: "
                         "builds are ordered oldest first" if g > b else
                         f"--good and --bad name the same build ({blist[g].label()})")
    if repeat < MIN_RUNS:
        raise UsageError(f"--repeat {repeat}: the good end runs at least {MIN_RUNS} times (its jitter is the band)")
    # checked with the good end's build; each build's runs bring their own
    prep = prepare(Settings(model=model, inputs=inputs, out=out, lar=blist[g].lar, timeout=timeout,
                            extra_flags=tuple(extra_flags), seed=seed), "bisect")
    model_path, adir, prepared = prep.model, prep.dir, prep.inputs
    db = None
    if store:
        db = open_store(store)
    env_t = tuple((env or {}).items())
    st = _Bisect(model_path, tuple(f"{i.name}:{i.path}" for i in prepared.items), prepared, adir, blist, config,
                 tuple(extra_flags), env_t, repeat, timeout, seed, operator, db, on_build, local)
    try:
        st.measure_good(g)
        end = st.probe(b)
        if end["verdict"] == SKIP:
            raise RunError(f"bisect: the bad end {blist[b].label()} {end['why']}; choose a bad end that runs",
                           run_dir=Path(end["dir"]) if end.get("dir") else None)
        lo, hi = (g, b) if end["verdict"] == BAD else (g, -1)
        if hi >= 0:
            lo, hi = st.search(g, b)
    except KeyboardInterrupt:  # the run under way was killed with its process group; its run.json says so
        kept = " (and each result so far in the store)" if db is not None else ""
        raise AnalysisInterrupted(f"interrupted; every build's folder is kept in {adir}{kept}",
                                  analysis_dir=adir) from None
    finally:
        if db is not None:
            db.close()
    result = {**_result_json(st, g, b, lo, hi, store), "input_summary": input_summary(st.prepared)}
    result["left_out"] = left_out
    if left_out:
        result["notes"].append("left out of --builds (not bisected): "
                               + "; ".join(f"{Path(e['path']).name} {e['why']}" for e in left_out))
    atomic_write_text(adir / "bisect.json", json_text(result), what="bisect result")
    if hi >= 0 and hi in st.reports and html:
        write_html(st.reports[hi], Path(st.entries[hi]["dir"]) / "report.html")
    if html:
        write_html(result, adir / "bisect.html")
    finish_analysis_dir(adir)
    return result


def _result_json(st: _Bisect, g: int, b: int, lo: int, hi: int, store: Optional[str]) -> Dict[str, Any]:
    blist = st.builds
    bound = math.ceil(math.log2(len(blist))) + 2
    first = None
    candidates: List[int] = []
    if hi < 0:
        eb = st.entries[b]
        how = ("is within rounding of the good end" if eb.get("n_within_rounding") and "within rounding" in eb["why"]
               else "stays within the good end's band")
        verdict = f"the bad end {blist[b].label()} {how} ({eb['why']}): nothing to bisect"
    else:
        e = st.entries[hi]
        skipped = [i for i in range(lo + 1, hi) if st.verdict(i) == SKIP]
        candidates = [blist[i].index for i in skipped + [hi]]
        root = e.get("root")
        where = f"; root there: {root['name']} ({root['opr_type']}, var {root['id']})" if root else ""
        lroots = [n for n in (root or {}).get("local_roots") or () if n != root["name"]]
        if lroots:
            where += f"; out of its bound of the naive reference there: {', '.join(lroots[:3])}"
        first = {"index": blist[hi].index, "build": blist[hi].name, "path": blist[hi].path, "root": root,
                 "why": e["why"], "dir": e.get("dir"), "run_to_run": e.get("run_to_run"),
                 # its diff against the good end: made now, or by the bisection that cached it if still there
                 "report": str(Path(e["dir"]) / "report.json") if e.get("dir") and (Path(e["dir"]) / "report.json").is_file()
                 else None}
        if skipped:
            verdict = (f"the first bad build is one of {', '.join(blist[i].label() for i in skipped + [hi])}: "
                       f"skipped builds hide which ({blist[lo].label()} is good, {blist[hi].label()} bad){where}")
        else:
            verdict = f"first bad build: {blist[hi].label()} (after good {blist[lo].label()}){where}"
    notes = [f"{st.analyses} analyses ({st.runs} load_and_run runs) for {len(blist)} builds; at most "
             f"ceil(log2 N) + 2 = {bound} without skips"
             + (f"; {st.reused} result(s) reused from the store" if st.reused else "")]
    skips = [st.entries[i] for i in sorted(st.entries) if st.entries[i]["verdict"] == SKIP]
    if skips:
        notes.append("skipped (cannot run the model, not counted as bad): "
                     + ", ".join(f"#{e['index']} {e['build']}" for e in skips))
    good = st.good
    assert good is not None
    return {
        "schema": SCHEMA, "command": "bisect", "model": str(st.model), "inputs": st.prepared.to_json(),
        "config": st.config, "flags": list(st.flags), "env": {k: v for k, v in st.env}, "repeat": st.repeat,
        "operator": None if st.operator is None else {"name": st.operator, "id": st.op_id},
        "verdict": verdict, "exit_code": 1 if hi >= 0 else 0,
        "good": blist[g].index, "bad": blist[b].index, "first_bad": first, "candidates": candidates,
        "builds": [st.entries.get(i) or {"index": x.index, "build": x.name, "path": x.path, "verdict": UNTESTED}
                   for i, x in enumerate(blist)],
        "analyses": st.analyses, "reused": st.reused, "runs": st.runs, "bound": bound,
        "band": {"from": str(good.dir), "runs": len(good.runs), "outputs": {
            str(k): json_number(good.band.get(k, 0.0)) for k in final_outputs(good.dump)}},
        "analysis_dir": str(st.adir), "store": store, "notes": notes,
        "rule": RULE if st.local else "outside jitter",
        "rounding": {"reference": None if st.ref is None else st.ref.to_json(),
                     "good": None if st.good_bound is None else st.good_bound.to_json(), "why": st.rounding_off
                     or (None if st.local else "rounding not judged (--no-local): bad is outside the band")},
    }
