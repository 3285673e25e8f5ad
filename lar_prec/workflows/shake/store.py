"""shake's runs on disk, bounded: run 1 kept whole, every later run hashed per variable as it
finishes and only the variables that differ from run 1 kept (``--keep-all`` keeps everything).
A result already kept by an earlier run is not kept twice: runs that differ alike (the same
algorithm chosen again) share one file, so the disk grows with the distinct results, not with
the number of runs.

A pruned run's dump folder holds the files of the vars that differ from run 1 and from every
earlier run; its ``pruned.json`` lists the digest of every var it dumped and, per var kept
elsewhere, the run that holds the same bytes (``same_as``). :meth:`RunStore.view` rebuilds the
whole dump as a folder of symlinks (run 1's file where the bytes are equal), so comparing
and local error read a pruned run like any other. :meth:`RunStore.distinct` says, per var, how
many distinct results the runs produced and which runs share each.
"""
from __future__ import annotations

import hashlib
import os
import shutil
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Dict, List, Mapping, Optional, Sequence, Tuple

from lar_prec.dumps.binary import read_binary_dump
from lar_prec.dumps.folder import DumpFolder
from lar_prec.outputs import atomic_write_text, json_text

#: the record a pruned run leaves next to its dump
PRUNED_JSON = "pruned.json"
_VIEWS = ".views"


def var_digest(path: Path) -> str:
    """A digest of one dump file's dtype, shape and values (its title, which may name a comp
    node or a layout that differ between runs, is left out)."""
    d = read_binary_dump(path)
    h = hashlib.blake2b(digest_size=16)
    h.update(f"{d.dtype.name}{tuple(d.shape)}".encode())
    d.hash_values(h)
    return h.hexdigest()


def hash_folder(dump: Path) -> Dict[int, str]:
    """Var id -> :func:`var_digest` for every var of a dump folder."""
    return {vid: var_digest(Path(p)) for vid, p in DumpFolder(dump).files().items()}


@dataclass(frozen=True)
class StoredRun:
    """One run as stored: its dump folder, the digest of every var it dumped, and (pruned)
    the ids whose file was removed because run 1 has the same bytes."""

    label: str
    dump: Path
    digests: Mapping[int, str]
    removed: Tuple[int, ...] = ()
    bytes_removed: int = 0
    #: var id -> the dump file of an earlier run with the same bytes (this run's was removed)
    same_as: Mapping[int, str] = field(default_factory=dict)

    @property
    def pruned(self) -> bool:
        return bool(self.removed)


class RunStore:
    """The runs of one shake, against a base run (run 1, kept whole).

    Thread-safe: :meth:`add` is called from the worker thread of each run as it finishes.
    """

    def __init__(self, adir: Path, *, keep_all: bool = False) -> None:
        self.adir = adir
        self.keep_all = keep_all
        self.base: Optional[StoredRun] = None
        self.runs: Dict[str, StoredRun] = {}
        self._lock = threading.Lock()
        #: (var id, digest) -> (run label, file) of a result kept by a pruned run
        self._kept: Dict[Tuple[int, str], Tuple[str, str]] = {}

    def set_base(self, label: str, dump: Path) -> StoredRun:
        run = StoredRun(label, Path(dump), hash_folder(Path(dump)))
        with self._lock:
            self.base = run
            self.runs[label] = run
        return run

    def add(self, label: str, dump: Path, *, prune: bool = True) -> StoredRun:
        """Hash the dump of a finished run; unless ``keep_all`` (or ``prune`` False), remove
        the files whose bytes equal run 1's and write ``pruned.json`` next to the dump."""
        assert self.base is not None, "the base run is stored first"
        dump = Path(dump)
        files = DumpFolder(dump).files()
        digests = {vid: var_digest(Path(p)) for vid, p in files.items()}
        removed: List[int] = []
        same_as: Dict[int, str] = {}
        freed = 0
        if prune and not self.keep_all:
            for vid, dig in digests.items():
                p = Path(files[vid])
                if self.base.digests.get(vid) != dig:
                    with self._lock:
                        earlier = self._kept.get((vid, dig))
                        if earlier is None:
                            self._kept[(vid, dig)] = (label, str(p))
                            continue
                    same_as[vid] = earlier[1]
                freed += p.stat().st_size
                p.unlink()
                removed.append(vid)
            record = {"base": self.base.label, "base_dump": str(self.base.dump), "removed": len(removed),
                      "bytes_removed": freed, "kept": sorted(set(digests) - set(removed)),
                      "same_as": {str(k): v for k, v in sorted(same_as.items())},
                      "digests": {str(k): v for k, v in sorted(digests.items())},
                      "why": "vars whose bytes equal the base run's, or an earlier run's kept file (same_as), were "
                             "removed (lar-prec shake; --keep-all keeps them)"}
            atomic_write_text(dump.parent / PRUNED_JSON, json_text(record), what="pruned-run record")
        run = StoredRun(label, dump, digests, tuple(sorted(removed)), freed, same_as)
        with self._lock:
            self.runs[label] = run
        return run

    def differing(self, label: str) -> Tuple[int, ...]:
        """Ids of the vars where run ``label`` differs from run 1 (or that only one of them has)."""
        assert self.base is not None
        run, base = self.runs[label], self.base.digests
        ids = {vid for vid, dig in run.digests.items() if base.get(vid) != dig}
        ids |= set(base) - set(run.digests)
        return tuple(sorted(ids))

    def view(self, label: str) -> Path:
        """A dump folder of run ``label`` with every var it dumped: its own folder when nothing
        was removed, else symlinks (run 1's file for the vars removed as equal)."""
        run = self.runs[label]
        if not run.removed:
            return run.dump
        assert self.base is not None
        dest = self.adir / _VIEWS / label
        if dest.exists():
            shutil.rmtree(dest)
        dest.mkdir(parents=True)
        base_files = DumpFolder(self.base.dump).files()
        own = DumpFolder(run.dump).files()
        removed = set(run.removed)
        for vid in run.digests:
            src = run.same_as.get(vid) or (base_files[vid] if vid in removed else own[vid])
            os.symlink(os.path.abspath(src), dest / Path(src).name)
        return dest

    def drop_views(self) -> None:
        shutil.rmtree(self.adir / _VIEWS, ignore_errors=True)

    def distinct(self, labels: Sequence[str]) -> Dict[int, List[List[str]]]:
        """Var id -> the runs grouped by the result they produced (the base run's group first,
        then in run order); a var dumped by only some runs counts those."""
        out: Dict[int, List[List[str]]] = {}
        ids: Dict[int, None] = {}
        for lbl in labels:
            for vid in self.runs[lbl].digests:
                ids.setdefault(vid)
        for vid in ids:
            groups: Dict[str, List[str]] = {}
            for lbl in labels:
                dig = self.runs[lbl].digests.get(vid)
                if dig is not None:
                    groups.setdefault(dig, []).append(lbl)
            out[vid] = list(groups.values())
        return out

    def summary(self) -> Dict[str, object]:
        """The report's ``storage`` object: what was kept and what was removed."""
        pruned = [r for r in self.runs.values() if r.removed]
        return {"keep_all": self.keep_all, "base": self.base.label if self.base else None,
                "pruned_runs": len(pruned), "vars_removed": sum(len(r.removed) for r in pruned),
                "bytes_removed": sum(r.bytes_removed for r in pruned),
                "how": ("every dump kept (--keep-all)" if self.keep_all else
                        "run 1 kept whole; each later run keeps only the vars whose bytes differ from run 1's "
                        f"(the others are listed with their digest in its {PRUNED_JSON})")}
