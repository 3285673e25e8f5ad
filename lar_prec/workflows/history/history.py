"""The store's commands as library functions: ``store_result`` (an analysis written after it
finished, ``--store``), ``add_analysis`` (``lar-prec store add DIR``), ``check``, ``baseline
update`` and ``history``. Each answers with a JSON object (schemas ``lar-prec.check/1`` and
``lar-prec.history/1``; the page draws the history as the trend view).
"""
from __future__ import annotations

import math
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Dict, List, Mapping, Optional, Sequence

from lar_prec.errors import UsageError
from lar_prec.inputspec import read_json_file, read_text_file
from lar_prec.outputs import atomic_write_text
from lar_prec.report.model import read_json
from lar_prec.store.db import Store, open_store, read_runs_json, run_summary_of, shown_url
from lar_prec.store.summary import summarize
from lar_prec.workflows.history.speed import band_walk, judge_speed, speed_words
from lar_prec.workflows.history.rule import (MIN_HISTORY, TWO_ULPS, Band, Spread, bands_of, baseline_key,
                                             baseline_line, baseline_text, group_history, judge_baseline, judge_run,
                                             output_margin, parse_baseline, reach, spreads)

CHECK_SCHEMA = "lar-prec.check/1"
HISTORY_SCHEMA = "lar-prec.history/1"
#: largest baseline file read (one line of about 200 bytes per model and configuration)
BASELINE_LIMIT = 64 << 20


def store_result(url: str, result: Any, *, argv: Sequence[str] = (), exit_code: Optional[int] = None) -> int:
    """Write a finished analysis into the store at ``url`` (one transaction); its id there.

    Raises StoreError (exit 2): nothing of the analysis is in the store, its folder is kept."""
    return stored_result(url, result, argv=argv, exit_code=exit_code)["id"]


def stored_result(url: str, result: Any, *, argv: Sequence[str] = (), exit_code: Optional[int] = None
                  ) -> Dict[str, Any]:
    """:func:`store_result`, saying what was stored: ``id``, ``uid`` (the run's name in
    ``history``/``check``), ``operators`` (rows written) and ``store`` (the URL, password hidden)."""
    summary = summarize(result, argv=argv, exit_code=exit_code)
    with open_store(url) as store:
        run_id = store.write(summary)
    return {"id": run_id, "uid": summary.run.uid, "operators": len({o.op_key for o in summary.ops}),
            "store": shown_url(url)}


def _read_analysis(adir: Path) -> Any:
    """The result of an analysis folder: report.json, or mixed.json / quant.json."""
    for name in ("report.json", "mixed.json", "quant.json"):
        p = adir / name
        if os.path.lexists(p):
            if name == "report.json":
                return read_json(p)
            return read_json_file(p, f"analysis result {name}")
    raise UsageError(f"{adir} is not an analysis folder: expected report.json, mixed.json or quant.json in it")


def add_analysis(url: str, adir: str, argv: Sequence[str] = ()) -> Dict[str, Any]:
    """Write an analysis folder already on disk into the store (after a store write failed, or
    for analyses made without ``--store``). A folder the store holds already is not written twice."""
    path = Path(adir).resolve()
    result = _read_analysis(path)
    code = None
    if isinstance(result, Mapping):
        code = 1 if (result.get("keep_in_float") or result.get("verdict") in ("fixed", "not_fixed")) else 0
    summary = summarize(result, argv=argv, exit_code=code)
    with open_store(url) as store:
        # a run stored before runs had their content's uid: known by its folder
        old = store.runs(analysis_dir=str(summary.run.analysis_dir or path))
        if old:
            return {"added": False, "run": old[-1]["uid"], "why": "the store holds this analysis already"}
        # insert-or-ignore by the content's uid: several adds of one folder at once store it once
        _, added = store.add(summary)
    if not added:
        return {"added": False, "run": summary.run.uid, "why": "the store holds this analysis already"}
    return {"added": True, "run": summary.run.uid}


# --------------------------------------------------------------------------- check


def _checked_run(store: Store, adir: Optional[str]) -> Dict[str, Any]:
    """The run to check: the one the store holds for ``adir`` (written to it first when it does
    not), or the store's newest run."""
    if adir is None:
        newest = store.runs(limit=1, newest_first=True)
        if not newest:
            raise UsageError(f"store {shown_url(store.url)} is empty: no run to check (an analysis with --store "
                             "writes one)")
        return newest[0]
    path = str(Path(adir).resolve())
    held = store.runs(analysis_dir=path)
    if not held:
        result = _read_analysis(Path(path))
        store.write(summarize(result))
        held = store.runs(analysis_dir=path)
    return held[-1]


@dataclass(frozen=True)
class Judgement:
    """A stored run against its series' past: ``verdicts`` (regressed and improved operators,
    each with its ``option``: none unless ``enough``), ``past_runs`` (the runs judged against),
    ``nondeterministic`` (operators whose own repeated runs differ, :class:`Spread` and the
    option), ``enough`` (the past holds ``min_history`` runs)."""

    verdicts: List[Any]
    past_runs: List[Dict[str, Any]]
    nondeterministic: List[Dict[str, Any]]
    enough: bool
    min_history: int

    def regressed(self) -> List[Any]:
        return [v for v in self.verdicts if v.verdict == "regressed"]

    def improved(self) -> List[Any]:
        return [v for v in self.verdicts if v.verdict == "improved"]


def _build(r: Mapping[str, Any]) -> Optional[str]:
    """A run's build, as repeated runs share it (the binary, its version, MegEngine's); None when
    the run names none (a compare of dumps made elsewhere: its runs cannot be told repeats)."""
    if not (r.get("lar_path") or r.get("lar_sha256") or r.get("lar_version")):
        return None
    return f"{r.get('lar_path')} | {run_summary_of(dict(r)).build}"


def judge_stored(store: Store, run: Mapping[str, Any], start: Optional[str] = None,
                 min_history: int = MIN_HISTORY) -> Judgement:
    """Each operator of a stored run (a row of :meth:`Store.runs`) against its series' runs
    before it (those from ``start`` on), one part at a time (a sweep: each option; else the
    analysis' own rows), as :mod:`lar_prec.workflows.history.rule` rules."""
    jitter = store.bands(run["model_sha256"], run["input_sha256"], run["device_kind"])
    ops = store.ops(run["id"])
    parts = sorted({o.part for o in ops})
    if len(parts) > 1:  # a sweep: its own rows are the worst over its options, each option judged itself
        parts = [p for p in parts if p]
    verdicts: List[Any] = []
    nondet: List[Dict[str, Any]] = []
    seen: Dict[int, None] = {}
    mine = _build(run)
    past_rows: Dict[str, List[Any]] = {}
    for part in parts:
        past_rows[part] = [r for r in store.series_ops(run["series"], part=part, before=run["id"])
                           if start is None or r.created >= start]
        seen.update((r.run_id, None) for r in past_rows[part])
    past_runs = store.runs(ids=list(seen)) if seen else []
    build_of = {r["id"]: b for r in past_runs for b in (_build(r),) if b is not None}
    if mine is not None:
        build_of[run["id"]] = mine
    enough = len(past_runs) >= min_history
    for part in parts:
        part_ops = [o for o in ops if o.part == part]
        now = [(run["id"], o.op_key, o.status, o.max_err) for o in part_ops]
        spread = spreads(list(past_rows[part]) + now, build_of)
        own = {k for k, sp in spread.items() if sp.build == mine}
        grouped = group_history(past_rows[part])
        wide = reach(part_ops, grouped, {**jitter, **{k: max(jitter.get(k, 0.0), sp.spread) for k, sp in spread.items()
                                                       if math.isfinite(sp.spread)}})
        if enough:
            verdicts += judge_run(part_ops, bands_of(grouped, wide), wide, skip=own, option=part or None)
        nondet += _nondeterministic(part_ops, spread, mine, part or None)
    verdicts.sort(key=lambda v: (v.verdict != "regressed", not v.root))
    return Judgement(verdicts, past_runs, nondet, enough, min_history)


def _nondeterministic(ops: Sequence[Any], spread: Mapping[str, Spread], mine: Optional[str],
                      option: Optional[str]) -> List[Dict[str, Any]]:
    """The operators whose repeated runs differ, in the run's order; ``source``: none of its
    inputs (transitively) differs too (where the run-to-run difference starts)."""
    keys = {o.op_key for o in ops if o.op_key in spread}
    inputs = {o.op_key: tuple(o.inputs) for o in ops}
    out = []
    for o in ops:
        if o.op_key not in keys:
            continue
        sp = spread[o.op_key]
        up = set()
        todo = list(inputs.get(o.op_key, ()))
        while todo:
            k = todo.pop()
            if k not in up:
                up.add(k)
                todo.extend(inputs.get(k, ()))
        out.append({"op_key": o.op_key, "name": o.name, "opr_type": o.opr_type, "option": option,
                    "spread": sp.spread if math.isfinite(sp.spread) else None, "nonfinite": not math.isfinite(sp.spread),
                    "range": [sp.lo, sp.hi], "runs": sp.runs, "build": sp.build.split(" | ", 1)[-1],
                    "this_build": sp.build == mine, "source": not (up & keys)})
    return out


def check(url: str, analysis_dir: Optional[str] = None, *, baseline: Optional[str] = None,
          since: Optional[str] = None, min_history: int = MIN_HISTORY) -> Dict[str, Any]:
    """Judge an analysis against its series' history (and the baseline file): the
    ``lar-prec.check/1`` object; ``exit_code`` 1 on a regression or an unrecorded improvement
    of the baseline, or a speed regression (:mod:`lar_prec.workflows.history.speed`), else 0. ``since``: a run uid (prefix) before which history is ignored;
    ``min_history``: past runs needed before anything is said regressed or improved."""
    if min_history < 1:
        raise UsageError(f"--min-history {min_history}: at least 1 past run (a band needs a past)")
    recorded = None
    if baseline is not None:
        p = Path(baseline)
        if not os.path.lexists(p):
            raise UsageError(f"baseline {p} does not exist (write it with `lar-prec baseline update`)")
        recorded = parse_baseline(read_text_file(p, "baseline", limit=BASELINE_LIMIT), str(p))
    with open_store(url) as store:
        run = _checked_run(store, analysis_dir)
        start = None
        if since is not None:
            found = store.runs(uid=since)
            if not found:
                raise UsageError(f"store {url}: no run {since!r} (a run uid or its prefix, see lar-prec history)")
            start = found[0]["created"]
        jm = judge_stored(store, run, start, min_history)
        speed = judge_speed(store, run, start, min_history)
    past_runs = jm.past_runs
    by_run = {r["id"]: r for r in past_runs}
    for v in jm.verdicts:
        if v.last_good:
            r = by_run.get(v.last_good["run_id"], {})
            v.last_good.update(uid=r.get("uid"), build=run_summary_of(r).build if r else None)  # type: ignore[union-attr]
    regressed, improved = jm.regressed(), jm.improved()
    out: Dict[str, Any] = {
        "schema": CHECK_SCHEMA, "store": shown_url(url), "run": read_runs_json([run])[0], "history_runs": len(past_runs),
        "regressed": [v.to_json() for v in regressed], "improved": [v.to_json() for v in improved],
        "min_history": min_history, "enough_history": jm.enough, "nondeterministic": jm.nondeterministic,
        "speed": {"timed": bool(speed), "parts": [v.to_json() for v in speed],
                  "regressed": [v.option for v in speed if v.verdict == "regressed"],
                  "faster": [v.option for v in speed if v.verdict == "faster"], "words": speed_words(speed) or None},
    }
    code = 1 if regressed or any(v.verdict == "regressed" for v in speed) else 0
    parts = []
    if not past_runs:
        parts.append("no history for this model, input and configuration on this kind of device yet")
    elif not jm.enough:
        parts.append(f"not enough history ({len(past_runs)} of {min_history} runs): nothing is judged regressed "
                     "or improved yet")
    else:
        parts.append(f"{len(regressed)} operator(s) regressed, {len(improved)} improved against {len(past_runs)} "
                     "past run(s)")
        if regressed:
            where = f" under {regressed[0].option}" if regressed[0].option else ""
            parts[-1] += f"; root: {regressed[0].name}{where}"
    sources = [n for n in jm.nondeterministic if n["source"]]
    if sources:
        n = sources[0]
        under = f" under {n['option']}" if n["option"] else ""
        spread = "NaN/Inf in some runs" if n["nonfinite"] else f"spread {n['spread']:.3g}"
        parts.append(f"nondeterministic{under}: {n['name']} ({n['opr_type']}) gives another error in each run of "
                     f"one build ({spread} over {n['runs']} runs): it reads memory it did not write, or races; "
                     "never a regression of itself" + (f" (+{len(sources) - 1} more)" if len(sources) > 1 else ""))
    if speed:
        parts.append(speed_words(speed))
    if recorded is not None:
        line = recorded.get(baseline_key(run))
        outs = [r["output_err"] for r in past_runs if r.get("output_err") is not None]
        state, why = judge_baseline(run, line, output_margin(line["output_err"] if line else None, outs))
        out["baseline"] = {"file": baseline, "state": state, "why": why}
        parts.append(f"baseline: {why}")
        if state in ("regressed", "improved", "unrecorded"):
            code = 1
    out["verdict"] = "; ".join(parts)
    out["exit_code"] = code
    return out


def update_baseline(url: str, baseline: str) -> Dict[str, Any]:
    """Rewrite the baseline file from the newest run of every series in the store (lines of
    models the store does not hold are kept)."""
    p = Path(baseline)
    lines: Dict[str, str] = {}
    if os.path.lexists(p):
        text = read_text_file(p, "baseline", limit=BASELINE_LIMIT)
        parse_baseline(text, str(p))  # refuse to rewrite a file that is not a baseline
        for line in text.splitlines():
            if line.strip() and not line.startswith("#"):
                lines[line.rpartition(" | ")[0]] = line
    with open_store(url) as store:
        newest: Dict[str, Dict[str, Any]] = {}
        for r in store.runs():
            newest[r["series"]] = r
    changed = 0
    for r in newest.values():
        line = baseline_line(r)
        key = baseline_key(r)
        changed += lines.get(key) != line
        lines[key] = line
    atomic_write_text(p, baseline_text(lines), what="baseline")
    return {"file": str(p), "lines": len(lines), "changed": changed}


# --------------------------------------------------------------------------- history


def _points(rows: Sequence[Mapping[str, Any]], builds: Mapping[int, str]) -> List[Dict[str, Any]]:
    return [{"run": r["uid"], "created": r["created"], "build": builds.get(r["run_id"]), "max_err": r["max_err"],
             "local_err": r["local_err"], "status": r["status"], "algorithm": r["algorithm"]} for r in rows]


def history(url: str, *, model: Optional[str] = None, op: Optional[str] = None, diff: Sequence[str] = (),
            last_runs: int = 50, limit_ops: int = 50) -> Dict[str, Any]:
    """The ``lar-prec.history/1`` object: the series of a model (default: the newest run's
    model) with their runs over time, and operators' errors over builds with the first run
    where each left its band: ``op`` (a key or a name) over the whole series, else the
    ``limit_ops`` operators that moved most over the last ``last_runs`` runs; ``diff``: what
    changed between two runs (uids)."""
    with open_store(url) as store:
        if model is None:
            newest = store.runs(limit=1, newest_first=True)
            if not newest:
                return {"schema": HISTORY_SCHEMA, "store": shown_url(url), "model": None, "series": [], "diff": None}
            model = newest[0]["model_sha256"] or newest[0]["model_name"]
        runs = store.runs(model=model)
        if not runs:
            raise UsageError(f"store {url}: no run of model {model!r} (a model file name or its sha256)")
        series: Dict[str, List[Dict[str, Any]]] = {}
        for r in runs:
            series.setdefault(r["series"], []).append(r)
        out_series = []
        for key, rs in series.items():
            builds = {r["id"]: run_summary_of(r).build for r in rs}
            uids = {r["id"]: r for r in rs}
            last = rs[-1]
            jitter = store.bands(last["model_sha256"], last["input_sha256"], last["device_kind"])
            by_op: Dict[str, List[Dict[str, Any]]] = {}
            if op is not None:
                keys = [o.op_key for o in store.ops(last["id"], part="") if op in (o.op_key, o.name)]
                for k in keys:
                    by_op[k] = store.op_history(key, k)
            else:
                for o in store.ops_of_runs([r["id"] for r in rs[-last_runs:]]):
                    by_op.setdefault(o["op_key"], []).append({**o, "uid": uids[o["run_id"]]["uid"],
                                                              "created": uids[o["run_id"]]["created"]})
            series_ops = []
            for k, rows in by_op.items():
                vals = [r["max_err"] for r in rows if r["max_err"] is not None]
                series_ops.append({"op_key": k, "name": rows[-1]["name"], "opr_type": rows[-1]["opr_type"],
                                   "moved": (max(vals) - min(vals)) if vals else 0.0,
                                   "first_out_of_band": _first_out(rows, jitter.get(k, 0.0)),
                                   "points": _points(rows, builds)})
            series_ops.sort(key=lambda x: -x["moved"])
            out_series.append({
                "series": key, "command": last["command"], "config": last["config"], "options": list(last["options"]),
                "device_kind": last["device_kind"], "model_name": last["model_name"],
                "runs": [{"run": r["uid"], "created": r["created"], "build": builds[r["id"]], "device": r["device"],
                          "verdict": r["verdict"],
                          "exit_code": r["exit_code"], "output_err": r["output_err"], "n_roots": r["n_roots"]}
                         for r in rs],
                "ops": series_ops if op is not None else series_ops[:limit_ops],
                "speed": _speed_series(store, last)})
        diff_out = _diff(store, diff) if diff else None
    return {"schema": HISTORY_SCHEMA, "store": shown_url(url), "model": model, "series": out_series, "diff": diff_out}


def _speed_series(store: Store, last: Mapping[str, Any]) -> List[Dict[str, Any]]:
    """The timed parts of a series' runs (the zoo's timing, ``sweep --speed-runs``), one entry per
    part and machine (CPU model, threads, load_and_run): each run's median time per iteration
    and spread, and the first run slower than the band of the ones before it (the check's rule,
    judged from MIN_HISTORY results on)."""
    groups: Dict[tuple, List[Any]] = {}
    for r, s in store.speed_history(dict(last), before=None):
        if r["series"] == last["series"] and s.status == "timed" and s.median_ms is not None:
            groups.setdefault((s.part, s.machine), []).append((r, s))
    out = []
    for (part, _), rows in groups.items():
        *_, first_out = band_walk(rows, MIN_HISTORY)
        out.append({"option": part or None, "machine": rows[-1][1].machine_words, "first_slower": first_out,
                    "points": [{"run": r["uid"], "created": r["created"], "build": run_summary_of(r).build,
                                "median_ms": s.median_ms, "spread_ms": [s.spread_lo, s.spread_hi],
                                "round_ms": list(s.round_ms)} for r, s in rows]})
    return out


def _first_out(rows: Sequence[Mapping[str, Any]], jitter: float) -> Optional[Dict[str, Any]]:
    """The first run where the operator left the band of the runs before it (docs/history.md)."""
    band = Band()
    for r in rows:
        ulps = TWO_ULPS.get(r.get("dtype") or "Float32", TWO_ULPS["Float32"])
        wide = max(jitter, r.get("floor") or 0.0)  # its own floor: the history of one operator has no graph
        if band.judge(r["max_err"], r["status"], wide, ulps) == "regressed":
            lo, hi = band.limits(wide, ulps)
            return {"run": r["uid"], "created": r["created"], "value": r["max_err"], "band": [max(lo, 0.0), hi]}
        band.accept(r["max_err"], r["status"], (r["run_id"], r["created"]), r.get("algorithm"))
    return None


def _diff(store: Store, uids: Sequence[str]) -> Dict[str, Any]:
    """Operators whose error, status or algorithm differ between runs A and B (by key)."""
    if len(uids) != 2:
        raise UsageError("--diff takes two runs: --diff A --diff B (run uids or prefixes)")
    found = []
    for u in uids:
        rs = store.runs(uid=u)
        if len(rs) != 1:
            raise UsageError(f"store {store.url}: {'no' if not rs else 'more than one'} run {u!r}")
        found.append(rs[0])
    a, b = ({o.op_key: o for o in store.ops(r["id"], part="")} for r in found)
    changed = []
    for k in a.keys() | b.keys():
        oa, ob = a.get(k), b.get(k)
        if oa is None or ob is None or (oa.max_err, oa.status, oa.algorithm) != (ob.max_err, ob.status, ob.algorithm):
            changed.append({"op_key": k, "name": (oa or ob).name, "a": None if oa is None else
                            {"max_err": oa.max_err, "status": oa.status, "algorithm": oa.algorithm},
                            "b": None if ob is None else {"max_err": ob.max_err, "status": ob.status,
                                                          "algorithm": ob.algorithm}})
    changed.sort(key=lambda c: c["name"])
    fields = ("lar_path", "lar_sha256", "lar_version", "megengine_version", "device", "options", "config", "command")
    env = {f: [found[0].get(f), found[1].get(f)] for f in fields if found[0].get(f) != found[1].get(f)}
    return {"a": found[0]["uid"], "b": found[1]["uid"], "run_differences": env, "ops": changed}
