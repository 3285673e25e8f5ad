"""MegEngine graph rewrites for the load_and_run options megenginelite cannot take.

load_and_run applies its optimisation options either at run time (megenginelite
``LiteConfig.options``: the layout transforms, weight/fuse preprocessing, const shape,
recording) or as graph passes that lite does not expose (fp16 ``ioc16``, conv-bias fusion,
``optimize_for_inference``, ``fuse_grain``, the CHWN4 layout). The bundled load_and_run
(:mod:`lar_prec.lar`) runs the second kind by rewriting the model with MegEngine's graph API
into a new ``.mge`` file and running that (reference/graph-options.md section 1):

    Network.load(model).dump(out, keep_var_name=2, keep_param_name=True,
                             optimize_for_inference=True, enable_*=True)

``keep_var_name=2`` keeps every var name, which is what pairs the rewritten graph's vars
with the plain graph's (:mod:`lar_prec.namepair`). The rewritten model also tells each
operator's ``format`` (:func:`format_map`), which settles how a dumped tensor is laid out
(:mod:`lar_prec.relayout`).

megengine is imported only inside the functions that need it: importing this module costs
nothing and works without MegEngine.
"""
from __future__ import annotations

import contextlib
import hashlib
import os
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Dict, Mapping, Optional, Tuple, Union

from lar_prec.errors import LarPrecError, UsageError

PathLike = Union[str, "os.PathLike[str]"]

#: layout transform flag (load_and_run spelling, without ``enable_``) -> graph API keyword
LAYOUT_KWARGS: Dict[str, str] = {
    "nchw4": "enable_nchw4",
    "chwn4": "enable_chwn4",
    "nchw44": "enable_nchw44",
    "nchw88": "enable_nchw88",
    "nchw32": "enable_nchw32",
    "nchw64": "enable_nchw64",
    "nhwcd4": "enable_hwcd4",  # the graph API calls it hwcd4
    "nchw44_dot": "enable_nchw44_dot",
}

#: layout transforms megenginelite takes as ``LiteConfig.options.enable_<name>`` (no chwn4)
LITE_LAYOUTS = frozenset(LAYOUT_KWARGS) - {"chwn4"}

#: graph-only passes: load_and_run flag (underscore form) -> graph API keyword
GRAPH_PASS_KWARGS: Dict[str, str] = {
    "enable_ioc16": "enable_ioc16",
    "enable_io16xc32": "enable_io16xc32",  # graph API only; not a load_and_run flag
    "enable_fuse_conv_bias_nonlinearity": "enable_fuse_conv_bias_nonlinearity",
    "enable_fuse_conv_bias_with_z": "enable_fuse_conv_bias_with_z",
    "fuse_grain": "enable_fuse_grain",
}


class RewriteError(LarPrecError, RuntimeError):
    """MegEngine refused to rewrite or to write the model; the message is MegEngine's first line."""


@dataclass(frozen=True)
class Rewrite:
    """What to do to a model: one layout transform at most, and graph passes."""

    layout: Optional[str] = None  # a key of LAYOUT_KWARGS
    ioc16: bool = False
    io16xc32: bool = False
    fuse_conv_bias_nonlinearity: bool = False
    fuse_conv_bias_with_z: bool = False
    fuse_preprocess: bool = False
    fuse_grain: bool = False

    def kwargs(self) -> Dict[str, bool]:
        """The keyword arguments of ``Network.dump`` / ``optimize_for_inference``."""
        kw: Dict[str, bool] = {}
        if self.layout is not None:
            if self.layout not in LAYOUT_KWARGS:
                raise UsageError(f"unknown layout transform {self.layout!r} (one of {', '.join(LAYOUT_KWARGS)})")
            kw[LAYOUT_KWARGS[self.layout]] = True
        for field, key in (("ioc16", "enable_ioc16"), ("io16xc32", "enable_io16xc32"),
                           ("fuse_conv_bias_nonlinearity", "enable_fuse_conv_bias_nonlinearity"),
                           ("fuse_conv_bias_with_z", "enable_fuse_conv_bias_with_z"),
                           ("fuse_preprocess", "enable_fuse_preprocess")):
            if getattr(self, field):
                kw[key] = True
        # The graph API fuses grain operators unless told not to; load_and_run only with --fuse_grain.
        kw["enable_fuse_grain"] = self.fuse_grain
        return kw

    def describe(self) -> str:
        """A short label such as ``nchw44+fuse_conv_bias_nonlinearity`` (``optimize_for_inference`` alone)."""
        parts = [k for k, v in self.kwargs().items() if v]
        return "+".join(p[len("enable_"):] if p.startswith("enable_") else p for p in parts) or "optimize_for_inference"


@dataclass(frozen=True)
class RewrittenModel:
    """A model file written by :func:`rewrite_model`."""

    path: Path
    sha256: str
    rewrite: Rewrite


def sha256_of(path: PathLike) -> str:
    """Hex sha256 of a file, read in 1 MiB pieces."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def _megengine_message(exc: BaseException) -> str:
    text = str(exc).split("\nbacktrace:", 1)[0]
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    return lines[0] if lines else type(exc).__name__


def _write_bytes_atomically(path: Path, data: bytes) -> None:
    """Temp file beside ``path``, fsync, rename: a crash never leaves half a model."""
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=str(path.parent))
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
        tmp = ""
    finally:
        if tmp:
            with contextlib.suppress(OSError):
                os.unlink(tmp)


def _load_network(model: PathLike):  # -> megengine.utils.network.Network
    import io
    import logging

    logging.getLogger("megengine").setLevel(logging.ERROR)
    from megengine.utils.network import Network

    # Read the bytes ourselves: Network.load(path) leaves the file open.
    with open(model, "rb") as f:
        return Network.load(io.BytesIO(f.read()))


def rewrite_model(model: PathLike, out: PathLike, rewrite: Rewrite) -> RewrittenModel:
    """Write ``model`` rewritten by ``rewrite`` to ``out`` (replaced atomically).

    Every var name is kept (``keep_var_name=2``) and parameter names too. The same model and
    rewrite give the same bytes, so a naive and a default run under one option execute the
    same graph and their dumps pair by var id.

    Raises:
        UsageError: ``model`` cannot be read or ``out`` cannot be written.
        RewriteError: MegEngine cannot load the model or apply a pass to it.
    """
    import io

    src, dst = Path(model), Path(out)
    if not src.is_file():
        raise UsageError(f"model file {src} does not exist")
    kwargs = rewrite.kwargs()
    try:
        net = _load_network(src)
        buf = io.BytesIO()
        net.dump(buf, keep_var_name=2, keep_param_name=True, optimize_for_inference=True, **kwargs)
    except (RuntimeError, AssertionError, ValueError, TypeError) as exc:
        raise RewriteError(f"cannot rewrite {src} for {rewrite.describe()}: {_megengine_message(exc)}") from None
    data = buf.getvalue()
    try:
        _write_bytes_atomically(dst, data)
    except OSError as exc:
        raise UsageError(f"cannot write the rewritten model to {dst}: {exc.strerror or exc}") from None
    return RewrittenModel(path=dst, sha256=hashlib.sha256(data).hexdigest(), rewrite=rewrite)


def _format_of(opr) -> Optional[str]:
    try:
        params = opr.params
    except Exception:  # some operator types have no param struct in Python
        return None
    if isinstance(params, Mapping):
        fmt = params.get("format")
        return str(fmt) if fmt is not None else None
    return None


def format_map(model: PathLike) -> Dict[str, str]:
    """Var name -> the ``format`` of the operator producing it (``NCHW``, ``NCHW44``, ``NHWCD4``, ...).

    Only vars whose operator has a ``format`` parameter are listed (convolutions, pooling,
    resize, ...); data-movement and elementwise operators carry none. Names are the ones the
    dump titles show when the model was dumped with ``keep_var_name=2``.
    """
    try:
        net = _load_network(model)
    except (RuntimeError, AssertionError, ValueError) as exc:
        raise RewriteError(f"cannot load {model}: {_megengine_message(exc)}") from None
    out: Dict[str, str] = {}
    for opr in net.all_oprs:
        fmt = _format_of(opr)
        if fmt is None:
            continue
        for var in opr.outputs:
            out[var.name] = fmt
    return out


def layout_format_map(model: PathLike, layout: str) -> Dict[str, str]:
    """:func:`format_map` of ``model`` rewritten for ``layout`` (in a temporary file).

    For runs where megenginelite applied the layout transform itself: the pass is the same,
    so the var names and formats are the ones of the graph lite executed.
    """
    with tempfile.TemporaryDirectory(prefix="lar-prec-format-") as tmp:
        rewritten = rewrite_model(model, Path(tmp) / "model.mge", Rewrite(layout=layout))
        return format_map(rewritten.path)


def formats_by_name(model: Optional[PathLike], layout: Optional[str] = None) -> Tuple[Dict[str, str], str]:
    """Best available var-name -> format map and where it came from (``"model"``,
    ``"rewrite"`` or ``"none"``): the rewritten model when there is one, else the plain model
    rewritten for ``layout``, else nothing."""
    if model is not None and layout is None:
        return format_map(model), "model"
    if model is not None and layout is not None:
        return layout_format_map(model, layout), "rewrite"
    return {}, "none"
