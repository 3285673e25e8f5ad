"""The two sides of ``lar-prec diff``: what each runs (a build, a device, load_and_run flags,
environment variables) and what each gave: its run 1's whole dump and, per variable, its
jitter (the largest difference of its later runs from run 1). A side is measured by a shake of
its own (:func:`run_side`, at least two runs), or read back from an analysis folder made before
(:func:`read_side`: a shake's, a diff side's, or any analysis' test run, whose jitter is then
unknown).
"""
from __future__ import annotations

import math
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Dict, Mapping, Optional, Sequence, Tuple

from lar_prec.dumps.folder import DumpFolder
from lar_prec.errors import DumpFolderError, DumpFormatError, LarPrecError, RunError, UsageError
from lar_prec.records import PathLike
from lar_prec.report.model import Report, read_json
from lar_prec.run.config import resolve_load_and_run
from lar_prec.run.device import RemoteSpec, remote_spec
from lar_prec.workflows.shake.shake import shake

#: at least this many runs per side: one more than run 1 is what shows a jitter
MIN_RUNS = 2


@dataclass(frozen=True)
class Side:
    """What one side runs: ``lar`` (a path or ``bundled``; on a device, its path there; None:
    the usual lookup), ``remote`` (``ssh:...``/``adb...``; None: this machine), load_and_run
    ``flags`` and environment changes ``env`` (a value None removes the variable)."""

    name: str
    lar: Optional[str] = None
    remote: Optional[str] = None
    flags: Tuple[str, ...] = ()
    env: Tuple[Tuple[str, Optional[str]], ...] = ()

    def build(self) -> str:
        """The load_and_run it runs, resolved (a local one must exist: LoadAndRunNotFound, exit 2)."""
        if self.remote:
            return f"{self.lar or 'load_and_run'} on {self.remote}"
        return resolve_load_and_run(self.lar).describe()

    def identity(self) -> Tuple[Any, ...]:
        """What makes two sides the same run."""
        return (self.build(), self.flags, tuple(sorted(self.env, key=lambda e: e[0])))

    def spec(self, remote_dir: Optional[str], keep_remote: bool) -> Optional[RemoteSpec]:
        return remote_spec(self.remote, self.lar, remote_dir, keep_remote) if self.remote else None

    def to_json(self) -> Dict[str, Any]:
        return {"build": self.build(), "remote": self.remote, "flags": list(self.flags),
                "env": {k: v for k, v in self.env}}


def identical_sides(a: Side, b: Side) -> Optional[str]:
    """Why A and B are one and the same run (nothing to compare), or None when they differ."""
    if a.identity() != b.identity():
        return None
    return (f"both sides run {a.build()} with the same flags ({' '.join(a.flags) or 'none'}) and environment "
            f"({', '.join(f'{k}={v}' for k, v in a.env) or 'unchanged'}): give --a-*/--b-* options that differ")


@dataclass(frozen=True)
class SideResult:
    """What one side gave: its analysis folder, run 1's whole dump, each var's jitter (var id ->
    the largest ``max_err`` of a later run against run 1; inf where a later run turned a value
    NaN/Inf), its runs and how it ran (``setting``). ``measured``: False when it made one run
    (its jitter is then taken as 0)."""

    name: str
    dir: Path
    dump: Path
    band: Mapping[int, float]
    runs: Tuple[Any, ...]
    setting: Mapping[str, Any]
    model: Optional[str] = None
    measured: bool = True

    def to_json(self) -> Dict[str, Any]:
        finite = [v for v in self.band.values() if math.isfinite(v)]
        return {**self.setting, "dir": str(self.dir), "dump": str(self.dump), "runs": len(self.runs),
                "jitter_measured": self.measured, "largest_jitter": max(finite) if finite else 0.0,
                "vars_that_jitter": sum(1 for v in self.band.values() if v > 0)}


def _band(report: Report) -> Dict[int, float]:
    out: Dict[int, float] = {}
    for v in report.vars:
        if v.status == "nonfinite" or (v.status != "ok" and v.max_err is None):
            out[int(v.id)] = math.inf
        else:
            out[int(v.id)] = float(v.max_err or 0.0)
    return out


def side_from_report(name: str, folder: Path, report: Report, runs: Sequence[Any] = (),
                     setting: Optional[Mapping[str, Any]] = None) -> SideResult:
    """The side a finished analysis gives: a shake's run 1 and jitter, else the test run of any
    other analysis (the last run not under the naive configuration), with its jitter unknown.

    Raises:
        UsageError: the report has no run whose dump is still on disk.
    """
    reported = list(report.runs)
    if report.command == "shake":
        chosen = reported[:1]
    else:
        chosen = [r for r in reported if (r.config or "") != "naive"][-1:] or reported[-1:]
    dump = chosen[0].extra.get("dump_dir") if chosen else None
    if not dump or not Path(str(dump)).is_dir():
        raise UsageError(f"{folder}: its report names no run whose dump is still on disk "
                         f"({dump or 'no dump recorded'}); diff compares dumps")
    DumpFolder(str(dump))  # a folder that is not a dump: exit 2 here, not halfway
    measured = report.command == "shake"
    return SideResult(name, folder, Path(str(dump)), _band(report) if measured else {},
                      tuple(runs) or (tuple(reported) if measured else tuple(chosen)),
                      dict(setting or {"from": str(folder), "command": report.command}), report.model, measured)


def read_side(name: str, folder: PathLike) -> SideResult:
    """A side from an analysis folder made before (no runs).

    Raises:
        UsageError: not an analysis folder (no report.json), or its dumps are gone.
    """
    path = Path(folder).resolve()
    if not path.is_dir():
        raise UsageError(f"{folder}: expected an analysis folder (of lar-prec shake, diff or naive-vs-default), "
                         "not found")
    if not os.path.lexists(path / "report.json"):
        raise UsageError(f"{folder}: expected an analysis folder with report.json (lar-prec shake, diff or "
                         "naive-vs-default); for two dump folders use lar-prec compare")
    return side_from_report(name, path, read_json(path / "report.json"))


def run_side(model: PathLike, inputs: Sequence[str], side: Side, out: Path, *, repeat: int, config: str,
             extra_flags: Sequence[str], remote_dir: Optional[str] = None, keep_remote: bool = False,
             timeout: Optional[float] = None, seed: int = 0, progress: Any = None) -> SideResult:
    """Run one side ``repeat`` times (a shake of its own in ``out``: bitwise, no reruns, no local
    error) and return what it gave.

    Raises:
        UsageError: fewer than :data:`MIN_RUNS` runs; RunError (exit 3): a run failed.
    """
    if repeat < MIN_RUNS:
        raise UsageError(f"--repeat {repeat}: each side runs at least {MIN_RUNS} times (its jitter is what a "
                         "difference is judged against)")
    spec = side.spec(remote_dir, keep_remote)
    try:
        a = shake(model, inputs, repeat=repeat, config=config, out=out, threshold=0.0, explain=False,
                  lar=None if spec else side.lar, timeout=timeout, extra_flags=tuple(extra_flags) + side.flags,
                  html=False, seed=seed, progress=progress, remote=spec, local=False, env=dict(side.env))
    except (DumpFolderError, DumpFormatError) as exc:  # its runs ended well but left no dump to read
        # a failed run (exit 3), as bisect says of a build whose dump cannot be read
        raise RunError(f"side {side.name.upper()} ({side.build()}): load_and_run ran but its dump cannot be read "
                       f"(a build without --bin-io-dump?): {exc}", run_dir=getattr(exc, "run_dir", None)) from None
    except LarPrecError as exc:
        exc.args = (f"side {side.name.upper()} ({side.build()}): {exc}",) + exc.args[1:]
        raise
    return side_from_report(side.name, a.dir, a.report, a.runs, {**side.to_json(), "config": config,
                                                                 "repeat": repeat})
