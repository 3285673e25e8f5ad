"""Which algorithm each operator ran in each shake run.

Under ``--fast-run`` every run of a shake writes its own ``--fast-run-algo-policy`` cache (one
file per run, :func:`cache_flags`); MegEngine profiles each operator in each process and keeps
the results there, fastest first, so the cache says which algorithm the run took
(:mod:`lar_prec.dumps.algocache`). Matching an operator to its cache entry by type and
layouts gives, per var, ``{run label: algorithm}``.

A ``default`` or ``reproducible`` run chooses by MegEngine's heuristic, which it writes nowhere;
but under ``--verbose`` MegEngine's algorithm chooser logs every choice, heuristic ones
included (``setup_algo@algo_chooser.cpp: ConvolutionForward: tensor layouts({..} , {..} ) ->
({..} )): algo=NAME workspace=...``): :func:`verbose_flags` asks for it and
:func:`verbose_algorithms` reads it, matching a line to an operator by type and layouts as
for the cache. Without it (:data:`HEURISTIC_UNKNOWN`) the choice cannot be told.
"""
from __future__ import annotations

import re
from pathlib import Path
from typing import Dict, List, Mapping, Optional, Sequence, Tuple, Union

from lar_prec.lar.flags import flag_names, is_fast_run
from lar_prec.dumps.algocache import category_op, chosen_algorithms, read_algo_cache
from lar_prec.dumps.folder import DumpFolder
from lar_prec.errors import UsageError

#: the cache's file name inside a run folder (remote runs write it there: it is pulled back)
RUN_CACHE = "fast-run-algo-policy.cache"

HEURISTIC_UNKNOWN = ("a {config} run chooses each operator's algorithm by MegEngine's heuristic, which load_and_run "
                     "writes nowhere (--fast-run-algo-policy only when it profiles, under --fast-run or --full-run) "
                     "and logs only under --verbose, where these runs' logs named none: the algorithms of these "
                     "runs cannot be told")
USER_CACHE = ("every run read the --fast-run-algo-policy cache given ({path}), so every run took the same "
              "algorithms: the cache's choices are listed for run 1")


#: MegEngine's algorithm chooser at DEBUG level (``--verbose``): operator type, layouts, algorithm
_ALGO_LINE = re.compile(r"setup_algo@algo_chooser\.cpp:\d+\]\[DEBUG\] (\w{1,64}): tensor layouts\((.{0,4000}?)\) -> "
                        r"\((.{0,2000}?)\)\): algo=(\S{1,400}) workspace=")
_LAYOUT = re.compile(r"\{([0-9(),]{0,400}) \w{1,40}\}")
_DIM = re.compile(r"^(\d{1,12})\(-?\d{1,12}\)$")
HOW_VERBOSE = "each run's --verbose log: MegEngine's algorithm chooser names every choice, heuristic ones included"


def logs_algorithms(flags: Sequence[str]) -> bool:
    """Whether runs with these flags log their algorithm choices (``--verbose``, no profiling)."""
    return "verbose" in flag_names(flags) and not records_algorithms(flags) and user_cache(flags) is None


def verbose_flags(flags: Sequence[str]) -> Tuple[str, ...]:
    """``("--verbose",)`` for runs that choose by heuristic (no profiling, no cache of the
    user's), whose choices only the log tells; () otherwise."""
    if records_algorithms(flags) or user_cache(flags) is not None or "verbose" in flag_names(flags):
        return ()
    return ("--verbose",)


def _shapes(text: str) -> Optional[List[Tuple[int, ...]]]:
    out = []
    for dims in _LAYOUT.findall(text):
        shape = []
        for d in dims.split(","):
            m = _DIM.match(d)
            if not m:
                return None
            shape.append(int(m.group(1)))
        out.append(tuple(shape))
    return out


def verbose_algorithms(stderr: str, dump: Path) -> Dict[int, str]:
    """Var id -> the algorithm MegEngine's chooser logged for that var's operator under
    ``--verbose``: a line of the operator's type whose input layouts are the operator's inputs'
    shapes and whose output is the var's (several distinct choices joined by `` | ``)."""
    lines: Dict[str, List[Tuple[List[Tuple[int, ...]], Tuple[int, ...], str]]] = {}
    for m in _ALGO_LINE.finditer(stderr):
        ins, outs = _shapes(m.group(2)), _shapes(m.group(3))
        if ins is None or not outs:
            continue
        lines.setdefault(m.group(1), []).append((ins, outs[0], m.group(4)))
    folder = DumpFolder(dump)
    found: Dict[int, str] = {}
    for vid, opr_type, in_shapes, shape in _operators(folder, set(lines)):
        names: List[str] = []
        for ins, out, algo in lines[opr_type]:
            if out == tuple(shape) and [tuple(s) for s in in_shapes[:len(ins)]] == ins and algo not in names:
                names.append(algo)
        if names:
            found[vid] = " | ".join(names)
    return found


def records_algorithms(flags: Sequence[str]) -> bool:
    """Whether runs with these flags profile, and so can write a cache of their choices."""
    return is_fast_run(flags)


def user_cache(flags: Sequence[str]) -> Optional[str]:
    """The ``--fast-run-algo-policy`` the user gave (None: not given)."""
    if "fast_run_algo_policy" not in flag_names(flags):
        return None
    for i, f in enumerate(flags):
        if f.split("=", 1)[0].lstrip("-").replace("-", "_") == "fast_run_algo_policy":
            return f.split("=", 1)[1] if "=" in f else (flags[i + 1] if i + 1 < len(flags) else None)
    return None


def cache_flags(flags: Sequence[str], adir: Path, label: str, *, remote: bool) -> Tuple[Tuple[str, ...], Union[Path, str, None]]:
    """(flags for run ``label``, where its cache will be) so the run writes a cache of its own.

    None when the run does not profile or the user gave a cache (then every run reads it).
    Locally the cache goes to ``adir/algorithms/<label>.cache``; on a device it is written
    into the run's own folder (the relative :data:`RUN_CACHE`, pulled back with the dump)
    and the second value is that relative name.
    """
    if not records_algorithms(flags) or user_cache(flags) is not None:
        return (), None
    if remote:
        return ("--fast-run-algo-policy", RUN_CACHE), RUN_CACHE
    path = adir / "algorithms" / f"{label}.cache"
    path.parent.mkdir(parents=True, exist_ok=True)
    return ("--fast-run-algo-policy", str(path)), path


def _operators(folder: DumpFolder, types: set) -> List[Tuple[int, str, List[Tuple[int, ...]], Tuple[int, ...]]]:
    out = []
    for vid in folder.files():
        d = folder[vid]
        v = d.var
        if v.opr_type in types:
            out.append((vid, v.opr_type, [i.shape for i in d.inputs], v.shape))
    return out


def run_algorithms(dump: Path, cache: Path, *, reproducible: bool = False) -> Dict[int, str]:
    """Var id -> the algorithm the run took for that var's operator, from the run's cache.

    Several cache entries with the operator's layouts (different params) give every
    candidate, joined by `` | ``.

    Raises:
        UsageError: the cache is missing or not a fast-run algorithm cache.
    """
    entries = read_algo_cache(cache)
    types = {category_op(e.category) for e in entries}
    folder = DumpFolder(dump)
    chosen = chosen_algorithms(entries, _operators(folder, types), reproducible=reproducible)
    return {vid: " | ".join(names) for vid, names in chosen.items()}


def by_var(per_run: Mapping[str, Mapping[int, str]], labels: Sequence[str]) -> Dict[int, Dict[str, str]]:
    """Var id -> {run label: algorithm}, runs in ``labels`` order."""
    out: Dict[int, Dict[str, str]] = {}
    for lbl in labels:
        for vid, name in per_run.get(lbl, {}).items():
            out.setdefault(vid, {})[lbl] = name
    return out


def differs(algos: Mapping[str, str]) -> bool:
    return len(set(algos.values())) > 1


def grouped(algos: Mapping[str, str], labels: Optional[Sequence[str]] = None) -> str:
    """``A: run-1, run-3; B: run-2`` (algorithms in the order their first run comes)."""
    groups: Dict[str, List[str]] = {}
    for lbl in labels if labels is not None else list(algos):
        if lbl in algos:
            groups.setdefault(algos[lbl], []).append(lbl)
    return "; ".join(f"{', '.join(_short_runs(ls))}: {name}" for name, ls in groups.items())


def _short_runs(labels: Sequence[str], limit: int = 6) -> List[str]:
    return list(labels[:limit]) + ([f"+{len(labels) - limit} more"] if len(labels) > limit else [])


def read_caches(caches: Mapping[str, Path], dumps: Mapping[str, Path], *, reproducible: bool
                ) -> Tuple[Dict[str, Dict[int, str]], List[str]]:
    """Each run's algorithms from its cache; problems (a cache missing or unreadable) as notes."""
    out: Dict[str, Dict[int, str]] = {}
    notes: List[str] = []
    for lbl, cache in caches.items():
        try:
            out[lbl] = run_algorithms(dumps[lbl], cache, reproducible=reproducible)
        except UsageError as exc:
            notes.append(f"the algorithms of run {lbl} cannot be told: {exc}")
    return out, notes
