"""Local ("single") error of every operator: where error is made, not just where it is seen.

The accumulated ("entire") error of a var compares the test run with the reference run; it
mixes what the operator did with what its inputs already carried. The local error runs the
operator under the test configuration on the reference run's exact inputs and compares its
output with the reference output (``shared/reference/layerwise.md``):

1. :func:`build_layerwise` writes one *layerwise model*: every computed var that feeds another
   operator is replaced by a new input, every operator's output stays an output (built by
   ``lar_prec.lar.layerwise_build`` in a child process: this module imports no megengine);
2. :func:`local_errors` runs it once under the test configuration fed with the reference
   dump's values (:func:`run_layerwise`: a run of the runner, with the test run's
   load_and_run, on its device for ``--remote``, ``--bin-io-dump``) and computes
   MegEngine's metric per var, keyed by the original graph's var id, plus three checks:
   isolation, reference self-check and test-fed check;
3. :func:`noise_floors` and :func:`local_roots` (``lar_prec.diagnosis.floors``, re-exported here): an
   operator is a root when its local error exceeds its own noise floor; everything else
   that diverges is inherited.
"""
from __future__ import annotations

import contextlib
import hashlib
import io
import re
import sys
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import replace
from pathlib import Path
from typing import Any, Callable, Dict, Iterator, List, Mapping, Optional, Sequence, Tuple

from lar_prec._lazy import numpy as np
from lar_prec.errors import RunError, RunTimeout, UsageError
from lar_prec.inputspec import read_json_file
from lar_prec.dumps.folder import DumpFolder
from lar_prec.compare.metrics import max_megengine_err
from lar_prec.outputs import atomic_write_text, json_text
from lar_prec.run import proc as runproc
from lar_prec.run.config import LoadAndRun, RunConfig, bundled_load_and_run, get_config
from lar_prec.run.once import run_once
from lar_prec.run.inputs import PreparedInput, PreparedInputs
from lar_prec.run.record import RunResult

from lar_prec.records import PathLike  # noqa: E402
from lar_prec.run.device import RemoteSessions, RemoteSpec
from lar_prec.dumps.algocache import chosen_algorithms, read_algo_cache
from lar_prec.compare.elemwise import Step
from lar_prec.diagnosis.floors import local_json
from lar_prec.diagnosis.local_bounds import compute_dtype, measure_bound, plain
from lar_prec.lar.layerwise_build import CONSTANTS_DIR, MAG_SUFFIX
from lar_prec.lar.flags import flag_names, is_fast_run
from lar_prec.diagnosis.local_records import (CheckResult, LayerwiseModel, LocalResult, LocalVar, MeasuredVar,
                                              feeds_from_json)

#: output names of measured vars in a layerwise model end with ``.lw<original id>``
_SUFFIX = ".lw"
DEFAULT_TIMEOUT = 600.0


# ============================================================================ metric


#: MegEngine's metric over two whole tensors (one definition, in lar_prec.compare.metrics)
megengine_rel = max_megengine_err


def _max_abs(a: "np.ndarray") -> Optional[float]:
    a = np.asarray(a)
    if a.dtype.kind != "f" or a.size == 0:
        return None
    finite = np.abs(a[np.isfinite(a)])
    return float(finite.max()) if finite.size else None


# ============================================================================ build and run


def child_env(changes: Mapping[str, Optional[str]] = ()) -> Dict[str, str]:
    """The environment of a layerwise child: the runner's, for the bundled load_and_run."""
    return runproc.child_env(dict(changes), bundled=True)


def run_child(argv: Sequence[str], env: Dict[str, str], timeout: Optional[float], what: str, log_dir: Path,
              stdin: Optional[int] = None) -> None:
    """Run one helper child (a build, a rewrite) in its own process group; its output goes to
    ``log_dir`` (stdout.txt, stderr.txt). On its timeout, on Ctrl-C or on another thread's
    interrupt its whole group is killed (``runproc.run_logged``), as for a run.

    Raises:
        RunTimeout: past ``timeout`` seconds; RunError: it failed, stalled (dead by the rule of
            :mod:`lar_prec.stall`) or could not start.
        KeyboardInterrupt: Ctrl-C (the group is killed first).
    """
    log_dir.mkdir(parents=True, exist_ok=True)
    err_path = log_dir / "stderr.txt"
    try:
        ended, rc = runproc.run_logged(argv, env=env, timeout=timeout, stdout_path=log_dir / "stdout.txt", stdin=stdin,
                                       stderr_path=err_path)
    except OSError as exc:
        raise RunError(f"{what}: cannot start {argv[0]}: {exc.strerror or exc}", run_dir=log_dir, argv=argv) from None
    if ended == "stalled":
        said = runproc.last_meaningful_line(runproc.read_end(err_path))
        raise RunError(f"{what} stalled: alive but using no CPU for {runproc.stall_after():g} s "
                       f"({runproc.STALL_ENV} sets this), killed with its process group"
                       + (f"; stalled after: {said}" if said else ""), run_dir=log_dir, argv=argv)
    if rc is None:
        raise RunTimeout(f"{what} ran past its timeout of {timeout:g} s and was killed with its process group",
                         run_dir=log_dir, argv=argv)
    if rc != 0:
        stderr = runproc.read_end(err_path)
        lines = [ln for ln in stderr.splitlines() if ln.strip() and "cuda" not in ln.lower()]
        tail = "\n".join(lines[-5:])
        how = f"was killed by {runproc.signal_name(rc)}" if rc < 0 else f"failed (exit {rc})"
        raise RunError(f"{what} {how}: {lines[-1] if lines else ''}",
                       run_dir=log_dir, returncode=rc, argv=argv, stderr_tail=tail)


def build_layerwise(model: PathLike, ref_dump_folder: Optional[PathLike], out_dir: PathLike, *,
                    only: Optional[int] = None, timeout: float = DEFAULT_TIMEOUT,
                    dump_path_fd: Optional[int] = None) -> LayerwiseModel:
    """Build the layerwise model of ``model`` into ``out_dir`` (``layerwise.mge`` + ``.json``).

    Vars are cut where the reference dump has their value; with ``only`` the model keeps only
    the operator producing var ``only`` (a one-operator repro model). ``dump_path_fd``
    (``ref_dump_folder`` None): the child loads MegEngine and the model at once and reads the
    dump folder's path from this pipe when that dump exists (nothing: it ends, building nothing).

    Raises:
        UsageError: the model or the dump folder does not exist.
        RunError: MegEngine could not load or rewrite the model (its message is kept).
    """
    model = Path(model)
    if not model.is_file():
        raise UsageError(f"model file {model} does not exist (expected a MegEngine .mge model)")
    if ref_dump_folder is not None and not Path(ref_dump_folder).is_dir():
        raise UsageError(f"reference dump {ref_dump_folder} is not a folder (expected a --bin-io-dump folder)")
    out = Path(out_dir)
    ref_arg = "-" if dump_path_fd is not None else str(ref_dump_folder or "")
    argv = [sys.executable, "-m", "lar_prec.lar.layerwise_build", str(model), ref_arg, str(out)]
    if only is not None:
        argv += ["--only", str(int(only))]
    run_child(argv, child_env(), timeout, f"building the layerwise model of {model}", out, stdin=dump_path_fd)
    return read_layerwise(out)


def scale_constant(model: PathLike, const_name: str, factor: float, out: PathLike, *,
                   timeout: float = DEFAULT_TIMEOUT) -> Path:
    """Write a copy of ``model`` with constant ``const_name`` (e.g. a conv weight) times
    ``factor``: a fault injected by rewriting the model, so it propagates through MegEngine."""
    return _rewrite(model, ["--scale", str(model), const_name, repr(float(factor))], out, timeout)


def perturb_constant(model: PathLike, const_name: str, size: float, out: PathLike, *, seed: int = 0,
                     timeout: float = DEFAULT_TIMEOUT) -> Path:
    """Write a copy of ``model`` with each element of constant ``const_name`` times ``1 + size u``,
    ``u ~ U[-1, 1]`` (seeded): a wrong weight that does not scale its layer as a whole."""
    return _rewrite(model, ["--perturb", str(model), const_name, repr(float(size)), str(int(seed))], out, timeout)


def _rewrite(model: PathLike, args: List[str], out: PathLike, timeout: float) -> Path:
    out = Path(out)
    argv = [sys.executable, "-m", "lar_prec.lar.const_rewrite", *args, str(out)]
    run_child(argv, child_env(), timeout, f"rewriting {model}", out.parent / (out.name + ".log"))
    return out


def read_layerwise(out_dir: PathLike) -> LayerwiseModel:
    """Read a layerwise model written by :func:`build_layerwise`."""
    out = Path(out_dir)
    where = out / "layerwise.json"
    data = read_json_file(where, "layerwise model record")
    try:
        feeds = feeds_from_json(where, data["feeds"])
        measured = tuple(MeasuredVar(m["id"], m["name"], m["ref_id"], m["opr"], m["opr_type"], m["output"],
                                     tuple(m["inputs"]), tuple(tuple(s) for s in m["input_shapes"]), tuple(m["shape"]),
                                     m["dtype"], m["static"], m["problem"], tuple(m.get("unit", ())),
                                     int(m.get("unit_reduction", 1)), _opt_str(m.get("mode")),
                                     _opt_str(m.get("magnitude")), _opt_int(m.get("axis")),
                                     int(m.get("output_index", 0)), _steps(m.get("steps") or ()))
                         for m in data["measured"])
        kept = tuple((k["id"], k["reason"]) for k in data["kept"])
        consts = data.get("constants") or {}
        constants = {int(k): _constant_file(out, f) for k, f in (consts.get("files") or {}).items()}
        constant_names = {int(k): str(n) for k, n in (consts.get("names") or {}).items()}
        model, ref_dump = Path(data["model"]), Path(data["ref_dump"]) if data["ref_dump"] else None
    except (KeyError, TypeError, ValueError, AttributeError) as exc:
        raise UsageError(f"{where}: expected a layerwise model record, {type(exc).__name__}: {exc}") from None
    return LayerwiseModel(out / "layerwise.mge", model, ref_dump, feeds, measured, kept, constants, constant_names)


def _constant_file(out: Path, name: Any) -> Path:
    """A constant's file named in layerwise.json: ``<id>.npy`` in the record's constants folder
    and nowhere else (the record is data)."""
    if not isinstance(name, str) or not re.fullmatch(r"\d{1,20}\.npy", name):
        raise ValueError(f"constant file {name!r}: expected <var id>.npy")
    return out / CONSTANTS_DIR / name


def _steps(items: Any) -> Tuple[Step, ...]:
    return tuple(Step(int(k["id"]), _opt_str(k.get("mode")), tuple(int(u) for u in k["inputs"]), str(k["opr_type"]))
                 for k in items)


def _opt_str(value: Any) -> Optional[str]:
    if value is not None and not isinstance(value, str):
        raise ValueError(f"expected a string or null, found {value!r}")
    return value


def _opt_int(value: Any) -> Optional[int]:
    if value is not None and (not isinstance(value, int) or isinstance(value, bool)):
        raise ValueError(f"expected an integer or null, found {value!r}")
    return value


#: the packed layout a load_and_run flag lays tensors out in (what settles an ambiguous shape)
_LAYOUT_FLAGS = {"enable_nchw88": "NCHW88", "enable_nchw44": "NCHW44", "enable_nchw44_dot": "NCHW44_DOT",
                 "enable_nhwcd4": "NHWCD4", "enable_nchw4": "NCHW4", "enable_nchw32": "NCHW32",
                 "enable_nchw64": "NCHW64", "enable_chwn4": "CHWN4"}


def layout_fmt(flags: Sequence[str]) -> Optional[str]:
    """The packed layout a run with ``flags`` dumps in (None: plain, or not told by a flag)."""
    for f in flags:
        name = f.lstrip("-").split("=")[0].replace("-", "_")
        if name in _LAYOUT_FLAGS:
            return _LAYOUT_FLAGS[name]
    return None


def feed_inputs(lw: LayerwiseModel, values: DumpFolder, out_dir: PathLike, *, by: str = "ref",
                fmt: Optional[str] = None) -> PreparedInputs:
    """Write one ``.npy`` per feed from a dump (``by="ref"``: reference ids, ``"test"``: the
    test model's own ids); returns them as the runner's inputs (hashed: a device gets them
    pushed by hash). Quantized values are fed as raw x scale in float32, Bool as int32 (the
    layerwise model converts them back)."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    items = []
    for f in lw.feeds:
        vid = f.ref_id if by == "ref" else f.id
        if vid is None or vid not in values:
            raise UsageError(f"{values.path}: no dump of var {f.var_name!r} (id {vid}) to feed {f.name}")
        arr = np.asarray(values[vid].array())
        if f.scale:
            arr = (arr.astype(np.float64) * f.scale).astype(np.float32)
        arr = plain(arr.astype(f.feed_dtype), f.shape, fmt)
        path = out / f"{f.name}.npy"
        # made in memory, hashed there and written once: a model has hundreds of feeds
        buf = io.BytesIO()
        np.lib.format.write_array(buf, arr, allow_pickle=False)
        path.write_bytes(buf.getbuffer())
        items.append(PreparedInput(f.name, path, hashlib.sha256(buf.getbuffer()).hexdigest(),
                                   f"{by} dump var {vid} ({f.var_name})", str(arr.dtype), tuple(arr.shape)))
    return PreparedInputs(tuple(items), out)


def write_feeds(lw: LayerwiseModel, values: DumpFolder, out_dir: PathLike, *, by: str = "ref") -> str:
    """:func:`feed_inputs` as a ``--input`` string."""
    return feed_inputs(lw, values, out_dir, by=by).input_arg


def _layerwise_run(lw: LayerwiseModel, inputs: "PreparedInputs | str", dump_dir: PathLike,
                   config: "str | RunConfig", *, lar: "LoadAndRun | str | None", remote: Any,
                   timeout: Optional[float], on_started: Optional[Callable[[], None]] = None) -> RunResult:
    """The one way a layerwise model runs: :func:`lar_prec.runner.run_once`, so it gets the
    test run's binary, flags, environment, timeout, process-group kill, Ctrl-C handling and
    run.json. ``dump_dir``'s parent is the run folder (its name the label)."""
    dump = Path(dump_dir)
    if remote is not None and not isinstance(inputs, PreparedInputs):
        # the device needs the feed files themselves (pushed by hash), not local paths
        raise UsageError("a layerwise run on a device takes its inputs from feed_inputs(), not an --input string")
    with _device(remote, [lw.path, *getattr(inputs, "items", ())]) as sessions:
        return run_once(lw.path, inputs, config, dump.parent.parent, label=dump.parent.name,
                        lar=lar or bundled_load_and_run(), timeout=timeout, remote=sessions, on_started=on_started)


def run_layerwise(lw: LayerwiseModel, inputs: "PreparedInputs | str", dump_dir: PathLike,
                  config: "str | RunConfig", *, lar: "LoadAndRun | str | None" = None, remote: Any = None,
                  timeout: Optional[float] = DEFAULT_TIMEOUT) -> DumpFolder:
    """Run the layerwise model once in a fresh process under ``config``; returns its dump.

    It runs where the test run ran: ``lar`` is that run's load_and_run (default: the bundled
    one); ``remote`` a :class:`~lar_prec.runremote.RemoteSpec` (a session set of its own is
    opened, the model and the feeds are pushed by hash, and removed from the device at the
    end unless ``keep_remote``) or an open :class:`~lar_prec.runremote.RemoteSessions`. The
    run folder is ``dump_dir``'s parent, with its run.json (numbered ``-2``, ... when that
    folder exists: use the returned folder's path). ``inputs``: :func:`feed_inputs` (a ready
    ``--input`` string works locally only).

    Raises:
        RunError / RunTimeout / RemoteError (exit 3): the run failed; UsageError (exit 2).
    """
    rec = _layerwise_run(lw, inputs, dump_dir, config, lar=lar, remote=remote, timeout=timeout)
    return DumpFolder(rec.dump_dir)  # type: ignore[arg-type]


@contextlib.contextmanager
def _device(remote: Any, files: Sequence[Any]) -> Iterator[Any]:
    """The session set of a layerwise run: None locally, the caller's open RemoteSessions,
    or a transient one for a RemoteSpec (its pushed files removed on close)."""
    if remote is None:
        yield None
        return

    if not isinstance(remote, RemoteSpec):
        yield remote
        return
    paths = [getattr(f, "path", f) for f in files]
    with RemoteSessions(remote, paths, transient=True) as sessions:
        yield sessions


def _reference_side(lw: LayerwiseModel, ref: DumpFolder, test: Optional[DumpFolder],
                    fmt: Optional[str]) -> Dict[int, Tuple[Any, Optional[float], Optional[float]]]:
    """Measured var id -> its reference value (a layout option's dump back in the model's plain
    shape), that value's largest |x| and the test run's accumulated error against it: every
    part of a row that needs nothing of the layerwise run."""
    rows: Dict[int, Tuple[Any, Optional[float], Optional[float]]] = {}
    for m in lw.measured:
        if m.ref_id is None or m.ref_id not in ref:
            continue
        want = plain(ref[m.ref_id].array(), m.shape, fmt)
        tid = _same_var(test, m) if test is not None else None
        entire = megengine_rel(plain(test[tid].array(), m.shape, fmt), want) if tid is not None else None
        rows[m.id] = (want, _max_abs(want), entire)
    return rows


def _same_var(folder: DumpFolder, m: MeasuredVar) -> Optional[int]:
    """``m``'s id in a dump of the model it was built from: the same id and name, else the
    one var of that name (lite's load-time rewrites can renumber vars)."""
    if m.id in folder and folder[m.id].var.name == m.name:
        return m.id
    ids = [d.id for d in folder if d.var.name == m.name]
    return ids[0] if len(ids) == 1 else None


def magnitude_ids(folder: DumpFolder) -> Dict[int, int]:
    """Original var id -> id in a layerwise dump of the output holding its sum of |terms|."""
    out: Dict[int, int] = {}
    for d in folder:
        head, sep, tail = d.var.name.rpartition(MAG_SUFFIX)
        if sep and tail.isdigit():
            out[int(tail)] = d.id
    return out


def local_outputs(result: LocalResult, fmt: Optional[str] = None) -> "Callable[[int], Optional[np.ndarray]]":
    """``value(var id)``: the test kernel's output of measured var ``var_id`` (original id) on the
    reference's inputs, from the layerwise run, in the model's plain shape (``fmt``: the layout
    option the run had); None where it was not measured or not isolated."""
    folder = DumpFolder(result.local_dump)
    outs = output_ids(folder)
    measured = {m.id: m for m in result.layerwise.measured}
    isolated = {v.id for v in result.vars if v.isolated}

    def value(var_id: int) -> Optional["np.ndarray"]:
        m = measured.get(var_id)
        if m is None or var_id not in outs or var_id not in isolated:
            return None
        return plain(np.asarray(folder[outs[var_id]].array()), m.shape, fmt)

    return value


def output_ids(folder: DumpFolder) -> Dict[int, int]:
    """Original var id -> id in a layerwise dump, from the ``.lw<id>`` output names."""
    out: Dict[int, int] = {}
    for d in folder:
        name = d.var.name
        head, sep, tail = name.rpartition(_SUFFIX)
        if sep and tail.isdigit():
            out[int(tail)] = d.id
    return out


# ============================================================================ checks


_STORED = ("ImmutableTensor", "SharedDeviceTensor", "MultipleDeviceTensorHolder", "VolatileSharedDeviceTensor")


def _static(folder: DumpFolder, vid: int, memo: Dict[int, bool]) -> bool:
    """A constant, or computed from shapes and constants alone (never from a fed input)."""
    if vid not in memo:
        memo[vid] = False  # a cycle is not static
        info = folder.var_info(vid)
        if info.opr_type in _STORED or info.opr_type == "GetVarShape":
            memo[vid] = True
        elif info.opr_type != "Host2DeviceCopy":
            # not dumped: never executed, its value was inferred when the graph was compiled
            memo[vid] = vid not in folder or all(_static(folder, u, memo) for u in folder.inputs_of(vid))
    return memo[vid]


def _fed(folder: DumpFolder, vid: int) -> bool:
    """A fed input, or a feed converter (TypeCvt of a fed input)."""
    info = folder.var_info(vid)
    if info.opr_type == "Host2DeviceCopy":
        return True
    return info.opr_type == "TypeCvt" and vid in folder and all(
        folder.var_info(u).opr_type == "Host2DeviceCopy" for u in folder.inputs_of(vid))


def isolation_check(lw: LayerwiseModel, folder: DumpFolder, outs: Mapping[int, int]) -> CheckResult:
    """Every measured operator reads only fed inputs, constants, feed converters or shape vars,
    or vars of its unit (not measured, computed only from those); read from the layerwise
    run's dump titles, so it checks what really ran."""
    memo: Dict[int, bool] = {}
    measured_ids = set(outs.values())
    ok_memo: Dict[int, bool] = {}

    def ok(vid: int) -> bool:
        if vid not in ok_memo:
            ok_memo[vid] = False
            ok_memo[vid] = _fed(folder, vid) or _static(folder, vid, memo) or (
                vid not in measured_ids and vid in folder and all(ok(u) for u in folder.inputs_of(vid)))
        return ok_memo[vid]

    failures = []
    for m in lw.measured:
        if m.id not in outs or m.static:
            continue
        for v in folder[outs[m.id]].inputs:
            if not ok(v.id):
                failures.append((m.id, m.problem or f"reads {v.name} computed by {v.opr_type}"))
                break
    return CheckResult("isolation", "fail" if failures else "pass", tuple(failures))


#: why a test-fed check under fast-run can fail without any bug
FAST_RUN_NOTE = ("fast-run picks algorithms by timing in every process: pin them with the test run's "
                 "--fast-run-algo-policy cache (RunConfig.with_extra) to run the same algorithms")


def algo_cache_flag(flags: Sequence[str]) -> Optional[str]:
    """The ``--fast-run-algo-policy`` value of ``flags`` (None: not given)."""
    path = None
    for i, f in enumerate(flags):
        if f.startswith("--fast-run-algo-policy="):
            path = f.split("=", 1)[1]
        elif f == "--fast-run-algo-policy" and i + 1 < len(flags):
            path = flags[i + 1]
    return path


def _unpinned_fast_run(cfg: RunConfig) -> bool:
    return is_fast_run(cfg.flags) and "fast_run_algo_policy" not in flag_names(cfg.flags)


#: what an unpinned fast-run 3x3 convolution may have run: assume Winograd F(6, 3)
MAYBE_WINOGRAD = "WINOGRAD:unknown (fast-run without an algorithm cache):0:6:0:3"


def algorithms_run(lw: LayerwiseModel, cfg: RunConfig) -> Dict[int, Tuple[str, ...]]:
    """Var id -> the algorithms the layerwise run took under fast-run: read from its
    ``--fast-run-algo-policy`` cache; unpinned (or with the cache on a device), every 3x3
    convolution may have run Winograd."""
    if not is_fast_run(cfg.flags):
        return {}
    path = algo_cache_flag(cfg.flags)
    if not path or not Path(path).is_file():  # unpinned, or a cache on a device: unknown
        return {m.id: (MAYBE_WINOGRAD,) for m in lw.measured
                if m.opr_type in ("ConvolutionForward", "ConvBiasForward") and len(m.input_shapes) > 1
                and tuple(m.input_shapes[1][-2:]) == (3, 3)}

    entries = read_algo_cache(path)
    return chosen_algorithms(entries, [(m.id, m.opr_type, m.input_shapes, m.shape) for m in lw.measured],
                             reproducible="reproducible" in flag_names(cfg.flags))


def bitwise_check(name: str, lw: LayerwiseModel, got: DumpFolder, outs: Mapping[int, int], want: DumpFolder,
             want_id: str) -> CheckResult:
    """Every measured var of ``got`` has the same bytes as ``want`` (ids: ``ref_id`` or ``id``)."""
    failures = []
    for m in lw.measured:
        wid = m.ref_id if want_id == "ref" else m.id
        if m.id not in outs or wid is None or wid not in want:
            continue
        a, b = np.asarray(got[outs[m.id]].array()), np.asarray(want[wid].array())
        if a.shape != b.shape or a.tobytes() != b.tobytes():
            failures.append((m.id, f"differs by {megengine_rel(a, b):.3g}" if a.shape == b.shape
                             else f"shape {a.shape} != {b.shape}"))
    return CheckResult(name, "fail" if failures else "pass", tuple(failures))


# ============================================================================ local errors


def local_errors(model: PathLike, ref_dump: PathLike, test_config: "str | RunConfig" = "default", *,
                 out_dir: PathLike, test_dump: Optional[PathLike] = None, reference_config: "str | RunConfig" = "naive",
                 checks: bool = True, layerwise: Optional[LayerwiseModel] = None,
                 timeout: Optional[float] = DEFAULT_TIMEOUT, lar: "LoadAndRun | str | None" = None,
                 remote: Any = None, ref_feeds: Optional[PreparedInputs] = None,
                 on_started: Optional[Callable[[], None]] = None, record: bool = True) -> LocalResult:
    """Local error of every operator of ``model`` under ``test_config`` against ``ref_dump``.

    ``model`` is the model the test side ran; ``ref_dump`` the reference run's
    ``--bin-io-dump`` folder. With ``test_dump`` (the test run's dump) the accumulated error
    is reported next to the local one and the test-fed check runs. ``checks=False`` skips the
    two extra runs of the checks (the isolation check is free). ``out_dir/local.json``
    gets :func:`~lar_prec.floors.local_json` of the result (unless ``record`` is false: a
    caller that judges it with other floors writes its own). Under ``--fast-run`` give
    the test run's ``--fast-run-algo-policy`` cache in ``test_config`` (``with_extra``), or
    the layerwise run may pick other algorithms than the test run did. ``ref_feeds``: the
    feeds of ``layerwise`` already written from ``ref_dump`` (:class:`~lar_prec.diagnosis.local_plan.EarlyBuild`).
    ``on_started`` is called when each layerwise run has started.

    The build is local (it needs megengine); the runs go where the test run went: ``lar``
    (its load_and_run, default the bundled one) or ``remote`` (a RemoteSpec: one session set
    for all runs of this call, see :func:`run_layerwise`). The reference self-check runs the
    same binary under ``reference_config``.

    Raises:
        UsageError: missing model or dumps; RunError: a run of the layerwise model failed.
    """
    out = Path(out_dir)
    ref = DumpFolder(ref_dump)
    test = DumpFolder(test_dump) if test_dump is not None else None
    lw = layerwise or build_layerwise(model, ref_dump, out / "layerwise")
    cfg = get_config(test_config)
    fmt = layout_fmt(cfg.flags)
    inputs = ref_feeds if ref_feeds is not None else feed_inputs(lw, ref, out / "inputs-ref", fmt=fmt)
    runs: List[RunResult] = []
    with _device(remote, [lw.path]) as sessions:
        def run(feeds: PreparedInputs, label: str, config: "str | RunConfig",
                started: Optional[Callable[[], None]] = on_started) -> DumpFolder:
            rec = _layerwise_run(lw, feeds, out / label / "dump", config, lar=lar, remote=sessions, timeout=timeout,
                                 on_started=started)
            runs.append(rec)
            return DumpFolder(rec.dump_dir)  # type: ignore[arg-type]

        # the reference side of every row (its value, scale and accumulated error) needs nothing
        # of the layerwise run: read on a thread once that run has started (not before: nothing
        # may delay its start)
        with ThreadPoolExecutor(max_workers=1, thread_name_prefix="lar-prec-reference-side") as pool:
            beside: List[Future] = []

            def started() -> None:
                if not beside:
                    beside.append(pool.submit(_reference_side, lw, ref, test, fmt))
                if on_started is not None:
                    on_started()

            local = run(inputs, "local", cfg, started)
            pre = beside[0].result() if beside else _reference_side(lw, ref, test, fmt)
        outs = output_ids(local)
        if lw.measured and not outs:  # e.g. a binary that dumped something else: no local error to read
            raise RunError(f"the dump of the layerwise run ({local.path}) holds none of the layerwise model's "
                           f"outputs (names ending in {_SUFFIX}<id>): {runs[-1].load_and_run.get('path') or 'load_and_run'} "
                           "did not run the layerwise model as given", run_dir=runs[-1].dir)
        results = [isolation_check(lw, local, outs)]
        if checks:
            self_dump = run(inputs, "reference-self", reference_config)
            results.append(bitwise_check("reference_self", lw, self_dump, output_ids(self_dump), ref, "ref"))
            if test is not None:
                fed = feed_inputs(lw, test, out / "inputs-test", by="test", fmt=fmt)
                test_fed = run(fed, "test-fed", cfg)
                check = bitwise_check("test_fed", lw, test_fed, output_ids(test_fed), test, "test")
                if check.failures and _unpinned_fast_run(cfg):
                    check = replace(check, note=FAST_RUN_NOTE)
                results.append(check)
            else:
                results.append(CheckResult("test_fed", "skipped", note="no test dump given"))
        else:
            results += [CheckResult("reference_self", "skipped", note="checks=False"),
                        CheckResult("test_fed", "skipped", note="checks=False")]
    iso = dict(results[0].failures)
    rows = []
    mags = magnitude_ids(local)
    for m in lw.measured:
        local_err = None
        scale = bound = why = None
        want, ref_scale, entire = pre.get(m.id, (None, None, None))
        if m.id in outs and m.ref_id is not None:
            if want is None:  # not read beside the run: read here (and fail here, as it would)
                want = plain(ref[m.ref_id].array(), m.shape, fmt)
                ref_scale = _max_abs(want)
            got = plain(local[outs[m.id]].array(), m.shape, fmt)
            local_err = megengine_rel(got, want)
            scale = ref_scale
            bound, why = measure_bound(lw, m, got, want, ref, local, mags, fmt, compute_dtype(cfg.flags))
        problem = m.problem or iso.get(m.id)
        rows.append(LocalVar(m.id, m.name, m.opr_type, m.dtype, local_err, entire, problem is None, problem, scale,
                             bound, why))
    try:
        algorithms = algorithms_run(lw, cfg)
    except UsageError as exc:  # an unreadable cache: floors without it, and say so
        algorithms = {}
        results.append(CheckResult("algorithm_cache", "fail", note=str(exc)))
    result = LocalResult(lw, cfg.name, Path(ref_dump), Path(test_dump) if test_dump else None,
                         Path(local.path), tuple(rows), tuple(results), algorithms, tuple(runs))
    if record:
        atomic_write_text(out / "local.json", json_text(local_json(result)), what="local error record")
    return result
