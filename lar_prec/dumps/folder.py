"""A ``--bin-io-dump`` folder: its files indexed by var id, read lazily, in execution order.

Example::

    folder = DumpFolder("run/naive/dump")
    for dump in folder:                      # execution order
        print(dump.var.id, dump.var.name, dump.var.opr_type, dump.array().max())
"""
from __future__ import annotations

import errno
import logging
import os
from pathlib import Path
from typing import Any, Callable, Dict, Iterable, Iterator, List, Optional, Sequence, Set, Tuple, Union

from lar_prec.errors import DumpFolderError, DumpFormatError
from lar_prec.graph import topological_order
from lar_prec.dumps.binary import (
    INCOMPLETE_MARKER,
    BinaryDump,
    _name_ids,
    _read_dump,
    dump_file_name,
    dump_from_head,
    head_shape,
    read_binary_dump,
)
from lar_prec.dumps.dtypes import DType
from lar_prec.records import PathLike, frozen_record
from lar_prec.dumps.titles import VarInfo

#: a header and title kept by DumpFolder.note_head
_Head = Tuple[DType, Tuple[int, ...], int, int, str, int, Sequence[Any]]

log = logging.getLogger(__name__)

__all__ = ["DumpFolder"]


def _why_missing(p: Path) -> str:
    """Why ``p`` cannot be used although its name was given: missing, a symlink loop, ..."""
    try:
        os.stat(p)
    except OSError as e:
        if e.errno == errno.ELOOP:
            return "is a symlink loop"
        if os.path.islink(p):
            return f"is a broken symlink (to {os.readlink(p)})"
        if e.errno == errno.ENOENT:
            return "does not exist"
        return f"cannot be read ({e.strerror})"
    return "does not exist"


def _is_file(entry: "os.DirEntry[str]") -> bool:
    """True for a regular file (or a link to one); a directory is a stray entry; a link that
    leads nowhere under a dump file's name is a dump that cannot be read: refused, not skipped.

    Raises:
        DumpFormatError: a symlink loop, a broken symlink or an unreadable entry.
    """
    try:
        if entry.is_file():
            return True
        if entry.is_dir() or not entry.is_symlink():
            return False
    except OSError:
        pass  # ELOOP from stat (a loop): said below
    raise DumpFormatError(entry.path, None, "a dump file", f"an entry that {_why_missing(Path(entry.path))}")


class DumpFolder:
    """A ``--bin-io-dump`` directory, indexed by var id and read lazily.

    Creating one lists the directory only (no file is opened). Headers and titles are read
    on first access of a var (``folder[id]``) or of :attr:`ids`, which needs every main
    file's inputs to order them. ``-inp<k>`` files are kept apart in :attr:`input_files`;
    anything whose name load_and_run would not write is listed in :attr:`stray` (not fatal).

    A malformed main file raises :class:`DumpFormatError` when it is read (strict default:
    silently dropping data would hide a broken run). With ``skip_bad=True`` every header is
    read at once and malformed files are left out of the folder and listed in :attr:`bad`
    instead, e.g. to analyse what a killed run managed to write. ``lister`` lists the directory
    faster where it can (the compare engine's C listing: main dumps by id, the other entries by
    name with whether each is a regular file; None: the folder lists it entry by entry).
    """

    def __init__(self, path: PathLike, *, skip_bad: bool = False,
                 lister: Optional[Callable[[str], Optional[Tuple[Dict[int, str], List[Tuple[str, bool]]]]]] = None) -> None:
        self.path = Path(path)
        if not self.path.exists():
            raise DumpFolderError(f"dump folder {self.path} {_why_missing(self.path)}")
        if not self.path.is_dir():
            raise DumpFolderError(f"dump folder {self.path} is not a directory")
        input_files: Dict[Tuple[int, int], Path] = {}
        stray: List[Path] = []
        incomplete = False
        # a faster listing (the compare engine's C one): the main dumps' paths by id, and the other
        # entries by name, with whether each is a regular file; None: listed here, entry by entry
        listed = lister(str(self.path)) if lister is not None else None
        if listed is not None:
            files, others = listed
            entries: Iterable[Tuple[str, Optional[Tuple[int, Optional[int]]]]] = (
                (name, _name_ids(name) if regular else None) for name, regular in others)  # not a file: stray
        else:
            files, entries = {}, self._scan()
        for name, ids in entries:
            if name == INCOMPLETE_MARKER:
                incomplete = True
            elif ids is None:
                stray.append(self.path / name)
            elif ids[1] is None:
                files[ids[0]] = os.path.join(self.path, name)  # a plain string: a Path each costs more than reading it
            else:
                input_files[(ids[0], ids[1])] = self.path / name
        self._files = files
        self.input_files: Dict[Tuple[int, int], Path] = dict(sorted(input_files.items()))
        self.stray: Tuple[Path, ...] = tuple(sorted(stray))
        self.incomplete: bool = incomplete
        self._cache: Dict[int, BinaryDump] = {}
        #: var id -> a header and title read and checked elsewhere (note_head), its dump made
        #: on first use: (dtype, shape, size, file size, title, title length, parsed)
        self._heads: Dict[int, _Head] = {}
        #: var id -> another folder's dump, or kept header, with the same header and title (cache_like)
        self._like: Dict[int, Union[BinaryDump, _Head]] = {}
        self._ids: Optional[Tuple[int, ...]] = None
        self._input_infos: Optional[Dict[int, VarInfo]] = None
        self.bad: Dict[Path, DumpFormatError] = {}
        if stray:
            log.debug("%s: %d stray entries ignored", self.path, len(stray))
        if skip_bad:
            for vid, fpath in sorted(files.items()):
                try:
                    # the whole title now: a file kept here must not fail later
                    self._cache[vid] = _read_dump(fpath, None, (vid, None), strict=True)
                except DumpFormatError as e:
                    self.bad[Path(fpath)] = e
                    del self._files[vid]
                    log.warning("skipping malformed dump: %s", e)

    def _scan(self) -> List[Tuple[str, Optional[Tuple[int, Optional[int]]]]]:
        """Every entry of the directory with its ids (:func:`_name_ids`; None unless it is a
        file named as load_and_run names a dump).

        Raises:
            DumpFolderError: the directory cannot be listed.
            DumpFormatError: a dump's name on a symlink loop, a broken symlink or an unreadable entry.
        """
        try:
            entries = list(os.scandir(self.path))
        except OSError as e:
            raise DumpFolderError(f"cannot list dump folder {self.path}: {e}") from None
        out = []
        for entry in entries:
            ids = _name_ids(entry.name)
            out.append((entry.name, ids if ids is not None and _is_file(entry) else None))
        return out

    def __repr__(self) -> str:
        return f"DumpFolder({str(self.path)!r}, {len(self._files)} vars, {len(self.input_files)} input files)"

    def __len__(self) -> int:
        return len(self._files)

    def __contains__(self, var_id: object) -> bool:
        return var_id in self._files

    def __getitem__(self, var_id: int) -> BinaryDump:
        d = self._cache.get(var_id)
        if d is None:
            h = self._heads.get(var_id)  # kept, not popped: another folder's _like may be it
            if h is not None:
                d = self._cache[var_id] = self._made(var_id, h)
            elif var_id in self._like:
                # another folder's header and title, this folder's file
                other = self._like.pop(var_id)
                if type(other) is tuple:
                    d = self._made(var_id, other)
                else:
                    values = other.__dict__.copy()  # type: ignore[union-attr]
                    values["file"] = self._files[var_id]
                    d = frozen_record(BinaryDump, values)
                self._cache[var_id] = d
        if d is None:
            path = self._files.get(var_id)
            if path is None:
                raise KeyError(f"var {var_id} has no dump in {self.path} ({len(self._files)} vars dumped)")
            d = _read_dump(path, None, (var_id, None), strict=False)
            self._cache[var_id] = d
        return d

    def __iter__(self) -> Iterator[BinaryDump]:
        for vid in self.ids:
            yield self[vid]

    def forget(self, var_id: int) -> None:
        """Drop the cached header and title of ``var_id`` (read again on next access): a
        caller that goes once through tens of thousands of vars need not keep them all."""
        self._cache.pop(var_id, None)
        self._heads.pop(var_id, None)
        self._like.pop(var_id, None)

    def forget_all(self) -> None:
        """:meth:`forget` every var."""
        self._cache.clear()
        self._heads.clear()
        self._like.clear()

    def cache_head(self, var_id: int, dtype: DType, shape: Tuple[int, ...], size: int, file_size: int, title: str,
                   title_len: int, parsed: Optional[Sequence[Any]] = None) -> BinaryDump:
        """Cache the dump of ``var_id`` from a header and title read elsewhere (the compare
        engine reads a pair's header, title and values in one pass, and delimits the usual
        title: ``parsed``, see :func:`~lar_prec.dumps.binary.dump_from_head`); checked as
        when the folder reads it.

        Raises:
            DumpFormatError: as ``folder[var_id]`` would.
        """
        d = dump_from_head(self._files[var_id], (var_id, None), dtype, shape, size, file_size, title, title_len,
                           parsed=parsed)
        self._cache[var_id] = d
        return d

    def note_head(self, var_id: int, dtype: DType, shape: Tuple[int, ...], size: int, file_size: int, title: str,
                  title_len: int, parsed: Optional[Sequence[Any]]) -> Optional[_Head]:
        """:meth:`cache_head`, its dump made on first use where the title is the usual one
        the compare engine's reader delimited (``parsed``; the checks that would fail then
        are made now, :func:`~lar_prec.dumps.binary.head_shape`): returns the header kept,
        (dtype, shape, size, file size, title, title length, parsed), its shape one tuple
        per distinct shape. None: the dump was made and cached now (:meth:`cache_head`).

        Raises:
            DumpFormatError: as ``folder[var_id]`` would.
        """
        got = head_shape((var_id, None), dtype, shape, size, file_size, title_len, parsed)
        if got is None:
            self._heads.pop(var_id, None)  # its dump is what answers now
            self.cache_head(var_id, dtype, shape, size, file_size, title, title_len, parsed)
            return None
        h = self._heads[var_id] = (dtype, got, size, file_size, title, title_len, parsed)
        return h

    def kept_heads(self) -> Tuple[Dict[int, _Head], Dict[int, Union[BinaryDump, _Head]]]:
        """The stores of :meth:`note_head` and :meth:`cache_like` (var id -> kept header), for a
        filer that keeps tens of thousands of headers as they do, in C (the compare engine's
        batch reader): its entries must be what those methods would make."""
        return self._heads, self._like

    def _made(self, var_id: int, h: _Head) -> BinaryDump:
        """The dump of ``var_id`` from a header kept by :meth:`note_head` (its or another
        folder's, for the same var id)."""
        return dump_from_head(self._files[var_id], (var_id, None), h[0], h[1], h[2], h[3], h[4], h[5], parsed=h[6])

    def _head(self, var_id: int) -> Optional[_Head]:
        """The header kept for ``var_id`` (:meth:`note_head`; another folder's, the same bytes,
        :meth:`cache_like`, until its dump is made), None when none was."""
        h = self._heads.get(var_id)
        if h is None:
            h = self._like.get(var_id)  # type: ignore[assignment]
            if type(h) is not tuple:
                return None
        return h

    def cache_like(self, var_id: int, other: Union[BinaryDump, _Head]) -> None:
        """Note that the dump of ``var_id`` has byte for byte the header and title of
        ``other``, the same var id's dump in another folder (only the file differs): its
        record is made from ``other`` when it is asked for (a folder of tens of thousands
        need not hold a copy of each at once)."""
        self._like[var_id] = other

    def noted_like(self, other: "DumpFolder") -> Set[int]:
        """The var ids whose header and title were noted to be byte for byte ``other``'s
        (:meth:`cache_like`, with ``other``'s record still cached): the same title, hence the
        same name, known without a call per var (tens of thousands of them)."""
        cached, heads = other._cache, other._heads
        return {v for v, d in self._like.items() if cached.get(v) is d or heads.get(v) is d}

    def title(self, var_id: int) -> str:
        """The title of ``var_id``'s dump (without making its record when it is known to be
        another folder's, :meth:`cache_like`)."""
        h = self._head(var_id)
        if h is not None:
            return h[4]
        other = self._like.get(var_id)
        return other.title if other is not None else self[var_id].title  # type: ignore[union-attr]

    def paths(self) -> Dict[int, Path]:
        """Var id -> main dump file, without reading any file."""
        return {v: Path(f) for v, f in self._files.items()}

    def files(self) -> Dict[int, str]:
        """Var id -> main dump file as a plain string (cheaper than :meth:`paths`)."""
        return dict(self._files)

    @property
    def ids(self) -> Tuple[int, ...]:
        """Var ids of the main files in execution order: a topological order of the input
        relation (inputs before their consumers), ties broken by the smaller id."""
        if self._ids is None:
            self._ids = self._order()
        return self._ids

    def _order(self) -> Tuple[int, ...]:
        order, cyclic = topological_order({v: self.inputs_of(v) for v in self._files})
        if cyclic:
            log.warning("%s: input relation has a cycle among vars %s; ordered by id", self.path, cyclic[:10])
        return tuple(order)

    def inputs_of(self, var_id: int) -> Tuple[int, ...]:
        """Ids of the inputs of ``var_id``'s owner operator, in input order."""
        h = self._head(var_id)
        if h is not None:
            return h[6][15]  # type: ignore[index]  # head_shape saw them delimited
        return self[var_id].input_ids

    def var_info(self, var_id: int) -> VarInfo:
        """The :class:`VarInfo` of ``var_id``: from its own dump, else from the title of a
        dump that has it as an input (vars that were not dumped themselves)."""
        if var_id in self._files:
            return self[var_id].var
        if self._input_infos is None:
            infos: Dict[int, VarInfo] = {}
            for vid in self.ids:
                for v in self[vid].inputs:
                    infos.setdefault(v.id, v)
            self._input_infos = infos
        if var_id in self._input_infos:
            return self._input_infos[var_id]
        raise KeyError(f"var {var_id} is neither dumped nor an input of a dumped var in {self.path}")

    def input_dump(self, var_id: int, index: int) -> BinaryDump:
        """The ``-inp<index>`` dump (``MGB_DUMP_INPUT``) of output var ``var_id``."""
        path = self.input_files.get((var_id, index))
        if path is None:
            raise KeyError(f"no input dump {dump_file_name(var_id, index)} in {self.path}")
        return read_binary_dump(path)

