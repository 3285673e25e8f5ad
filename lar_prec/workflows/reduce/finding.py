"""The finding ``lar-prec reduce`` starts from, read from an analysis folder as data.

A finding is one failure an analysis found: its **root** operator (the var where the error is
made, by the reference dump's id, and its stable key, :mod:`lar_prec.opkey`), its **class**
(``wrong_value``, ``nan``, ``crash``, ``stall``, ``jitter``), the error the analysis saw there
in a run of the whole model and the operator's **floor** (its own rounding: the local floor of
:mod:`lar_prec.diagnosis.floors` where local error measured it, else the threshold or tolerance
the analysis judged it by). It also says how to run the failing side again: a configuration
*name* and load_and_run flags taken from the analysis' run and checked against the flags a repro
may carry (:func:`lar_prec.diagnosis.repro_check.check_flags`: none that reads or writes a
file), and the reference dump whose values feed every cut. Nothing of the folder is executed;
paths must lie inside it, the model must be a file.

"The same way" (:attr:`Finding.bar`): a candidate's root must err by at least ``k`` x its floor
with ``k`` = the finding's margin (error / floor) / 2, at least 1: half the error the analysis saw,
and always above the floor. A NaN finding needs a NaN or Inf; a jitter needs any difference
beyond the floor between two runs.
"""
from __future__ import annotations

import math
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple

from lar_prec.diagnosis.local import layout_fmt
from lar_prec.diagnosis.repro_check import ALLOWED_ENV, check_flags, read_regular
from lar_prec.dumps.keys import dump_keys
from lar_prec.errors import UsageError
from lar_prec.inputspec import path_problem
from lar_prec.outputs import sha256_file
from lar_prec.records import PathLike
from lar_prec.report.model import Report, read_json
from lar_prec.report.records import ReportRun
from lar_prec.run.config import CONFIGS, RunConfig, get_config
from lar_prec.run.record import read_run_json
from lar_prec.stall import fatal_line

CLASSES = ("wrong_value", "nan", "crash", "stall", "jitter")
#: the commands whose analysis folders hold findings
COMMANDS = ("naive-vs-default", "sweep", "shake", "diff")
#: a sweep option's status -> the class of its failure
_FAILED_STATUS = {"crashed": "crash", "load_failed": "crash", "failed": "crash", "stalled": "stall", "hung": "stall"}


#: what any MegEngine run may print that tells nothing of a failure: its start-up logs
#: (``info: ...``, ``debug: failed to load cuda func``); and a terminal's colours
_NOISE = re.compile(r"^\s*(info|debug)\b|cuda", re.I)
_ANSI = re.compile(r"\x1b\[[0-9;]*m")
#: what differs between two runs of one failure: the log's time stamp, paths, addresses
_STAMP = re.compile(r"^\d+ \d\d:\d\d:\d\d\s*(\[\w+\])?\s*")
_PATH = re.compile(r"(?<![\w.])/[^\s:'\"]+")
_ADDR = re.compile(r"0x[0-9a-fA-F]+")


def first_fatal(stderr: str) -> Optional[str]:
    """MegEngine's first fatal line on ``stderr`` (:func:`lar_prec.stall.fatal_line`), without what
    differs between two runs of one failure (its time stamp, paths, addresses)."""
    lines = (_ANSI.sub("", ln) for ln in stderr.splitlines())
    line = fatal_line("\n".join(ln for ln in lines if not _NOISE.search(ln)), first=True)
    if line is None:
        return None
    return _ADDR.sub("0x?", _PATH.sub("<path>", _STAMP.sub("", line.strip())))[:200]


def run_stderr(folder: Path) -> str:
    """The stderr a run left in its folder: a regular file of at most 1 MB, text only compared."""
    try:
        return read_regular(folder / "stderr.txt", 1 << 20, "a run's stderr").decode("utf-8", "replace")
    except UsageError:
        return ""


def ending(status: str, signal: Any, returncode: Optional[int], stderr: str) -> Tuple[str, str]:
    """(class, signature) of a run that did not end: ``stall`` (stalled, or hung past its
    timeout) or ``crash`` (a signal, an exit code); the signature is MegEngine's first fatal line
    on stderr (``fatal: ...``, :func:`first_fatal`), else how the run ended (``ended: killed by SIGABRT``)."""
    klass = "stall" if status in ("stalled", "timeout", "hung") else "crash"
    line = first_fatal(stderr)
    if line:
        return klass, f"fatal: {line}"
    if klass == "stall":
        return klass, f"ended: {'no CPU' if status == 'stalled' else 'timeout'}"
    return klass, f"ended: killed by {signal}" if signal else f"ended: exit {returncode}"


def same_ending(f: "Finding", klass: str, sig: str) -> bool:
    """A run ends as the finding did: same signature and class; a crash and a stall after the
    same first fatal line are one failure (a dead MegEngine exits or parks as its threads happen to)."""
    return sig == f.signature and (klass == f.klass or sig.startswith("fatal: "))


@dataclass(frozen=True)
class Finding:
    """One failure of an analysis, and how to run it again (see the module docstring)."""

    command: str
    analysis_dir: Path
    model: Path
    ref_dump: Path
    test: RunConfig
    reference: RunConfig
    klass: str
    root_id: Optional[int]
    root_name: Optional[str]
    root_key: Optional[str]
    err: Optional[float]
    floor: float
    option: Optional[str] = None
    signature: Optional[str] = None
    source: str = ""
    ran_with: str = ""

    @property
    def margin(self) -> float:
        if self.err is None:
            return math.nan
        return self.err / self.floor if self.floor > 0 else math.inf

    @property
    def k(self) -> float:
        """How many floors a candidate's root must reach: the margin / 2, at least 1."""
        return max(1.0, self.margin / 2) if math.isfinite(self.margin) else math.inf

    @property
    def bar(self) -> float:
        """The error a candidate's root must reach to fail the same way."""
        if self.klass == "nan":
            return math.inf
        if self.klass == "jitter" or self.err is None:
            return self.floor
        return self.k * self.floor if self.floor > 0 and math.isfinite(self.k) else self.err / 2

    @property
    def fmt(self) -> Optional[str]:
        """The packed layout the failing side dumps in (its flags say)."""
        return layout_fmt(self.test.flags)

    def to_json(self) -> Dict[str, Any]:
        num = (lambda x: None if x is None or not math.isfinite(x) else x)
        return {"command": self.command, "analysis_dir": str(self.analysis_dir), "model": str(self.model),
                "ref_dump": str(self.ref_dump), "option": self.option, "class": self.klass, "source": self.source,
                "root": None if self.root_id is None else {"id": self.root_id, "name": self.root_name,
                                                           "key": self.root_key},
                "err": num(self.err), "nonfinite": self.err is not None and not math.isfinite(self.err),
                "floor": self.floor, "k": num(self.k), "bar": num(self.bar), "signature": self.signature,
                "test": {"name": self.test.name, "flags": list(self.test.flags),
                         "env": [list(e) for e in self.test.env]},
                "reference": {"name": self.reference.name, "flags": list(self.reference.flags)},
                "ran_with": self.ran_with}


def read_finding(analysis_dir: PathLike, *, option: Optional[str] = None, root: Optional[str] = None,
                 model: Optional[PathLike] = None) -> Finding:
    """The finding of ``analysis_dir`` (a sweep's ``option``, the root named by id or name by
    ``root``; by default the analysis' first root, or its worst option). ``model`` overrides
    the model the report names.

    Raises:
        UsageError: not an analysis folder of naive-vs-default, sweep, shake or diff; no such
            option or root; a run's flags outside what a repro may carry; files gone.
    """
    adir = Path(analysis_dir).resolve()
    if not os.path.lexists(adir / "report.json"):
        raise UsageError(f"{analysis_dir}: expected an analysis folder with report.json (of lar-prec "
                         f"{', '.join(COMMANDS)})")
    report = read_json(adir / "report.json")
    if report.command not in COMMANDS:
        raise UsageError(f"{adir / 'report.json'}: reduce starts from an analysis of {', '.join(COMMANDS)}, "
                         f"found one of {report.command!r}")
    if option is not None and report.command != "sweep":
        raise UsageError(f"--option {option}: {adir} is an analysis of {report.command}, not of a sweep")
    read = {"naive-vs-default": _naive_vs_default, "sweep": _sweep, "shake": _shake, "diff": _diff}[report.command]
    fields = read(report, adir, option, root)
    model_path = Path(model) if model is not None else Path(str(report.model or ""))
    if not model_path.is_file():
        raise UsageError(f"{model_path}: the model the analysis ran is not a file here; give it with --model")
    _check_model(model_path, report, adir)
    ref_dump = _inside(adir, fields.pop("ref_dump"), "the reference dump", report.extra.get("analysis_dir"))
    key = None
    if fields.get("root_id") is not None:
        key = dump_keys(ref_dump).get(fields["root_id"])
        if key is None:
            raise UsageError(f"{ref_dump}: the reference dump holds no var {fields['root_id']} (the root); "
                             "expected the dump the analysis compared against")
    return Finding(command=report.command, analysis_dir=adir, model=model_path.resolve(), ref_dump=ref_dump,
                   root_key=key, **fields)


def _check_model(model: Path, report: Report, adir: Path) -> None:
    """The model is the one the analysis ran: its sha256 is the one its runs recorded (run.json),
    before anything reads it (a report names a path: data, never a file to follow blindly)."""
    recorded = set()
    for r in report.runs:
        try:
            rdir = _inside(adir, r.dir, "a run folder", report.extra.get("analysis_dir"))
            sha = (read_run_json(rdir).get("model") or {}).get("sha256")
        except (UsageError, AttributeError):
            continue
        if isinstance(sha, str) and re.fullmatch(r"[0-9a-f]{64}", sha):
            recorded.add(sha)
    if not recorded:
        raise UsageError(f"{adir}: no run of the analysis records the sha256 of its model (run.json); reduce "
                         f"does not read {model} unverified")
    problem = path_problem(model)
    if problem:
        raise UsageError(f"model {model} {problem}")
    sha = sha256_file(model)
    if sha not in recorded:
        raise UsageError(f"model {model} is not the model the analysis ran: sha256 {sha[:16]}..., its runs ran "
                         f"{', '.join(x[:16] + '...' for x in sorted(recorded))}; give that model with --model")


def _inside(adir: Path, path: Any, what: str, recorded: Any = None) -> Path:
    """``path`` (from the report) as a folder inside the analysis folder: as written, or, for a
    folder moved since, at the same place under it as under the one it was ``recorded`` in."""
    p = Path(str(path or "")).resolve()
    if adir not in p.parents and recorded:
        try:
            p = (adir / Path(str(path)).relative_to(str(recorded))).resolve()
        except ValueError:  # recorded elsewhere: refused below
            pass
    if not p.is_dir() or adir not in p.parents:
        raise UsageError(f"{adir}: {what} ({path}) is not a folder inside the analysis folder; reduce reads "
                         "only what the analysis wrote there")
    return p


def _run(report: Report, adir: Path, *, label: Optional[str] = None, config: Optional[str] = None) -> ReportRun:
    for r in report.runs:
        if (label is None or r.label == label) and (config is None or r.config == config):
            return r
    raise UsageError(f"{adir / 'report.json'}: no run {label or config!r} recorded; expected the analysis' runs")


def run_config(run: ReportRun, adir: Path, env: Sequence[Tuple[str, Optional[str]]] = ()) -> RunConfig:
    """The configuration a recorded run ran: its name, and the flags after the runner's own,
    each one a repro may carry (checked; the fast-run algorithm cache, a path, is left out);
    ``env``: further variables, each one a configuration sets."""
    where = adir / "report.json"
    if run.config not in CONFIGS:
        raise UsageError(f"{where}: run {run.label}: configuration {run.config!r} is not one of {', '.join(CONFIGS)}")
    argv = [str(a) for a in run.argv]
    try:
        tail = argv[argv.index("--warmup-iter") + 2:]
    except ValueError:
        raise UsageError(f"{where}: run {run.label}: its argv is not one lar-prec builds") from None
    own = list(CONFIGS[run.config].flags)
    tail = tail[len(own):] if tail[:len(own)] == own else tail
    flags: List[str] = []
    skip = False
    for f in tail:  # the analysis' own algorithm cache is a path: not carried
        if skip:
            skip = False
        elif f.split("=")[0].lstrip("-").replace("-", "_") == "fast_run_algo_policy":
            skip = "=" not in f
        elif f == "--verbose":  # the sweep's log of algorithm choices: observes, computes nothing
            continue
        else:
            flags.append(f)
    check_flags(where, f"runs[{run.label}].argv", flags)
    for name, value in env:
        if value not in ALLOWED_ENV.get(name, ()):
            raise UsageError(f"{where}: run {run.label}: environment {name}={value} is not one a configuration "
                             f"sets ({', '.join(sorted(ALLOWED_ENV))}); reduce runs only those")
    return get_config(run.config).with_extra(tuple(flags), dict(env) if env else None)


def _stderr(adir: Path, report: Report, run: ReportRun) -> str:
    """The stderr a failed run left in its folder, else its recorded error."""
    try:
        folder = _inside(adir, run.dir, "a run folder", report.extra.get("analysis_dir"))
    except UsageError:
        folder = None
    return (run_stderr(folder) if folder is not None else "") or str(run.extra.get("error") or "")


def _ran_with(run: ReportRun) -> str:
    """The load_and_run a recorded run ran (its command line before the model), for messages."""
    argv = [str(a) for a in run.argv]
    return " ".join(argv[:argv.index("--input") - 1]) if "--input" in argv[1:] else (argv[0] if argv else "")


def _root_of(candidates: Sequence[Mapping[str, Any]], root: Optional[str], where: str) -> Mapping[str, Any]:
    """The root asked for (by id or name) among ``candidates`` (dicts with id, name), else the first."""
    if not candidates:
        raise UsageError(f"{where}: no root to start from (the analysis found no divergence there)")
    if root is None:
        return candidates[0]
    for c in candidates:
        if root in (str(c["id"]), c["name"]):
            return c
    shown = ", ".join(f"{c['id']} ({c['name']})" for c in candidates)
    raise UsageError(f"--root {root}: not a root of {where}; its roots: {shown}")


def _var_fields(report: Report, rid: int) -> Tuple[str, Optional[float], Optional[float]]:
    """(class, the error a whole run showed, the local floor or the threshold) of report var ``rid``."""
    v = report.var(rid)
    if v is None:
        return "wrong_value", None, report.threshold.value
    nonfinite = v.status == "nonfinite" or v.extra.get("diff") == "nonfinite"
    floor = v.extra.get("floor")
    if not isinstance(floor, (int, float)) or isinstance(floor, bool):
        floor = v.threshold if v.threshold is not None else report.threshold.value
    return ("nan" if nonfinite else "wrong_value"), (math.inf if nonfinite else v.max_err), float(floor)


def _naive_vs_default(report: Report, adir: Path, option: Optional[str], root: Optional[str]) -> Dict[str, Any]:
    ref, test = _run(report, adir, config="naive"), _run(report, adir, label="default")
    dump_roots = [r for r in report.extra.get("dump_roots") or () if isinstance(r, dict)]
    roots = [{"id": r.id, "name": r.name, "source": "root by " + str(r.extra.get("rule") or "the dumps")}
             for r in report.roots]
    roots += [{"id": int(r["id"]), "name": str(r.get("name")), "source": "dump root (local error named none)"}
              for r in dump_roots if isinstance(r.get("id"), int) and all(r["id"] != x["id"] for x in roots)]
    r = _root_of(roots, root, f"{adir}")
    klass, err, floor = _var_fields(report, r["id"])
    return {"ref_dump": ref.extra.get("dump_dir"), "test": run_config(test, adir), "reference": run_config(ref, adir),
            "klass": klass, "root_id": r["id"], "root_name": r["name"], "err": err, "floor": floor,
            "source": r["source"], "ran_with": _ran_with(test)}


def _sweep(report: Report, adir: Path, option: Optional[str], root: Optional[str]) -> Dict[str, Any]:
    options = [o for o in report.extra.get("options") or () if isinstance(o, dict)]
    failing = [o for o in options if o.get("verdict") == "diverges" or o.get("status") in _FAILED_STATUS]
    if option is None:
        if not failing:
            raise UsageError(f"{adir}: no option of the sweep diverges, crashes or hangs: nothing to reduce")
        opt = failing[0]
    else:
        opt = next((o for o in options if o.get("option") == option), None)
        if opt is None or opt not in failing:
            raise UsageError(f"--option {option}: " + (f"{adir} has no option {option!r}" if opt is None else
                                                      f"option {option!r} neither diverges, crashes nor hangs") +
                             f"; failing options: {', '.join(str(o.get('option')) for o in failing) or 'none'}")
    name = str(opt["option"])
    ref, test = _run(report, adir, label="reference"), _run(report, adir, label=name)
    base = {"ref_dump": ref.extra.get("dump_dir"), "test": run_config(test, adir), "option": name,
            "reference": run_config(ref, adir), "ran_with": _ran_with(test)}
    if opt.get("status") in _FAILED_STATUS:
        status = str(test.extra.get("status") or opt["status"])
        klass, sig = ending(status, test.extra.get("signal"), test.returncode, _stderr(adir, report, test))
        return {**base, "klass": klass, "root_id": None, "root_name": None, "err": None, "floor": 0.0,
                "signature": sig, "source": f"option {name} {opt['status']}: {opt.get('reason') or ''}"}
    local = opt.get("local") if isinstance(opt.get("local"), dict) else {}
    roots = [{"id": int(r["id"]), "name": str(r["name"]), "floor": r.get("floor"), "source": "local root",
              "nonfinite": r.get("nonfinite") is True}
             for r in local.get("roots") or () if isinstance(r, dict) and isinstance(r.get("id"), int)]
    for key, src in (("root", "root"), ("dump_root", "dump root")):
        r = opt.get(key)
        if isinstance(r, dict) and isinstance(r.get("reference_id"), int) and all(
                r["reference_id"] != x["id"] for x in roots):
            roots.append({"id": r["reference_id"], "name": str(r.get("name")), "floor": None, "source": src,
                          "nonfinite": r.get("nonfinite") is True})
    r = _root_of(roots, root, f"option {name} of {adir}")
    errors = opt.get("errors") if isinstance(opt.get("errors"), dict) else {}
    err = errors.get(r["name"])
    nonfinite = r["nonfinite"] or (err is None and opt.get("worst_nonfinite") is True)
    floor = r["floor"] if isinstance(r["floor"], (int, float)) else float(opt.get("tolerance") or 0.0)
    return {**base, "klass": "nan" if nonfinite else "wrong_value", "root_id": r["id"], "root_name": r["name"],
            "err": math.inf if nonfinite else (float(err) if isinstance(err, (int, float)) else None),
            "floor": float(floor), "source": f"option {name}'s {r['source']}"}


def _shake(report: Report, adir: Path, option: Optional[str], root: Optional[str]) -> Dict[str, Any]:
    first = report.runs[0] if report.runs else _run(report, adir)
    roots = [{"id": r.id, "name": r.name, "source": "jitter root"} for r in report.roots]
    r = _root_of(roots, root, f"{adir}")
    _klass, err, _local_floor = _var_fields(report, r["id"])
    v = report.var(r["id"])  # a jitter is any difference past the shake's threshold (0: bitwise)
    floor = v.threshold if v is not None and v.threshold is not None else report.threshold.value
    cfg = run_config(first, adir)
    return {"ref_dump": first.extra.get("dump_dir"), "test": cfg, "reference": cfg, "klass": "jitter",
            "root_id": r["id"], "root_name": r["name"], "err": err, "floor": floor, "source": r["source"],
            "ran_with": _ran_with(first)}


def _diff(report: Report, adir: Path, option: Optional[str], root: Optional[str]) -> Dict[str, Any]:
    sides = report.extra.get("sides") if isinstance(report.extra.get("sides"), dict) else {}
    a, b = (sides.get(k) if isinstance(sides.get(k), dict) else {} for k in ("a", "b"))
    runs_b = [r for r in report.runs if b.get("dir") and str(r.dir).startswith(str(b["dir"]))]
    runs_a = [r for r in report.runs if a.get("dir") and str(r.dir).startswith(str(a["dir"]))]
    if not runs_a or not runs_b:
        raise UsageError(f"{adir}: the report names no runs of side A and side B; reduce needs a diff that ran both "
                         "(lar-prec diff MODEL ...)")
    env = tuple((str(k), v) for k, v in (b.get("env") or {}).items())
    roots = [{"id": r.id, "name": r.name, "source": "first var outside jitter"} for r in report.roots]
    r = _root_of(roots, root, f"{adir}")
    klass, err, _floor = _var_fields(report, r["id"])
    v = report.var(r["id"])
    band = [v.extra.get(k) for k in ("jitter_a", "jitter_b")] if v is not None else []
    floor = sum(float(x) for x in band if isinstance(x, (int, float)) and math.isfinite(x))
    return {"ref_dump": a.get("dump"), "test": run_config(runs_b[0], adir, env),
            "reference": run_config(runs_a[0], adir), "klass": klass, "root_id": r["id"], "root_name": r["name"],
            "err": err, "floor": floor, "source": r["source"], "ran_with": str(b.get("build") or "")}
