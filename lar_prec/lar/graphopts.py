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
with the plain graph's (:mod:`lar_prec.compare.namepair`). The rewritten model also tells each
operator's ``format`` (:func:`format_map`), which settles how a dumped tensor is laid out
(:mod:`lar_prec.compare.relayout`).

megengine is imported only inside the functions that need it: importing this module costs
nothing and works without MegEngine.
"""
from __future__ import annotations

import contextlib
import hashlib
import os
import re
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Dict, Iterator, List, Mapping, Optional, Tuple

from lar_prec.lar import quickimport
from lar_prec.errors import LarPrecError, UsageError
from lar_prec.outputs import sha256_file as sha256_of

from lar_prec.records import PathLike  # noqa: E402

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


def _megengine_message(exc: BaseException) -> str:
    text = str(exc).split("\nbacktrace:", 1)[0]
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    return lines[0] if lines else type(exc).__name__


def _write_bytes_atomically(path: Path, data: bytes) -> None:
    """Temp file beside ``path``, fsync, rename: a crash never leaves half a model."""
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=str(path.parent))
    try:
        mask = os.umask(0)
        os.umask(mask)
        os.fchmod(fd, 0o666 & ~mask)  # mkstemp makes 0600; a model is as readable as any file the user writes
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


@contextlib.contextmanager
def rewrite_errors(what: str) -> Iterator[None]:
    """MegEngine's errors while rewriting as a RewriteError ``<what>: <MegEngine's first line>``;
    a UsageError passes as it is."""
    try:
        yield
    except (RuntimeError, AssertionError, ValueError, TypeError) as exc:
        if isinstance(exc, UsageError):
            raise
        raise RewriteError(f"{what}: {_megengine_message(exc)}") from None


def write_model(path: Path, data: bytes, what: str) -> str:
    """``data`` written to ``path`` atomically; returns its sha256.

    Raises:
        UsageError: ``path`` cannot be written (``what`` names the model).
    """
    try:
        _write_bytes_atomically(path, data)
    except OSError as exc:
        raise UsageError(f"cannot write {what} to {path}: {exc.strerror or exc}") from None
    return hashlib.sha256(data).hexdigest()


def load_output_vars(model: Path) -> list:
    """The output vars of ``model`` loaded with MegEngine's graph API, its log quiet; read from
    memory (``load_graph(path)`` leaves the file open). MegEngine's errors propagate.

    Raises:
        UsageError: there is no such file.
    """
    if not model.is_file():
        raise UsageError(f"model file {model} does not exist (expected a MegEngine .mge model)")
    import io
    import logging

    logging.getLogger("megengine").setLevel(logging.ERROR)
    # megengine only when a model is rewritten
    import megengine.core.tensor.megbrain_graph as G

    return G.load_graph(io.BytesIO(model.read_bytes())).output_vars_list


def _load_network(model: PathLike):  # -> megengine.utils.network.Network
    import io
    import logging

    logging.getLogger("megengine").setLevel(logging.ERROR)
    # megengine only when a model is rewritten
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


def formats_beside_dump(dump_dir: PathLike) -> Dict[str, str]:
    """:func:`format_map` of the model a run of the bundled load_and_run kept beside its dump
    (``<dump>.rewritten.mge``), or {} when there is none or it cannot be read (no MegEngine,
    a damaged file). Imports MegEngine: call it only for a shape that fits two layouts."""
    model = Path(str(dump_dir).rstrip("/\\") + ".rewritten.mge")
    if not model.is_file():
        return {}
    try:
        return format_map(model)
    except (LarPrecError, ImportError, OSError):
        return {}



def _log(msg: str) -> None:
    sys.stderr.write(msg + "\n")
    sys.stderr.flush()


#: load_and_run's layout transform flags -> lar_prec.lar.graphopts layout names
LAYOUT_FLAGS: Dict[str, str] = {
    "enable_nchw4": "nchw4", "enable_chwn4": "chwn4", "enable_nchw44": "nchw44",
    "enable_nchw88": "nchw88", "enable_nchw32": "nchw32", "enable_nchw64": "nchw64",
    "enable_nhwcd4": "nhwcd4", "enable_nchw44_dot": "nchw44_dot",
}

#: flags that need a graph rewrite (megenginelite has no option for them)
GRAPH_FLAGS = ("enable_chwn4", "enable_ioc16", "enable_io16xc32", "enable_fuse_conv_bias_nonlinearity",
               "enable_fuse_conv_bias_with_z", "optimize_for_inference", "fuse_grain")

#: load_and_run flags that exist but cannot work on this build, with the reason
REFUSED_FLAGS: Dict[str, str] = {
    "enable_jit": (
        "--enable_jit cannot work on this build: JIT (jit_level 1/2, graph_opt_level 3) needs a "
        "compiler the MegEngine CPU wheel lacks (load fails with 'No compiler support for cpu ... "
        "MLIR'); run a MegEngine build with JIT via --lar PATH"
    ),
}

#: stderr line that names the rewritten model a run executed (see :func:`rewritten_models`)
REWRITTEN_PREFIX = "lar_prec.lar: rewritten model: "


def check_options(opts: Any) -> None:
    """Refuse the combinations of optimisation options that cannot run, one line each.

    ``opts`` is a :class:`lar_prec.lar.LarOptions`. Raises UsageError.
    """
    layouts = [f for f in LAYOUT_FLAGS if getattr(opts, f)]
    if len(layouts) > 1:
        raise UsageError(
            f"--{layouts[0]} and --{layouts[1]} can not be used together: one layout transform at a "
            "time (the real load_and_run silently ignores all of them; lite fails at load)"
        )
    if opts.layout_transform:
        if opts.layout_transform == "cuda":
            raise UsageError("--layout_transform cuda needs a CUDA build; this one runs on the CPU (use cpu)")
        if opts.layout_transform != "cpu":
            raise UsageError(f"unsupported target(got:{opts.layout_transform}) for global layout "
                             "transform: expected cpu")
        if layouts:
            raise UsageError(f"--layout_transform and --{layouts[0]} can not be used together: "
                             "the global layout transform chooses the layouts itself")
        if opts.needs_rewrite:
            graph = next(f for f in GRAPH_FLAGS if getattr(opts, f))
            raise UsageError(f"--layout_transform and --{graph} can not be used together in the bundled "
                             "runner (the global layout transform runs in megenginelite, after any rewrite)")
    elif opts.layout_transform_dump:
        raise UsageError("--layout_transform_dump needs --layout_transform cpu")
    if opts.enable_ioc16 and opts.enable_io16xc32:
        raise UsageError("--enable_ioc16 and --enable_io16xc32 can not be used together: "
                         "fp16 compute or fp32 compute, not both")
    if opts.record_comp_seq2 and not opts.no_sanity_check:
        # load_and_run asserts the same (optimize_options.cpp)
        raise UsageError("--no-sanity-check should be set before --record-comp-seq2")
    if opts.rewritten_model and not (opts.needs_rewrite or opts.layout_transform):
        raise UsageError("--rewritten_model is only written when an option rewrites the graph "
                         f"({', '.join('--' + f for f in GRAPH_FLAGS)}, --layout_transform)")
    if opts.rewritten_model and opts.layout_transform_dump:
        raise UsageError("--rewritten_model and --layout_transform_dump name the same file; give one")


def rewritten_model_path(opts: Any) -> Optional[str]:
    """Where the run keeps the model it really executed when an option rewrites the graph.

    ``--rewritten_model FILE`` (or ``--layout_transform_dump FILE``) when given; else beside
    the dump: ``<bin_io_dump>.rewritten.mge`` or ``<io_dump>.rewritten.mge``; else None (the
    model goes to a temporary file that is deleted).
    """
    if not (opts.needs_rewrite or opts.layout_transform):
        return None
    explicit = opts.rewritten_model or opts.layout_transform_dump
    if explicit:
        return explicit
    dump = opts.bin_io_dump or opts.io_dump
    if dump:
        return dump.rstrip("/\\") + ".rewritten.mge"
    return None


def rewritten_models(stderr_text: str) -> List[Tuple[str, str]]:
    """``(path, sha256)`` of every rewritten model a run of the bundled load_and_run announced.

    The line is ``lar_prec.lar: rewritten model: sha256=<hex> path=<path>`` (the path last, as it
    may contain spaces); a runner records the hash in run.json.
    """
    out: List[Tuple[str, str]] = []
    for line in stderr_text.splitlines():
        if line.startswith(REWRITTEN_PREFIX):
            m = re.match(r"sha256=([0-9a-f]{64}) (?:\(deleted\) )?path=(.*)\Z", line[len(REWRITTEN_PREFIX):])
            if m:
                out.append((m.group(2), m.group(1)))
    return out


def announce(path: Path, *, kept: bool, what: str) -> None:
    """Print the line :func:`rewritten_models` reads, for a model written by someone else (lite)."""
    _log(f"model after {what} written")
    _log(f"{REWRITTEN_PREFIX}sha256={sha256_of(path)} {'' if kept else '(deleted) '}path={path}")


def rewrite_for(opts: Any, model: Path, target: Path, *, kept: bool) -> Path:
    """Rewrite the model for the graph options (MegEngine's graph API) and return its path."""
    try:
        import logging

        # megengine only when a model is rewritten (without megfile and pkg_resources: quickimport)
        quickimport.import_megengine()
        import megengine.logger

        # an int: the function compares with logging's numbers (a name would mean DEBUG)
        megengine.logger.set_mgb_log_level(logging.DEBUG if opts.verbose else logging.ERROR)
    except ImportError as exc:  # pragma: no cover - depends on the environment
        raise UsageError(f"cannot import megengine ({exc}); the graph options need megengine==1.13.0") from None
    rewrite = Rewrite(
        layout=opts.layout,
        ioc16=opts.enable_ioc16,
        io16xc32=opts.enable_io16xc32,
        fuse_conv_bias_nonlinearity=opts.enable_fuse_conv_bias_nonlinearity,
        fuse_conv_bias_with_z=opts.enable_fuse_conv_bias_with_z,
        fuse_grain=opts.fuse_grain,
    )
    _log(f"rewrite the graph for {rewrite.describe()} (MegEngine graph API)")
    done = rewrite_model(model, target, rewrite)
    _log(f"{REWRITTEN_PREFIX}sha256={done.sha256} {'' if kept else '(deleted) '}path={done.path}")
    return done.path


#: (flag of the parsed options, LiteConfig.options field, value set, what load_and_run prints)
_LITE_SWITCHES = (
    ("enable_fuse_preprocess", "fuse_preprocess", 1, "enable fuse-preprocess optimization"),
    ("weight_preprocess", "weight_preprocess", 1, "enable weight-preprocess optimization"),
    ("const_shape", "const_shape", 1, "enable const var shape"),
    ("no_sanity_check", "var_sanity_check_first_run", 0, "disable var sanity check optimization"),
)


def set_lite_options(o: Any, opts: Any) -> None:
    """The runtime options megenginelite takes (``LiteConfig.options``), before the network exists."""
    # A layout of a rewritten model is already in the graph; chwn4 is never a lite option.
    if opts.layout and not opts.needs_rewrite:
        _log(f"enable {opts.layout} optimization")
        setattr(o, f"enable_{opts.layout}", 1)
    for flag, option, value, message in _LITE_SWITCHES:
        if getattr(opts, flag):
            _log(message)
            setattr(o, option, value)
    if opts.record_level:
        _log(f"set record_comp_seq_level to {opts.record_level}")
        o.comp_node_seq_record_level = opts.record_level
