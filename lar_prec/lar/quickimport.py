"""MegEngine's packages imported without two modules the bundled tools never call.

megenginelite and megengine import ``megfile`` (with boto3: s3:// paths) and ``pkg_resources``
at start-up, ~0.4-0.7 s of every bundled run, layerwise build and graph record. The tools here
hand MegEngine open files or local paths, so megfile is never called; pkg_resources serves one
check that megbrain or megenginelite is not installed beside megengine, which a list of the
installed distributions made from the dist-info folder names answers the same way. So
:func:`with_stand_ins` imports them with stand-in modules in ``sys.modules``, taken out after;
a version of MegEngine that asks the stand-ins for more (ImportError or AttributeError) is
imported again with the real modules.
"""
from __future__ import annotations

import os
import re
import sys
import types
from typing import Any, Callable, Dict, List, Sequence, TypeVar

T = TypeVar("T")


def _installed() -> List[types.SimpleNamespace]:
    """The installed distributions on sys.path as pkg_resources.working_set lists them for
    megenginelite's check: each with its ``key`` (the dist-info or egg-info folder's name up to
    its version, lower case, runs of other characters as '-'), from the folder names alone."""
    found: List[types.SimpleNamespace] = []
    for entry in sys.path:
        try:
            names = os.listdir(entry or ".")
        except OSError:
            continue
        for n in names:
            if n.endswith((".dist-info", ".egg-info")):
                project = n.rsplit(".", 1)[0].split("-", 1)[0]
                found.append(types.SimpleNamespace(key=re.sub(r"[^A-Za-z0-9.]+", "-", project).lower()))
    return found


def _not_here(name: str) -> Callable[..., Any]:
    def call(*_args: Any, **_kwargs: Any) -> Any:
        raise RuntimeError(f"megfile.{name} is not available in lar-prec's MegEngine processes")

    return call


def stand_ins() -> Dict[str, Any]:
    """The stand-in modules, for those not imported already."""
    made: Dict[str, Any] = {}
    if "megfile" not in sys.modules:
        megfile = types.ModuleType("megfile")
        megfile.smart_open = open  # type: ignore[attr-defined]  # local paths, as megfile opens them
        for name in ("smart_copy", "smart_getmd5", "smart_getsize"):  # megengine.hub's downloads
            setattr(megfile, name, _not_here(name))
        made["megfile"] = megfile
    if "pkg_resources" not in sys.modules:
        pkg = types.ModuleType("pkg_resources")
        pkg.working_set = _installed()  # type: ignore[attr-defined]
        made["pkg_resources"] = pkg
    return made


def with_stand_ins(importer: Callable[[], T], packages: Sequence[str]) -> T:
    """``importer()`` (it imports ``packages``) with the stand-ins in sys.modules; again with the
    real modules if these packages need more from them (their half-imported modules dropped)."""
    made = stand_ins()
    sys.modules.update(made)
    try:
        return importer()
    except (ImportError, AttributeError):
        for name in [m for m in sys.modules if any(m == p or m.startswith(p + ".") for p in packages)]:
            del sys.modules[name]  # half imported with the stand-ins
    finally:
        for name, module in made.items():
            if sys.modules.get(name) is module:
                del sys.modules[name]
    return importer()


def import_megengine() -> None:
    """megengine's graph API imported quickly (the layerwise build, graph records, rewrites)."""

    def importer() -> None:
        import megengine.core.tensor.megbrain_graph  # noqa: F401
        import megengine.utils.comp_graph_tools  # noqa: F401

    with_stand_ins(importer, ("megengine",))
