"""The dump-only rule's recheck: a var the edge rule names, recomputed from each side's own inputs.

:func:`rechecker` gives :mod:`~lar_prec.compare.growth` its ``recheck(vars)``: each var's
operator recomputed in float64 from each side's dumps (:func:`lar_prec.compare.explain.recompute`).
That needs numpy, whose import (~0.1 s) would be most of an auto comparison's own cost on tens of
thousands of vars. So :class:`Helper` forks a process before the folders are read, which
imports numpy on a core this process leaves idle while it lists them (and shares while it reads
them), and recomputes the vars it is then sent; this process never imports numpy. Whatever goes wrong
there (no fork on the platform, the helper died) is done here, the same way: the numbers do
not depend on where they were made.
"""
from __future__ import annotations

import os
import pickle
import signal
from typing import Any, Callable, List, Mapping, Optional, Sequence, Tuple

from lar_prec.compare.explain import RECOMPUTED, Recomputed, could_recompute, recompute
from lar_prec.compare.records import VarDiff
from lar_prec.dumps.folder import DumpFolder
from lar_prec.records import PathLike

#: what the helper is sent per var: (A's id, B's id, operator type, dtype)
Request = Tuple[int, int, str, str]
#: ``recheck(vars)``: each var recomputed (None where it cannot be)
Recheck = Callable[[Sequence[VarDiff]], List[Optional[Recomputed]]]


def _dumps(folder: DumpFolder, vid: int) -> Optional[Tuple[Any, List[Any]]]:
    ins = folder.inputs_of(vid)
    if vid not in folder or not all(u in folder for u in ins):
        return None
    return folder[vid], [folder[u] for u in ins]


def recheck_one(fa: DumpFolder, fb: DumpFolder, req: Request) -> Optional[Recomputed]:
    """One var recomputed from each side's own inputs (None when a side lacks it or an input,
    or the shapes admit no parameters)."""
    vid, b_vid, opr_type, dtype = req
    if opr_type not in RECOMPUTED:
        return None
    a, b = _dumps(fa, vid), _dumps(fb, b_vid)
    # from the headers first: no values read where no parameters fit the shapes
    if a is None or b is None or not could_recompute(opr_type, [u.shape for u in a[1]], a[0].shape):
        return None
    return recompute(opr_type, a[0].array(), [u.array() for u in a[1]], b[0].array(), [u.array() for u in b[1]],
                     dtype.lower())


class Helper:
    """A forked process that imports numpy at once, then recomputes one batch of vars sent over a
    pipe and ends. :meth:`start` returns None where it cannot fork; :meth:`run` None when the
    helper failed (the caller recomputes here); :meth:`close` ends and reaps it (always call it)."""

    def __init__(self, pid: int, to_child: int, from_child: int) -> None:
        self.pid, self.to_child, self.from_child = pid, to_child, from_child
        self.answered = False

    @classmethod
    def start(cls, dir_a: PathLike, dir_b: PathLike) -> "Optional[Helper]":
        """Fork the helper for the dump folders ``dir_a`` and ``dir_b`` (None: the platform cannot
        fork). Forked before anything is read: it lists the folders itself."""
        if not hasattr(os, "fork"):
            return None
        req_r, req_w = os.pipe()
        rep_r, rep_w = os.pipe()
        try:
            pid = os.fork()
        except OSError:
            for fd in (req_r, req_w, rep_r, rep_w):
                os.close(fd)
            return None
        if pid == 0:  # the helper: never returns
            os.close(req_w)
            os.close(rep_r)
            _serve(dir_a, dir_b, req_r, rep_w)
        os.close(req_r)
        os.close(rep_w)
        return cls(pid, req_w, rep_r)

    def run(self, reqs: Sequence[Request]) -> Optional[List[Optional[Recomputed]]]:
        """Each request recomputed by the helper, in order (None: it failed)."""
        if self.to_child < 0:
            return None
        try:
            _write_all(self.to_child, pickle.dumps(list(reqs), protocol=pickle.HIGHEST_PROTOCOL))
            os.close(self.to_child)
            self.to_child = -1
            got = pickle.loads(_read_all(self.from_child))  # our own child's reply over a pipe, no file
        except (OSError, EOFError, pickle.UnpicklingError, ValueError):
            return None
        if not (isinstance(got, list) and len(got) == len(reqs)
                and all(r is None or isinstance(r, Recomputed) for r in got)):
            return None
        self.answered = True
        return got

    def close(self) -> None:
        """End the helper and reap it: one never asked is killed (it may still be importing numpy,
        which a comparison that needs no recheck must not wait for)."""
        if self.to_child >= 0 or not self.answered:
            try:
                os.kill(self.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        for fd in (self.to_child, self.from_child):
            if fd >= 0:
                try:
                    os.close(fd)
                except OSError:
                    pass
        self.to_child = self.from_child = -1
        try:
            os.waitpid(self.pid, 0)
        except ChildProcessError:
            pass


def _serve(dir_a: PathLike, dir_b: PathLike, req_r: int, rep_w: int) -> None:
    code = 1
    try:
        # Ctrl-C is the parent's to handle: it ends this process or exits, closing the pipes
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        import numpy  # noqa: F401  # the point of this process: loaded while the parent reads and judges

        fa, fb = DumpFolder(dir_a), DumpFolder(dir_b)
        raw = _read_all(req_r)
        if raw:
            reqs = pickle.loads(raw)  # our parent's request over a pipe, no file
            got: List[Optional[Recomputed]] = []
            for req in reqs:
                try:
                    got.append(recheck_one(fa, fb, req))
                except Exception:  # a file changed or unreadable: as the parent would find it
                    got = []
                    break
            if len(got) == len(reqs):
                _write_all(rep_w, pickle.dumps(got, protocol=pickle.HIGHEST_PROTOCOL))
        code = 0
    finally:
        os._exit(code)  # no atexit, no stdio flush: the parent's locks and buffers are not ours


def _read_all(fd: int) -> bytes:
    parts = []
    while True:
        b = os.read(fd, 1 << 16)
        if not b:
            return b"".join(parts)
        parts.append(b)


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]


def rechecker(fa: DumpFolder, fb: DumpFolder, b_of: Mapping[int, int], helper: "Optional[Helper]" = None) -> Recheck:
    """``recheck(vars)`` for the dump-only rule (``b_of``: B's id of each var paired): by
    ``helper`` where given and alive, else in this process."""

    def recheck(vars: Sequence[VarDiff]) -> List[Optional[Recomputed]]:
        reqs = [(d.id, b_of.get(d.id, -1), d.opr_type, str(d.dtype)) for d in vars]
        todo = [k for k, (vid, _b, opr, _dt) in enumerate(reqs) if opr in RECOMPUTED and vid in b_of]
        out: List[Optional[Recomputed]] = [None] * len(reqs)
        if not todo:
            return out
        got = helper.run([reqs[k] for k in todo]) if helper is not None else None
        for k, r in zip(todo, got if got is not None else (recheck_one(fa, fb, reqs[k]) for k in todo)):
            out[k] = r
        return out

    return recheck
