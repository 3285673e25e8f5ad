"""The bundled ``load_and_run``: ``python -m lar_prec.lar MODEL [flags]`` on megenginelite.

The MegEngine wheel ships no ``load_and_run`` binary, so lar-prec carries this stand-in. It
accepts the real binary's syntax (gflags: ``--io-dump F`` = ``--io_dump F`` = ``--io_dump=F`` =
``-io-dump F``; bool flags as ``--x``, ``--x=false``, ``--nox``) for the flags a precision
analysis needs, and refuses every other load_and_run flag with a message that points at
``--lar PATH`` (a real MegEngine build).

Behaviour that differs from the real binary, on purpose:

* the model always runs through lite (the real one runs ``mgv2`` models in MDL mode), so
  variable ids and dump file names can differ from a real binary's dumps of the same model;
* ``--bin-io-dump DIR`` is created when missing (the real binary aborts);
* a text and a binary dump in one run are refused (the real binary segfaults: one dumper per
  network, see reference/load_and_run.md 1.3);
* ``--reproducible`` works (in the real binary's lite mode it has no effect);
* a dtype that differs from the model input, an unknown input name, ``.npy`` files of
  unsupported dtypes, negative ``--iter`` are errors instead of silent reinterpretation,
  wrap-around or aborts; float16 ``.npy`` inputs are accepted;
* every failure exits with status 1 and one ``load_and_run: error: ...`` line on stderr (an
  unknown flag as gflags says it: ``ERROR: unknown command line flag 'NAME'``); ``--version``,
  ``--helpfull`` and the ``using MegBrain X(P) and MegDNN Y`` line that starts a run are the
  real tool's (``tests/lar/test_real_parity.py`` holds the two side by side);
* optimisation options megenginelite cannot take (``--enable_chwn4``, ``--enable_ioc16``,
  conv-bias fusion, ``--optimize_for_inference``, ``--fuse_grain``) are applied by rewriting
  the model with MegEngine's graph API first (:mod:`lar_prec.lar.graphopts`); the rewritten model
  is kept beside the dump (``<dump>.rewritten.mge`` or ``--rewritten_model FILE``) and its
  path and sha256 are printed on stderr (:func:`rewritten_models` reads that line). Layout
  transforms go to megenginelite unless a rewrite happens anyway, then into the rewrite;
* ``--enable_io16xc32`` (fp16 I/O, fp32 compute) is lar-prec's own: the graph API offers it,
  load_and_run does not;
* two layout transforms at once are refused (the real binary silently ignores both), and
  ``--enable_jit`` is refused: JIT needs a compiler the MegEngine CPU wheel lacks.

The command line (flags, gflags syntax, :class:`LarOptions`) is :mod:`lar_prec.lar.flags`;
this module runs the model.

``MGB_USE_MEGDNN_DBG`` and ``MGB_DUMP_INPUT`` are read by the C++ runtime from this process's
environment; nothing here touches them. Run each configuration in a fresh process.
"""
from __future__ import annotations

import math
import os
import re
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence, Tuple

from lar_prec import __version__
from lar_prec._lazy import numpy as np  # imported on first use (start-up time)

from lar_prec.dumps.binary import write_binary_dump
from lar_prec.dumps.titles import VarInfo, contiguous_layout, format_title
from lar_prec.errors import LarPrecError, UsageError
from lar_prec.outputs import json_text
from lar_prec.lar import graphopts, quickimport
from lar_prec.lar.graphopts import (
    rewritten_model_path,
)
# The --input grammar lives in inputspec (the runner uses it too); re-exported for callers of lar.
from lar_prec.inputspec import (
    InputItem,
    check_not_empty,
    load_json_inputs,
    load_npy,
    parse_literal,
    parse_shape,
    path_problem,
    split_input,
)

# The command line (flag tables, gflags parsing, LarOptions, --help) lives in lar_flags;
# re-exported here for callers of lar.
from lar_prec.lar.flags import (
    _HELP,
    EXIT_FAILURE,
    PROG,
    VERSION_LINE,
    LarOptions,
    LarUsageError,
    UnknownFlag,
    helpfull_text,
    parse_argv,
    parse_options,
)


class MegEngineError(Exception):
    """MegEngine raised while loading or running; the message is MegEngine's own first line."""


# --------------------------------------------------------------------------- running


def _log(msg: str) -> None:
    sys.stderr.write(msg + "\n")
    sys.stderr.flush()


def _megengine_message(exc: BaseException) -> str:
    """MegEngine's own message without the backtrace and the lite error-code suffix."""
    text = str(exc)
    text = text.split("\nbacktrace:", 1)[0]
    text = re.sub(r",? Error Code: \d+\s*$", "", text.strip())
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    return lines[0] if lines else type(exc).__name__


def _import_lite() -> Tuple[Any, Any]:
    """megenginelite and its tensor module, imported with the stand-ins of
    :mod:`lar_prec.lar.quickimport` for two modules it imports at start-up and the bundled lar
    does not need: they were ~0.4 s of its ~0.65 s, paid by every run. ``megfile`` (with boto3)
    opens s3:// model paths: the lar hands lite an open file (:func:`_load`), so lite never
    calls it; ``pkg_resources`` serves one check that megbrain or megenginelite is not installed
    beside megengine."""
    return quickimport.with_stand_ins(_import_lite_with, ("megenginelite",))


def _import_lite_with() -> Tuple[Any, Any]:
    # on first use: importing it costs ~0.25 s even so, and needs the wheel
    import megenginelite as L
    import megenginelite.tensor as LT

    return L, LT


def _load(net: Any, model: Path) -> None:
    """``net.load`` of a model file opened here (lite opens a path through megfile)."""
    with open(model, "rb") as f:
        net.load(f)


class _Lite:
    """megenginelite, imported on first use (importing it takes ~0.25 s and needs the wheel)."""

    def __init__(self) -> None:
        import ctypes
        import logging

        # megenginelite logs every C error through the root logger before raising it; we
        # print the message ourselves, once.
        logging.getLogger().addHandler(logging.NullHandler())
        try:
            # megenginelite only when a model runs (--help and --version stay fast)
            L, LT = _import_lite()
        except ImportError as exc:  # pragma: no cover - depends on the environment
            raise LarUsageError(
                f"cannot import megenginelite ({exc}); install megengine==1.13.0 or give --lar PATH"
            ) from None
        # float16 IO: the wheel's ctypes table lacks LITE_HALF (reference 4.2).
        LT._lite_dtypes_to_ctype.setdefault(L.LiteDataType.LITE_HALF, ctypes.c_uint16)
        self.L = L
        self.ctypes = ctypes
        self.np_of = {
            L.LiteDataType.LITE_FLOAT: np.dtype("float32"),
            L.LiteDataType.LITE_HALF: np.dtype("float16"),
            L.LiteDataType.LITE_INT: np.dtype("int32"),
            L.LiteDataType.LITE_INT16: np.dtype("int16"),
            L.LiteDataType.LITE_INT8: np.dtype("int8"),
            L.LiteDataType.LITE_UINT8: np.dtype("uint8"),
            L.LiteDataType.LITE_UINT16: np.dtype("uint16"),
        }
        self.lite_of = {v: k for k, v in self.np_of.items()}

    def version(self) -> str:
        return str(self.L.__version__)

    def build_line(self) -> Optional[str]:
        """MegEngine's load_and_run's first log line, ``using MegBrain 1.13.0(0) and MegDNN 9.3.0``,
        from ``mgb::get_version`` and ``megdnn::get_version`` of the wheel's library (lite
        already loaded it); None when they cannot be read."""
        class V(self.ctypes.Structure):
            _fields_ = [(n, self.ctypes.c_int) for n in ("major", "minor", "patch", "is_dev")]

        class D(self.ctypes.Structure):
            _fields_ = [(n, self.ctypes.c_int) for n in ("major", "minor", "patch")]

        try:
            import importlib.util

            spec = importlib.util.find_spec("megengine")
            where = list(spec.submodule_search_locations or []) if spec else []
            lib = self.ctypes.CDLL(os.path.join(where[0], "core", "lib", "libmegengine_shared.so"))
            mgb, dnn = lib._ZN3mgb11get_versionEv, lib._ZN6megdnn11get_versionEv
        except (ImportError, OSError, IndexError, AttributeError):
            return None
        mgb.restype, dnn.restype = V, D
        v, d = mgb(), dnn()
        return (f"megbrain/lite/load_and_run:\nusing MegBrain {v.major}.{v.minor}.{v.patch}({v.is_dev}) "
                f"and MegDNN {d.major}.{d.minor}.{d.patch}")

    def layout_of(self, tensor: Any) -> Tuple[Tuple[int, ...], np.dtype]:
        lay = tensor.layout
        shape = tuple(int(lay.shapes[i]) for i in range(lay.ndim))
        dtype = self.np_of.get(self.L.LiteDataType(lay.data_type))
        return shape, dtype

    def feed(self, tensor: Any, arr: np.ndarray) -> None:
        """Copy ``arr`` into an input tensor, with its own shape (dynamic shapes allowed)."""
        arr = np.ascontiguousarray(arr)
        tensor.layout = self.L.LiteLayout(list(arr.shape), self.lite_of[arr.dtype])
        tensor.set_data_by_copy(arr.ctypes.data_as(self.ctypes.c_void_p), data_length=arr.nbytes)


def _gather_inputs(items: Sequence[InputItem], model_inputs: Dict[str, Tuple[Tuple[int, ...], Any]]
                   ) -> Dict[str, Tuple[np.ndarray, str]]:
    """Turn ``--input`` items into arrays, checked against the model's inputs.

    Returns ``{name: (array, where it came from)}``.
    """
    arrays: Dict[str, Tuple[np.ndarray, str]] = {}
    for item in items:
        if item.kind == "json":
            for name, arr in load_json_inputs(item.text).items():
                arrays[name] = (arr, item.text)
            continue
        if item.kind == "image":
            raise LarUsageError(
                f"--input {item.name}:{item.text}: .ppm/.pgm images are not supported by the bundled "
                "runner; convert the image to .npy (uint8, NHWC) or give --lar PATH"
            )
        if item.kind == "random":
            raise LarUsageError(f"--input {item.spec}: random[LOW,HIGH]@SEED inputs are made by lar-prec, "
                                "not load_and_run; give name:file.npy or name:{d0,d1,...}")
        if item.name not in model_inputs:
            raise LarUsageError(
                f"the model has no input named {item.name!r} (inputs: {', '.join(model_inputs) or 'none'})"
            )
        if item.kind == "npy":
            arrays[item.name] = (load_npy(item.text), item.text)
        elif item.kind == "shape":
            dtype = model_inputs[item.name][1]
            if dtype is None:
                raise LarUsageError(f"input {item.name!r} has a dtype megenginelite cannot feed")
            shape = parse_shape(item.text, dtype.itemsize)
            # load_and_run memsets shape-only inputs to byte 0x01 (reference 1.4)
            nbytes = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
            arrays[item.name] = (np.frombuffer(b"\x01" * nbytes, dtype=dtype).reshape(shape), item.text)
        else:
            arrays[item.name] = (parse_literal(item.text), item.text)
    for name, (arr, src) in arrays.items():
        check_not_empty(name, arr.shape, src)  # lite asserts (a traceback) on an empty tensor
        if name not in model_inputs:
            raise LarUsageError(
                f"the model has no input named {name!r} (from {src}; inputs: {', '.join(model_inputs)})"
            )
        want = model_inputs[name][1]
        if want is not None and arr.dtype != want:
            raise LarUsageError(
                f"dtype mismatch for input {name!r}: {src} is {arr.dtype.name}, the model expects {want.name}"
            )
    return arrays


def _model_info_table(rows: Sequence[Tuple[str, str, Tuple[int, ...], str]]) -> str:
    head = ("type", "name", "shape", "dtype")
    cells = [head] + [(k, n, "{" + ",".join(str(d) for d in s) + "}", t) for k, n, s, t in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(4)]
    sep = "+" + "+".join("-" * (w + 2) for w in widths) + "+"
    lines = [sep]
    for j, r in enumerate(cells):
        lines.append("|" + "|".join(f" {c:<{w}} " for c, w in zip(r, widths)) + "|")
        if j == 0:
            lines.append(sep)
    lines.append(sep)
    return "\n".join(lines)


def run(opts: LarOptions) -> None:
    """Load the model, feed the inputs, run ``warmup_iter + iter`` times with the dumps asked for.

    Raises LarUsageError for the user's mistakes and MegEngineError for MegEngine's errors.
    Dumps are complete when it returns: the network (and its dumper) is destroyed.
    """
    import gc

    model = Path(opts.model)
    problem = path_problem(model)
    if problem:
        raise LarUsageError(f"model file {opts.model} {problem}")
    items = split_input(opts.input)
    # Fail on a bad dump target before spending a second on import and load.
    if opts.io_dump:
        try:
            open(opts.io_dump, "w").close()
        except OSError as exc:
            raise LarUsageError(f"cannot open text dump file {opts.io_dump}: {exc.strerror}") from None
    if opts.bin_out_dump:
        out_dir = Path(opts.bin_out_dump)
        if not out_dir.is_dir():
            raise LarUsageError(f"--bin_out_dump {opts.bin_out_dump} is not a folder (it must exist)")
    if opts.bin_io_dump:
        dump_dir = Path(opts.bin_io_dump)
        if dump_dir.exists() and not dump_dir.is_dir():
            raise LarUsageError(f"--bin_io_dump {opts.bin_io_dump} exists and is not a folder")
        try:
            dump_dir.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise LarUsageError(f"cannot create --bin_io_dump folder {opts.bin_io_dump}: {exc.strerror}") from None

    with tempfile.TemporaryDirectory(prefix="lar-prec-lar-") as scratch:
        kept = rewritten_model_path(opts)
        target = Path(kept) if kept else Path(scratch) / "rewritten.mge"
        if opts.needs_rewrite:
            model = graphopts.rewrite_for(opts, model, target, kept=kept is not None)
        lite = _Lite()
        L = lite.L
        line = lite.build_line()
        if line:  # the versions every run of MegEngine's load_and_run names first
            _log(line)
        L.set_log_level(L.LiteLogLevel.DEBUG if opts.verbose else L.LiteLogLevel.WARN)
        config = L.LiteConfig(device_type=L.LiteDeviceType.LITE_CPU)
        graphopts.set_lite_options(config.options, opts)
        net = L.LiteNetwork(config)
        try:
            if opts.layout_transform:
                _log("using global layout transform optimization")
                net.enable_global_layout_transform()
            _configure_and_run(lite, net, opts, items, model)
            if opts.layout_transform:
                net.dump_layout_transform_model(str(target))
                graphopts.announce(target, kept=kept is not None, what="global layout transform")
        except RuntimeError as exc:
            raise MegEngineError(_megengine_message(exc)) from None
        finally:
            # Destroying the network closes the text dump and flushes lazy (record_comp_seq) dumps.
            del net
            gc.collect()
    if opts.fast_run_algo_policy and (opts.fast_run or opts.full_run or os.path.exists(opts.fast_run_algo_policy)):
        try:
            L.LiteGlobal.dump_persistent_cache(opts.fast_run_algo_policy)
        except RuntimeError as exc:
            raise MegEngineError(_megengine_message(exc)) from None


def _configure_and_run(lite: _Lite, net: Any, opts: LarOptions, items: Sequence[InputItem], model: Path) -> None:
    L = lite.L
    S = L.LiteAlgoSelectStrategy
    if opts.cpu_default:  # before the thread count: with both, MegEngine's multithread-inplace device
        net.enable_cpu_inplace_mode()
    if opts.multithread > 0:
        net.threads_number = opts.multithread
    strategy = 0
    # The same WARN lines as the real binary, so a run's stderr says which policy it used.
    if opts.full_run:
        _log("enable full-run strategy for algo profile")
        strategy = S.LITE_ALGO_PROFILE
    elif opts.fast_run:
        _log("enable fast-run strategy for algo profile")
        strategy = S.LITE_ALGO_PROFILE | S.LITE_ALGO_OPTIMIZED
    if opts.fast_run_algo_policy:
        existed = os.path.exists(opts.fast_run_algo_policy)
        L.LiteGlobal.set_persistent_cache(opts.fast_run_algo_policy, not existed)
        if existed and not strategy:
            # the real binary switches the oprs to PROFILE so they read the cache (reference 1.3)
            strategy = S.LITE_ALGO_PROFILE
    if opts.reproducible or opts.binary_equal_between_batch:
        _log("enable reproducible strategy for algo profile")
        strategy |= S.LITE_ALGO_REPRODUCIBLE
    if strategy:
        if not strategy & (S.LITE_ALGO_PROFILE | S.LITE_ALGO_HEURISTIC):
            strategy |= S.LITE_ALGO_HEURISTIC
        net.set_network_algo_policy(
            strategy,
            shared_batch_size=opts.fast_run_shared_batch_size,
            binary_equal_between_batch=opts.binary_equal_between_batch,
        )
    if opts.io_dump:
        net.io_txt_dump(opts.io_dump)
    if opts.bin_io_dump:
        net.io_bin_dump(opts.bin_io_dump.rstrip("/") + "/")

    t0 = time.perf_counter()
    _load(net, model)
    _log(f"load model: {(time.perf_counter() - t0) * 1e3:.3f}ms")

    model_inputs = {n: lite.layout_of(net.get_io_tensor(n)) for n in net.get_all_input_name()}
    if opts.model_info:
        rows = [("input", n, s, d.name if d is not None else "?") for n, (s, d) in model_inputs.items()]
        for n in net.get_all_output_name():
            s, d = lite.layout_of(net.get_io_tensor(n))
            rows.append(("output", n, s, d.name if d is not None else "?"))
        _log(_model_info_table(rows))

    arrays = _gather_inputs(items, model_inputs)
    for name, (arr, _src) in arrays.items():
        lite.feed(net.get_io_tensor(name), arr)
    missing = [n for n in model_inputs if n not in arrays]
    if missing:
        _log(f"warning: no --input for {', '.join(missing)}; the model's stored values are used")

    times: List[float] = []
    total = time.perf_counter()
    for k in range(opts.warmup_iter):
        t = time.perf_counter()
        net.forward()
        net.wait()
        _log(f"warm up iter {k}: {(time.perf_counter() - t) * 1e3:.3f}ms")
        _dump_outputs(lite, net, opts, k)
    for k in range(opts.iter):
        t = time.perf_counter()
        net.forward()
        net.wait()
        ms = (time.perf_counter() - t) * 1e3
        _dump_outputs(lite, net, opts, opts.warmup_iter + k)
        times.append(ms)
        _log(f"iter {k}/{opts.iter}: e2e={ms:.3f} ms (host={ms:.3f} ms)")
    if times:
        avg = sum(times) / len(times)
        std = math.sqrt(sum((x - avg) ** 2 for x in times) / (len(times) - 1)) if len(times) > 1 else 0.0
        _log(f"=== finished test #0: time={sum(times):.3f}ms avg_time={avg:.3f}ms "
             f"standard_deviation={std:.3f}ms min={min(times):.3f}ms max={max(times):.3f}ms")
    _log(f"=== total time: {(time.perf_counter() - total) * 1e3:.3f}ms")


def _dump_outputs(lite: _Lite, net: Any, opts: LarOptions, k: int) -> None:
    """``--bin_out_dump DIR``: the network outputs of execution ``k`` as binary dumps,
    ``DIR/run<k>-out<i>``. The real binary names them ``run<k>-var<id>``; lite does not tell
    var ids, so the output's index names the file and its title carries the var name."""
    if not opts.bin_out_dump:
        return
    for i, name in enumerate(net.get_all_output_name()):
        arr = np.ascontiguousarray(net.get_io_tensor(name).to_numpy())
        dtype = _DTYPE_NAMES.get(arr.dtype.str, "Float32")
        info = VarInfo(i, name, "output", "NetworkOutput", None, dtype, tuple(arr.shape),
                       contiguous_layout(arr.shape, dtype), 0, 'CompNode("cpu0:0" from "cpu0:0")', "d")
        write_binary_dump(Path(opts.bin_out_dump) / f"run{k}-out{i}", arr, format_title(info))


#: numpy storage -> MegDNN dtype name, for the titles of --bin_out_dump files
_DTYPE_NAMES = {"<f4": "Float32", "<f2": "Float16", "<i4": "Int32", "|i1": "Int8", "|u1": "Uint8", "<i2": "Int16",
                "<u2": "Uint16"}


def describe_model(model: str) -> Dict[str, List[Dict[str, Any]]]:
    """Input and output names, shapes and dtypes of a model, as megenginelite loads it.

    ``{"inputs": [{"name", "shape", "dtype"}], "outputs": [...]}``; dtype is a numpy name or
    None when lite cannot feed it. Imports megenginelite: call it in a child process when
    MGB_USE_MEGDNN_DBG matters.
    """
    problem = path_problem(model)
    if problem:
        raise LarUsageError(f"model file {model} {problem}")
    lite = _Lite()
    net = lite.L.LiteNetwork(lite.L.LiteConfig(device_type=lite.L.LiteDeviceType.LITE_CPU))
    try:
        _load(net, model)
        out: Dict[str, List[Dict[str, Any]]] = {"inputs": [], "outputs": []}
        for key, names in (("inputs", net.get_all_input_name()), ("outputs", net.get_all_output_name())):
            for n in names:
                shape, dtype = lite.layout_of(net.get_io_tensor(n))
                out[key].append({"name": n, "shape": list(shape), "dtype": dtype.name if dtype is not None else None})
        return out
    except RuntimeError as exc:
        raise MegEngineError(_megengine_message(exc)) from None
    finally:
        del net


def describe_main(argv: Sequence[str]) -> int:
    """``python -c 'from lar_prec.lar.main import describe_main; ...' MODEL``: describe_model as JSON on stdout."""
    try:
        sys.stdout.write(json_text(describe_model(argv[0]), indent=None))
    except (UsageError, MegEngineError) as exc:
        _log(f"{PROG}: error: {exc}")
        return EXIT_FAILURE
    return 0


def main(argv: Optional[Sequence[str]] = None) -> int:
    """Entry point of ``python -m lar_prec.lar``; returns the exit status."""
    args = list(sys.argv[1:] if argv is None else argv)
    try:
        flags, _ = parse_argv(args)
        if flags.get("help"):
            sys.stdout.write(_HELP + "\n")
            return 0
        if flags.get("helpfull"):  # as gflags: the flag list on stdout, exit 1
            sys.stdout.write(helpfull_text())
            return EXIT_FAILURE
        if flags.get("version"):  # as MegEngine's load_and_run answers it (the build is on stderr of a run)
            sys.stdout.write(VERSION_LINE + "\n")
            return 0
        opts = parse_options(args)
        run(opts)
    except UnknownFlag as exc:  # gflags' own words
        _log(f"ERROR: {exc}")
        return EXIT_FAILURE
    except UsageError as exc:  # LarUsageError and the --input grammar's InputSpecError
        _log(f"{PROG}: error: {exc}")
        return EXIT_FAILURE
    except (MegEngineError, LarPrecError) as exc:  # LarPrecError: graphopts (rewrite refused, bad target)
        _log(f"{PROG}: error: {exc}")
        return EXIT_FAILURE
    except KeyboardInterrupt:
        _log(f"{PROG}: interrupted")
        return 130
    return 0


if __name__ == "__main__":
    sys.exit(main())
