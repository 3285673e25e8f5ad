"""Parts of a model tried by ``lar-prec reduce``: the graph, building a part, running it and
judging whether it fails the same way as the finding.

The graph and every part come from ``python -m lar_prec.lar.reduce_build`` (a child process:
MegEngine is imported there only). A part is a set of the model's data operators (by the id
of each one's first output var); what it reads from operators left out is fed with the
reference's own dumped values. It runs under the finding's test configuration (the option's
flags under a sweep option) with the load_and_run given to reduce, and its dump is paired with
the reference's by var name (as a sweep pairs a rewritten graph,
:func:`lar_prec.workflows.sweep.analysis.cross_graph`).

It **fails the same way** when it runs (a crash or stall of a wrong-value finding is another
failure), the var of the root operator (same stable key in the reference dump) errs by the
finding's bar (:attr:`~.finding.Finding.bar`) in the same class (a NaN for a NaN finding), and
no operator upstream of it in the part fails as badly (that failure would start elsewhere).
A part that fails otherwise is **different** (rejected, counted, said why); one that shows
nothing past the bar **passes**. A crash or stall finding fails the same way by ending the
same way (the signal or exit code; a stall); a jitter finding by two runs of the part
differing at the root beyond its floor, and nowhere upstream.
"""
from __future__ import annotations

import errno
import math
import os
import re
import shutil
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Dict, FrozenSet, Iterable, List, Optional, Sequence, Tuple

from lar_prec.diagnosis.local import DEFAULT_TIMEOUT, child_env, feed_inputs, layout_fmt, run_child
from lar_prec.diagnosis.local_records import Feed, LayerwiseModel, feeds_from_json
from lar_prec.dumps.folder import DumpFolder
from lar_prec.dumps.keys import dump_keys
from lar_prec.errors import LarPrecError, RunError, UsageError
from lar_prec.graph import reach
from lar_prec.run.config import LoadAndRun, RunConfig
from lar_prec.run.once import run_once
from lar_prec.run.record import RunResult
from lar_prec.workflows.reduce.finding import Finding, ending, run_stderr, same_ending
from lar_prec.workflows.sweep.analysis import VarErr, cross_graph, same_graph
from lar_prec.inputspec import read_json_file


@dataclass(frozen=True)
class Op:
    """A data operator of the model: ``id`` its first output var's id (the model's graph),
    ``reads`` the operators whose outputs it reads (cut and fed when they are left out), ``needs``
    those it reads something from that cannot be fed (they stay with it: (id, why))."""

    id: int
    name: str
    type: str
    mode: Optional[str]
    reads: Tuple[int, ...]
    needs: Tuple[Tuple[int, str], ...]
    outputs: Tuple[Tuple[int, str, Optional[int]], ...]  # (id, name, the reference dump's id)


@dataclass(frozen=True)
class Graph:
    """The model's data operators in execution order, and its inputs as feeds."""

    ops: Tuple[Op, ...]
    model_inputs: Tuple[Feed, ...]
    static_ops: int

    def op(self, op_id: int) -> Op:
        return next(o for o in self.ops if o.id == op_id)

    def op_of_ref(self, ref_id: int) -> Optional[Op]:
        """The operator computing the reference dump's var ``ref_id``."""
        return next((o for o in self.ops if any(r == ref_id for _i, _n, r in o.outputs)), None)

    def inputs(self) -> Dict[int, Tuple[int, ...]]:
        return {o.id: o.reads + tuple(p for p, _w in o.needs) for o in self.ops}

    def related(self, op_id: int) -> FrozenSet[int]:
        """``op_id``, its ancestors and its descendants (what it can be connected to)."""
        ins = self.inputs()
        outs: Dict[int, List[int]] = {}
        for k, v in ins.items():
            for p in v:
                outs.setdefault(p, []).append(k)
        return frozenset(reach(op_id, ins) | reach(op_id, outs) | {op_id})

    def closure(self, keep: Iterable[int]) -> FrozenSet[int]:
        """``keep`` with every operator its members need (inputs that cannot be fed)."""
        need = {o.id: [p for p, _w in o.needs] for o in self.ops}
        out, todo = set(), list(keep)
        while todo:
            k = todo.pop()
            if k not in out:
                out.add(k)
                todo.extend(need.get(k, ()))
        return frozenset(out)

    def needed_by(self, keep: FrozenSet[int], op_id: int) -> List[Tuple[str, str]]:
        """(operator, why) of the members of ``keep`` that cannot do without ``op_id``."""
        return [(o.name, w) for o in self.ops if o.id in keep for p, w in o.needs if p == op_id]


@dataclass(frozen=True)
class Outcome:
    """What one part did: ``verdict`` same | passes | different | invalid (could not be built),
    what it did (``klass``: ok, build, a class of :data:`~.finding.CLASSES`), why in words, the
    root's error, its dump and the root's id there."""

    verdict: str
    klass: str
    why: str
    root_err: Optional[float] = None
    dump: Optional[Path] = None
    root_dump_id: Optional[int] = None


def _read(path: Path, what: str) -> dict:
    data = read_json_file(path, what)
    if not isinstance(data, dict):
        raise UsageError(f"{path}: expected {what}")
    return data


def describe(model: Path, ref_dump: Path, out: Path, timeout: float = DEFAULT_TIMEOUT) -> Graph:
    """The model's data operators (a child process reads the graph).

    Raises:
        RunError: MegEngine could not load the model; UsageError: its record is not one the child writes.
    """
    argv = [sys.executable, "-m", "lar_prec.lar.reduce_build", "describe", str(model), str(ref_dump),
            str(out / "graph.json")]
    run_child(argv, child_env(), timeout, f"reading the graph of {model}", out)
    where = out / "graph.json"
    data = _read(where, "the graph record of lar_prec.lar.reduce_build")
    try:
        ops = tuple(Op(int(o["id"]), str(o["name"]), str(o["type"]), o["mode"], tuple(int(p) for p in o["reads"]),
                       tuple((int(p), str(w)) for p, w in o["needs"]),
                       tuple((int(v["id"]), str(v["name"]), v["ref_id"]) for v in o["outputs"]))
                    for o in data["ops"])
        return Graph(ops, feeds_from_json(where, data["model_inputs"]), int(data["static_ops"]))
    except (KeyError, TypeError, ValueError) as exc:
        raise UsageError(f"{where}: expected the graph record of lar_prec.lar.reduce_build ({exc})") from None


@dataclass(frozen=True)
class Part:
    """A built part: its model, feeds, outputs and how many data operators it computes."""

    dir: Path
    model: Path
    feeds: Tuple[Feed, ...]
    outputs: Tuple[str, ...]
    operators: int


def build_part(model: Path, ref_dump: Path, keep: FrozenSet[int], out: Path,
               timeout: float = DEFAULT_TIMEOUT) -> Part:
    """Build the part keeping operators ``keep`` into ``out`` (``reduced.mge``, ``reduced.json``)."""
    argv = [sys.executable, "-m", "lar_prec.lar.reduce_build", "build", str(model), str(ref_dump), str(out),
            "--keep", ",".join(str(k) for k in sorted(keep))]
    run_child(argv, child_env(), timeout, f"building a part of {model}", out)
    where = out / "reduced.json"
    data = _read(where, "the record of a reduced model")
    try:
        return Part(out, out / "reduced.mge", feeds_from_json(where, data["feeds"]),
                    tuple(str(o["name"]) for o in data["outputs"]), int(data["operators_in_model"]))
    except (KeyError, TypeError, ValueError) as exc:
        raise UsageError(f"{where}: expected the record of a reduced model ({exc})") from None


#: what a program says when a write failed with ENOSPC
NO_SPACE = os.strerror(errno.ENOSPC)


class DiskFull(UsageError):
    """The disk under ``--out`` filled (exit 2): no part can be judged, nothing is a finding."""

    def __init__(self, where: Path, detail: str) -> None:
        super().__init__(f"the disk of {where} is full ({NO_SPACE}): free some space or give --out on another "
                         f"disk; {detail}")


def no_space(text: str) -> bool:
    return NO_SPACE.lower() in text.lower() or "disk full" in text.lower()


class Tester:
    """Runs the parts of one finding and judges them; counts runs and builds."""

    def __init__(self, finding: Finding, graph: Graph, lar: "LoadAndRun | str | None", work: Path,
                 timeout: float = DEFAULT_TIMEOUT) -> None:
        self.f, self.g, self.lar, self.work, self.timeout = finding, graph, lar, work, timeout
        self.ref = DumpFolder(finding.ref_dump)
        self.ref_keys = dump_keys(finding.ref_dump)
        self.runs = self.builds = 0

    def whole(self) -> Outcome:
        """The model as the analysis ran it, fed with the reference's values of its inputs."""
        return self._try(self.f.model, self.g.model_inputs, self.work / "whole")

    def part(self, keep: FrozenSet[int]) -> Tuple[Optional[Part], Outcome]:
        """Build and try the part keeping ``keep``; one MegEngine cannot build is ``invalid``
        (skipped: neither the failure nor another one)."""
        self.builds += 1
        folder = self.work / f"part{self.builds:03d}"
        try:
            part = build_part(self.f.model, self.f.ref_dump, keep, folder / "build", self.timeout)
        except RunError as exc:
            if no_space(str(exc) + getattr(exc, "stderr_tail", "")):
                raise DiskFull(self.work, f"building a part failed: {' '.join(str(exc).split())[:300]}") from None
            return None, Outcome("invalid", "build", f"MegEngine could not build it: {exc}")
        return part, self._try(part.model, part.feeds, folder)

    def run(self, model: Path, feeds: Sequence[Feed], folder: Path, config: RunConfig, label: str) -> RunResult:
        """One run of ``model`` fed from the reference (raises the run's LarPrecError)."""
        lw = LayerwiseModel(model, self.f.model, self.f.ref_dump, tuple(feeds), (), ())
        inputs = feed_inputs(lw, self.ref, folder / "inputs", fmt=layout_fmt(self.f.reference.flags))
        self.runs += 1
        return run_once(model, inputs, config, folder, lar=self.lar, timeout=self.timeout, label=label)

    def _try(self, model: Path, feeds: Sequence[Feed], folder: Path) -> Outcome:
        recs = []
        for k in range(2 if self.f.klass == "jitter" else 1):
            try:
                recs.append(self.run(model, feeds, folder, self.f.test, f"run{k + 1}"))
            except LarPrecError as exc:
                rec = getattr(exc, "result", None)
                if not isinstance(rec, RunResult) or rec.status not in ("crashed", "failed", "stalled", "timeout"):
                    raise
                if no_space(str(exc) + run_stderr(rec.dir)):  # the disk failed the run, not the model
                    raise DiskFull(self.work, f"a run failed: {' '.join(str(exc).split(' -- hint:')[0].split())[:300]}") from None
                return self._ended(rec, exc)
        if self.f.klass == "jitter":
            out = judge_jitter(self.f, self.ref_keys, recs[0].dump_dir, recs[1].dump_dir)  # type: ignore[arg-type]
            shutil.rmtree(recs[1].dump_dir, ignore_errors=True)  # type: ignore[arg-type]
            return out
        return judge(self.f, self.ref_keys, recs[0].dump_dir)  # type: ignore[arg-type]

    def _ended(self, rec: RunResult, exc: LarPrecError) -> Outcome:
        klass, sig = ending(rec.status, rec.signal, rec.returncode, run_stderr(rec.dir))
        line = re.sub(r" in run '[^']*' \([^)]*\)", "", str(exc).split(" -- hint:")[0])[:300]  # the folder: in work/
        if same_ending(self.f, klass, sig):
            return Outcome("same", klass, line)
        theirs = self.f.signature or self.f.klass.replace("_", " ")
        return Outcome("different", klass, f"{line} (the finding: {theirs})")


def _ancestors(folder: DumpFolder, vid: int, compared: Dict[int, VarErr]) -> List[VarErr]:
    """Every compared var upstream of ``vid`` in the part's dump (through vars without a partner
    too: a fused operator's inputs, a layout conversion)."""
    inputs = {v: folder.inputs_of(v) for v in folder.ids}
    return [compared[i] for i in reach(vid, inputs) if i in compared]


def judge(f: Finding, ref_keys: Dict[int, str], dump: Path) -> Outcome:
    """A part's dump against the reference (see the module docstring)."""
    if f.klass in ("crash", "stall"):
        return Outcome("passes", "ok", f"it runs to the end (the finding {f.signature or f.klass})", dump=dump)
    g = cross_graph(f.ref_dump, dump, f.floor, fmt=f.fmt)
    compared = {e.b: e for e in g.errs if e.max_err is not None}
    mine = [e for e in g.errs if ref_keys.get(e.a) == f.root_key]
    bar = f.bar
    worse = lambda e: e.max_err is not None and e.max_err >= bar and e.max_err > f.floor  # noqa: E731
    if not mine:
        return Outcome("different", "ok", f"its dump holds no var of the root operator {f.root_name}", dump=dump)
    root = mine[-1]
    up = [e for e in _ancestors(DumpFolder(dump), root.b, compared) if worse(e)]
    if up:
        e = up[0]
        return Outcome("different", _klass(e.max_err), f"the failure starts upstream, at {e.name} (error "
                       f"{_num(e.max_err)} >= the bar {_num(bar)})", root.max_err, dump, root.b)
    err = root.max_err
    if err is None:
        return Outcome("different", "ok", f"the root's var {root.name} cannot be compared: {root.note}", dump=dump)
    if worse(root) and _klass(err) == f.klass:
        return Outcome("same", f.klass, f"{root.name} errs by {_num(err)} (bar {_num(bar)})", err, dump, root.b)
    if worse(root):
        return Outcome("different", _klass(err), f"{root.name} is {_klass(err)} ({_num(err)}), the finding "
                       f"{f.klass}", err, dump, root.b)
    other = [e for e in g.errs if worse(e)]
    if other:
        return Outcome("different", _klass(other[0].max_err), f"it fails at {other[0].name} instead (error "
                       f"{_num(other[0].max_err)}); the root's error {_num(err)} is under the bar {_num(bar)}",
                       err, dump, root.b)
    return Outcome("passes", "ok", f"the root's error {_num(err)} is under the bar {_num(bar)}", err, dump, root.b)


def judge_jitter(f: Finding, ref_keys: Dict[int, str], first: Path, second: Path) -> Outcome:
    """Two runs of a part against each other: the root differs beyond its floor, nothing upstream."""
    g = same_graph(first, second, f.floor)
    pair = cross_graph(f.ref_dump, first, f.floor)
    ids = {e.b for e in pair.errs if ref_keys.get(e.a) == f.root_key}
    compared = {e.b: e for e in g.errs if e.max_err is not None}
    root = next((compared[i] for i in ids if i in compared), None)
    if root is None:
        return Outcome("different", "ok", f"its dump holds no var of the root operator {f.root_name}")
    up = [e for e in _ancestors(DumpFolder(first), root.b, compared) if (e.max_err or 0) > f.floor]
    if up:
        return Outcome("different", "jitter", f"the jitter starts upstream, at {up[0].name}", root.max_err, first,
                       root.b)
    if (root.max_err or 0) > f.floor:
        return Outcome("same", "jitter", f"{root.name} differs between two runs by {_num(root.max_err)}",
                       root.max_err, first, root.b)
    return Outcome("passes", "ok", f"two runs agree at {root.name} (within {_num(f.floor)})", root.max_err,
                   first, root.b)


def _klass(err: Optional[float]) -> str:
    return "nan" if err is not None and not math.isfinite(err) else "wrong_value"


def _num(x: Optional[float]) -> str:
    return "n/a" if x is None else "NaN/Inf" if not math.isfinite(x) else f"{x:.3g}"


def drop_dump(outcome: Outcome) -> None:
    """Remove a part's dump once judged (its run.json stays): a search makes many."""
    if outcome.dump is not None:
        shutil.rmtree(outcome.dump, ignore_errors=True)
