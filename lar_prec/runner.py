"""Build load_and_run command lines, run each configuration in a fresh process, keep run folders.

A *run* is one process: ``load_and_run MODEL --input ... --bin-io-dump DIR --iter 1
--warmup-iter 0`` plus a configuration's flags and environment. MGB_USE_MEGDNN_DBG is read once
per process (per comp node), so configurations are never mixed in one process.

Folder layout of an analysis (``new_analysis_dir``)::

    <analysis>/inputs/<name>.npy, inputs.json     prepared once, shared by every run
    <analysis>/<label>/run.json                   one folder per run, never reused
    <analysis>/<label>/dump/                      --bin-io-dump folder
    <analysis>/<label>/io_dump.txt                --io-dump file (text-dump runs)
    <analysis>/<label>/stdout.txt, stderr.txt     the process's output

``run.json`` is written when the run starts (status ``running``) and rewritten when it ends,
so a folder always says what happened to it, even after a crash of lar-prec itself.
"""
from __future__ import annotations

import datetime as _dt
import hashlib
import json
import logging
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Callable, Dict, Iterable, List, Mapping, Optional, Sequence, Tuple, Union

from lar_prec._lazy import numpy as np  # imported on first use (start-up time)

from lar_prec.errors import LoadAndRunNotFound, RunError, RunTimeout, UsageError

log = logging.getLogger(__name__)

#: environment variable naming the load_and_run to use when --lar is not given
ENV_LOAD_AND_RUN = "LAR_PREC_LOAD_AND_RUN"
#: value of --lar / LAR_PREC_LOAD_AND_RUN that forces the bundled runner
BUNDLED = "bundled"
RUN_SCHEMA = "lar-prec.run/1"
INPUTS_SCHEMA = "lar-prec.inputs/1"
DEBUG_ENV = "MGB_USE_MEGDNN_DBG"
#: file in a dump folder that marks it incomplete (the name lar_prec.iodump looks for)
INCOMPLETE_MARKER = ".incomplete"
#: lines of stderr kept in run.json and in RunError
STDERR_TAIL_LINES = 20
#: seconds a timed-out process group gets between SIGTERM and SIGKILL
KILL_GRACE_SECONDS = 2.0

PathLike = Union[str, "os.PathLike[str]"]


# --------------------------------------------------------------------------- configurations


@dataclass(frozen=True)
class RunConfig:
    """A named way to run load_and_run: extra flags and environment changes.

    ``env`` maps a variable to its value, or to None to remove it from the child's environment.
    """

    name: str
    flags: Tuple[str, ...] = ()
    env: Tuple[Tuple[str, Optional[str]], ...] = ()
    description: str = ""

    def env_dict(self) -> Dict[str, Optional[str]]:
        """The environment changes as a dict."""
        return dict(self.env)

    def with_extra(self, flags: Sequence[str] = (), env: Optional[Mapping[str, Optional[str]]] = None) -> "RunConfig":
        """This configuration plus user flags (appended: gflags lets the last one win) and env."""
        merged = {**self.env_dict(), **dict(env or {})}
        return replace(self, flags=self.flags + tuple(flags), env=tuple(merged.items()))


# Non-naive configurations remove MGB_USE_MEGDNN_DBG: a value inherited from the user's shell
# would silently turn "default" into naive and hide every difference.
CONFIGS: Dict[str, RunConfig] = {
    "naive": RunConfig(
        "naive", ("--cpu",), ((DEBUG_ENV, "2"),),
        "reference kernels: MGB_USE_MEGDNN_DBG=2, on CPU (the variable only affects CPU comp nodes)",
    ),
    "default": RunConfig("default", (), ((DEBUG_ENV, None),), "the default kernels and algorithm heuristic"),
    "reproducible": RunConfig(
        "reproducible", ("--reproducible",), ((DEBUG_ENV, None),), "algorithms restricted to reproducible ones"
    ),
    "fast-run": RunConfig(
        "fast-run", ("--fast-run",), ((DEBUG_ENV, None),), "algorithms picked by profiling (fast-run)"
    ),
}


def get_config(name: "str | RunConfig") -> RunConfig:
    """A configuration by name (``naive``, ``default``, ``reproducible``, ``fast-run``)."""
    if isinstance(name, RunConfig):
        return name
    key = name.replace("_", "-")
    if key not in CONFIGS:
        raise UsageError(f"unknown configuration {name!r}; choose one of {', '.join(CONFIGS)}")
    return CONFIGS[key]


# --------------------------------------------------------------------------- which load_and_run


@dataclass(frozen=True)
class LoadAndRun:
    """The load_and_run used for runs: an external binary or the bundled ``lar_prec.lar``."""

    path: Optional[str]
    argv_prefix: Tuple[str, ...]
    kind: str  # "bundled" | "external"
    source: str = ""  # where it was chosen from: --lar, $LAR_PREC_LOAD_AND_RUN, PATH, bundled

    @property
    def is_bundled(self) -> bool:
        """True for ``python -m lar_prec.lar``."""
        return self.kind == "bundled"

    def describe(self) -> str:
        """One line for logs and run.json."""
        return "bundled lar_prec.lar" if self.is_bundled else str(self.path)


def bundled_load_and_run() -> LoadAndRun:
    """The bundled runner, run by this Python interpreter."""
    return LoadAndRun(None, (sys.executable, "-m", "lar_prec.lar"), "bundled", "bundled")


def _external(value: str, source: str) -> LoadAndRun:
    candidate = os.path.expanduser(value)
    found = candidate if os.sep in candidate else shutil.which(candidate)
    if found is None or not os.path.exists(found):
        raise LoadAndRunNotFound(f"load_and_run {value!r} (from {source}) does not exist")
    if os.path.isdir(found):
        raise LoadAndRunNotFound(f"load_and_run {value!r} (from {source}) is a folder, not a program")
    if not os.access(found, os.X_OK):
        raise LoadAndRunNotFound(f"load_and_run {value!r} (from {source}) is not executable (chmod +x?)")
    path = os.path.abspath(found)
    return LoadAndRun(path, (path,), "external", source)


def resolve_load_and_run(lar: "str | LoadAndRun | None" = None) -> LoadAndRun:
    """Choose load_and_run: ``--lar PATH``, else ``$LAR_PREC_LOAD_AND_RUN``, else
    ``load_and_run`` on PATH, else the bundled one. ``bundled`` as a value forces the bundled one.

    Raises LoadAndRunNotFound when a given path is missing or not executable.
    """
    if isinstance(lar, LoadAndRun):
        return lar
    if lar:
        return bundled_load_and_run() if lar == BUNDLED else _external(lar, "--lar")
    env = os.environ.get(ENV_LOAD_AND_RUN, "")
    if env:
        return bundled_load_and_run() if env == BUNDLED else _external(env, "$" + ENV_LOAD_AND_RUN)
    on_path = shutil.which("load_and_run")
    if on_path:
        return _external(on_path, "PATH")
    return bundled_load_and_run()


_VERSION_CACHE: Dict[str, str] = {}


def megengine_version() -> Optional[str]:
    """The installed megengine wheel's version, without importing it (None when absent)."""
    try:
        from importlib.metadata import PackageNotFoundError, version
    except ImportError:  # pragma: no cover - Python < 3.8
        return None
    try:
        return version("megengine")
    except PackageNotFoundError:
        return None


def load_and_run_version(lar: LoadAndRun) -> str:
    """What ``--version`` of an external binary prints (first line), or the bundled runner's name."""
    from lar_prec import __version__

    if lar.is_bundled:
        return f"bundled lar_prec.lar {__version__} (megenginelite {megengine_version() or 'missing'})"
    if lar.path is None:
        return "unknown"
    if lar.path not in _VERSION_CACHE:
        try:
            proc = subprocess.run(
                [lar.path, "--version"], capture_output=True, text=True, timeout=10, stdin=subprocess.DEVNULL
            )
            text = (proc.stdout.strip() or proc.stderr.strip()).splitlines()
            _VERSION_CACHE[lar.path] = text[0] if text else f"unknown (--version exit {proc.returncode})"
        except (OSError, subprocess.SubprocessError) as exc:
            _VERSION_CACHE[lar.path] = f"unknown ({exc.__class__.__name__})"
    return _VERSION_CACHE[lar.path]


# --------------------------------------------------------------------------- folders


def new_run_dir(parent: PathLike, label: str) -> Path:
    """Create and return a fresh folder ``parent/label``, or ``label-2``, ``label-3``, ...

    Never returns an existing folder: creation is the test (``mkdir`` without exist_ok).
    """
    parent = Path(parent)
    parent.mkdir(parents=True, exist_ok=True)
    safe = re.sub(r"[^A-Za-z0-9_.+-]", "_", label) or "run"
    n = 1
    while True:
        candidate = parent / (safe if n == 1 else f"{safe}-{n}")
        try:
            candidate.mkdir()
            return candidate
        except FileExistsError:
            n += 1


def new_analysis_dir(out: "PathLike | None", command: str, default_parent: PathLike = "lar-prec-out") -> Path:
    """The folder of a new analysis.

    * ``out`` None: a new ``<default_parent>/<command>[-N]``;
    * ``out`` missing or an empty folder: ``out`` itself;
    * ``out`` an existing non-empty folder: a new numbered subfolder ``out/<command>[-N]``;
    * ``out`` a file: UsageError.
    """
    if out is None:
        return new_run_dir(default_parent, command)
    path = Path(out)
    if path.exists() and not path.is_dir():
        raise UsageError(f"--out {out} exists and is not a folder")
    if not path.exists():
        try:
            path.mkdir(parents=True)
        except FileExistsError:  # created meanwhile by someone else: do not share it
            return new_run_dir(path, command)
        except OSError as exc:
            raise UsageError(f"cannot create --out folder {out}: {exc.strerror}") from None
        return path
    if not any(path.iterdir()):
        return path
    return new_run_dir(path, command)


# --------------------------------------------------------------------------- inputs


@dataclass(frozen=True)
class PreparedInput:
    """One model input written to an ``.npy`` file of the analysis."""

    name: str
    path: Path
    sha256: str
    source: str  # the user's spec item
    dtype: str
    shape: Tuple[int, ...]
    generated: Optional[Dict[str, Any]] = None  # how random data was made (seed, distribution)


@dataclass(frozen=True)
class PreparedInputs:
    """The inputs of an analysis, shared by all its runs."""

    items: Tuple[PreparedInput, ...]
    dir: Optional[Path]

    @property
    def input_arg(self) -> str:
        """The ``--input`` value: ``name:path.npy`` items joined by ``;``."""
        return ";".join(f"{i.name}:{i.path}" for i in self.items)

    def to_json(self) -> List[Dict[str, Any]]:
        """The inputs as recorded in inputs.json and run.json."""
        return [
            {"name": i.name, "path": str(i.path), "sha256": i.sha256, "source": i.source,
             "dtype": i.dtype, "shape": list(i.shape), "generated": i.generated}
            for i in self.items
        ]


_SHA_CACHE: Dict[Tuple[str, int, int], str] = {}


def sha256_file(path: PathLike) -> str:
    """Hex sha256 of a file (cached by path, size and mtime: models are hashed once per process)."""
    st = os.stat(path)
    key = (os.path.abspath(path), st.st_size, st.st_mtime_ns)
    _cache = _SHA_CACHE
    if key not in _cache:
        h = hashlib.sha256()
        with open(path, "rb") as fh:
            for block in iter(lambda: fh.read(1 << 20), b""):
                h.update(block)
        _cache[key] = h.hexdigest()
    return _cache[key]


def split_input_specs(specs: "str | Iterable[str]") -> List[str]:
    """Flatten ``--input`` values (each may hold several ``;``-joined items) into items."""
    if isinstance(specs, str):
        specs = [specs]
    items: List[str] = []
    for spec in specs:
        items.extend(s.strip() for s in str(spec).split(";") if s.strip())
    return items


def read_model_io(model: PathLike, timeout: float = 120) -> Dict[str, Any]:
    """Input/output names, shapes and dtypes of a model, read by megenginelite in a child process.

    The child keeps megengine out of this process (and its debug level out of later runs).
    Raises UsageError when the model cannot be read.
    """
    code = "import sys; from lar_prec.lar import describe_main; sys.exit(describe_main(sys.argv[1:]))"
    try:
        proc = subprocess.run([sys.executable, "-c", code, str(model)], capture_output=True, text=True,
                              timeout=timeout, env=_child_env({}, bundled=True), stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired:
        raise UsageError(f"reading the inputs of {model} took more than {timeout:.0f} s") from None
    if proc.returncode != 0:
        msg = _last_meaningful_line(proc.stderr) or f"exit {proc.returncode}"
        raise UsageError(f"cannot read the inputs of {model}: {msg}")
    return json.loads(proc.stdout)


def _safe_file_stem(name: str, used: set) -> str:
    stem = re.sub(r"[^A-Za-z0-9_.-]", "_", name) or "input"
    candidate, n = stem, 2
    while candidate in used:
        candidate, n = f"{stem}-{n}", n + 1
    used.add(candidate)
    return candidate


def _random_array(shape: Tuple[int, ...], dtype: np.dtype, seed: int) -> Tuple[np.ndarray, Dict[str, Any]]:
    rng = np.random.default_rng(seed)
    if dtype.kind == "f":
        arr = rng.standard_normal(shape, dtype=np.float32).astype(dtype)
        how = "standard normal"
    elif dtype.kind in "iu":
        hi = 10  # small non-negative values fit every integer dtype
        arr = rng.integers(0, hi, size=shape, dtype=dtype)
        how = f"uniform integers in [0, {hi})"
    else:  # pragma: no cover - lar.py only reports lite-feedable dtypes
        raise UsageError(f"cannot make random data of dtype {dtype}")
    return arr, {"kind": "random", "seed": seed, "distribution": how, "dtype": dtype.name, "shape": list(shape)}


# .npy descr -> dtype name, for the files load_and_run can take as they are (little-endian)
_PLAIN_NPY = {"<f4": "float32", "<i4": "int32", "<i2": "int16", "<u2": "uint16", "|i1": "int8", "|u1": "uint8",
              "<f2": "float16"}


def _plain_npy(path: str) -> Optional[Tuple[str, Tuple[int, ...]]]:
    """(dtype name, shape) of an ``.npy`` file that can be handed to load_and_run byte for byte
    (little-endian, C order, a dtype it takes, exact size), read from the header with the
    standard library; None for anything else (numpy then reads, converts or refuses it)."""
    import ast
    import struct

    try:
        with open(path, "rb") as fh:
            head = fh.read(10)
            if len(head) < 10 or head[:6] != b"\x93NUMPY" or head[6] not in (1, 2, 3):
                return None
            if head[6] == 1:
                hlen, start = struct.unpack("<H", head[8:10])[0], 10
            else:
                head += fh.read(2)
                hlen, start = struct.unpack("<I", head[8:12])[0], 12
            meta = ast.literal_eval(fh.read(hlen).decode("latin1"))
        size = os.path.getsize(path)
    except (OSError, ValueError, SyntaxError, struct.error, UnicodeDecodeError):
        return None
    if not isinstance(meta, dict) or meta.get("fortran_order") is not False:
        return None
    name = _PLAIN_NPY.get(meta.get("descr")) if isinstance(meta.get("descr"), str) else None
    shape = meta.get("shape")
    if name is None or not isinstance(shape, tuple) or not all(isinstance(d, int) and d >= 0 for d in shape):
        return None
    count = 1
    for d in shape:
        count *= d
    itemsize = int(meta["descr"][2:])
    return (name, shape) if size == start + hlen + count * itemsize else None


def prepare_inputs(
    specs: "str | Iterable[str]",
    dest_dir: PathLike,
    model: "PathLike | None" = None,
    *,
    seed: int = 0,
) -> PreparedInputs:
    """Turn the user's ``--input`` specs into ``.npy`` files in ``dest_dir``, once per analysis.

    Items: ``name:file.npy`` (copied), ``name:file.json`` (load_and_run's JSON, one file per
    entry), ``name:{1,3,8,8}`` (seeded random data; float32, or the model's input dtype when
    ``model`` is given; the seed is recorded), ``name:[1,2,3]`` (literal data: int32, float32
    if a ``.`` appears). A missing name means ``data``. Writes ``inputs.json`` next to the files.
    Raises UsageError for malformed specs, missing files and duplicate names.
    """
    from lar_prec import lar as _lar  # numpy-only at import time

    dest = Path(dest_dir)
    items = split_input_specs(specs)
    parsed: List[Any] = []
    for raw in items:
        try:
            parsed.extend((raw, it) for it in _lar.split_input(raw))
        except UsageError as exc:
            raise UsageError(str(exc)) from None
    model_dtypes: Dict[str, Optional[str]] = {}
    if model is not None and any(it.kind == "shape" for _, it in parsed):
        import importlib.util

        if importlib.util.find_spec("megenginelite") is None:
            log.warning("megenginelite is not installed: shape-only inputs get float32 random data")
        else:
            info = read_model_io(model)
            model_dtypes = {d["name"]: d["dtype"] for d in info["inputs"]}
    arrays: List[Tuple[str, Any, str, Optional[Dict[str, Any]]]] = []
    for k, (raw, it) in enumerate(parsed):
        try:
            if it.kind == "npy":
                plain = _plain_npy(it.text)
                # A plain file is copied as it is: no numpy needed before the first run starts.
                arrays.append((it.name, (it.text, plain) if plain else _lar.load_npy(it.text), raw, None))
            elif it.kind == "json":
                for name, arr in _lar.load_json_inputs(it.text).items():
                    arrays.append((name, arr, raw, None))
            elif it.kind == "shape":
                shape = _lar.parse_shape(it.text)
                dtype_name = model_dtypes.get(it.name) or "float32"
                if model_dtypes and it.name not in model_dtypes:
                    raise UsageError(f"the model has no input named {it.name!r} "
                                     f"(inputs: {', '.join(model_dtypes)})")
                arr, how = _random_array(shape, np.dtype(dtype_name), seed + k)
                arrays.append((it.name, arr, raw, how))
            elif it.kind == "literal":
                arrays.append((it.name, _lar.parse_literal(it.text), raw, None))
            else:
                raise UsageError(f"--input {raw!r}: .ppm/.pgm images are not supported; convert to .npy")
        except UsageError as exc:
            raise UsageError(str(exc)) from None
    seen: Dict[str, str] = {}
    for name, _arr, raw, _ in arrays:
        if ";" in name:
            raise UsageError(f"input name {name!r} contains ';'")
        if name in seen:
            raise UsageError(f"input {name!r} is given twice ({seen[name]!r} and {raw!r})")
        seen[name] = raw
    if not arrays:
        return PreparedInputs((), None)
    if ";" in str(dest.resolve()):
        raise UsageError(f"the inputs folder {dest} contains ';', which load_and_run's --input cannot carry")
    dest.mkdir(parents=True, exist_ok=True)
    out: List[PreparedInput] = []
    used: set = set()
    for name, arr, raw, how in arrays:
        path = (dest / (_safe_file_stem(name, used) + ".npy")).resolve()
        if path.exists():
            raise UsageError(f"{path} exists; prepare inputs into a fresh folder")
        if isinstance(arr, tuple):  # a plain .npy file: (source path, (dtype name, shape))
            src, (dtype_name, shape) = arr
            shutil.copyfile(src, path)
        else:
            np.save(path, np.ascontiguousarray(arr))
            dtype_name, shape = arr.dtype.name, tuple(arr.shape)
        out.append(PreparedInput(name, path, sha256_file(path), raw, dtype_name, tuple(shape), how))
    prepared = PreparedInputs(tuple(out), dest.resolve())
    (dest / "inputs.json").write_text(json.dumps({"schema": INPUTS_SCHEMA, "inputs": prepared.to_json()}, indent=2))
    return prepared


# --------------------------------------------------------------------------- one run


@dataclass(frozen=True)
class RunResult:
    """What happened in one run; also stored as ``run.json`` in ``dir``."""

    label: str
    config: str
    dir: Path
    dump_dir: Optional[Path]
    text_dump: Optional[Path]
    argv: Tuple[str, ...]
    env_changes: Tuple[Tuple[str, Optional[str]], ...]
    returncode: Optional[int]
    signal: Optional[str]
    seconds: float
    stderr_tail: str
    incomplete: bool
    status: str  # ok | failed | crashed | timeout | interrupted | not_started
    error: Optional[str] = None

    @property
    def ok(self) -> bool:
        """True when load_and_run exited 0 and its dumps are complete."""
        return self.status == "ok"

    @property
    def dump(self) -> Optional[Path]:
        """The dump of this run: the binary dump folder or the text dump file."""
        return self.text_dump if self.text_dump is not None else self.dump_dir

    def report_entry(self) -> Dict[str, Any]:
        """This run as an entry of the report's ``runs`` list (design.md contract, plus status)."""
        return {"label": self.label, "dir": str(self.dir), "argv": list(self.argv),
                "returncode": self.returncode, "seconds": self.seconds, "config": self.config,
                "status": self.status, "signal": self.signal}


# Flags the runner sets itself; user flags may not redirect them.
_RESERVED_FLAGS = {"input", "io_dump", "bin_io_dump", "io_dump_stdout", "io_dump_stderr", "bin_out_dump"}


def _flag_name(arg: str) -> Optional[str]:
    if not arg.startswith("-") or arg == "-" or arg == "--":
        return None
    name = arg.lstrip("-").split("=", 1)[0].replace("-", "_")
    return name[2:] if name.startswith("no") and name[2:] in _RESERVED_FLAGS else name


def build_argv(
    lar: LoadAndRun,
    model: PathLike,
    input_arg: str,
    config: RunConfig,
    *,
    dump_dir: Optional[Path] = None,
    text_dump: Optional[Path] = None,
    extra_flags: Sequence[str] = (),
) -> List[str]:
    """The command line of one run, in the real binary's (dash) syntax."""
    for arg in extra_flags:
        name = _flag_name(arg)
        if name in _RESERVED_FLAGS:
            raise UsageError(f"extra load_and_run flag {arg!r} conflicts with the dump and input flags lar-prec sets")
    argv = [*lar.argv_prefix, str(model)]
    if input_arg:
        argv += ["--input", input_arg]
    if text_dump is not None:
        argv += ["--io-dump", str(text_dump)]
    elif dump_dir is not None:
        argv += ["--bin-io-dump", str(dump_dir)]
    argv += ["--iter", "1", "--warmup-iter", "0", *config.flags, *extra_flags]
    return argv


def _child_env(changes: Mapping[str, Optional[str]], *, bundled: bool) -> Dict[str, str]:
    env = dict(os.environ)
    for k, v in changes.items():
        if v is None:
            env.pop(k, None)
        else:
            env[k] = v
    if bundled:
        # the child must import this very lar_prec, even when it is not installed
        root = str(Path(__file__).resolve().parent.parent)
        parts = [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p]
        if root not in parts:
            env["PYTHONPATH"] = os.pathsep.join([root, *parts])
    return env


_SKIP_LINE = re.compile(r"^(backtrace:|/.*\.so|\s*$|\[\d+ \d\d:\d\d:\d\d .*\]\[(DEBUG|INFO)\])")


def _last_meaningful_line(stderr: str) -> str:
    """The line of stderr that best says why a run failed (MegEngine's error, not a backtrace)."""
    lines = [ln.rstrip() for ln in stderr.splitlines()]
    for ln in reversed(lines):
        s = ln.strip()
        if re.search(r"(error|assert|terminate called|what\(\)|failed|exception)", s, re.I) and not _SKIP_LINE.match(s):
            return s
    for ln in reversed(lines):
        if not _SKIP_LINE.match(ln.strip()):
            return ln.strip()
    return ""


def failure_hint(stderr: str) -> Optional[str]:
    """A fix for failures whose cause lar-prec recognises in load_and_run's stderr."""
    if "is_contiguous" in stderr or re.search(r"dtype Byte", stderr):
        return ("the model has a zero-size or Byte variable that load_and_run cannot dump "
                "(an unfused BatchNorm): dump the model with optimize_for_inference=True")
    if "dtype mismatch" in stderr or "attempt to access dtype" in stderr:
        return "the input file's dtype must equal the model input's dtype"
    return None


def _tail(path: Path, lines: int = STDERR_TAIL_LINES, max_chars: int = 4000) -> str:
    try:
        with open(path, "rb") as fh:
            fh.seek(0, os.SEEK_END)
            size = fh.tell()
            fh.seek(max(0, size - 64 * 1024))
            text = fh.read().decode("utf-8", "replace")
    except OSError:
        return ""
    tail = "\n".join(text.splitlines()[-lines:])
    return tail[-max_chars:]


def _read_all(path: Path, limit: int = 256 * 1024) -> str:
    try:
        with open(path, "rb") as fh:
            fh.seek(0, os.SEEK_END)
            size = fh.tell()
            fh.seek(max(0, size - limit))
            return fh.read().decode("utf-8", "replace")
    except OSError:
        return ""


def _write_json_atomic(path: Path, data: Dict[str, Any]) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(data, indent=2, default=str) + "\n")
    os.replace(tmp, path)


def _kill_group(proc: "subprocess.Popen[bytes]") -> None:
    """SIGTERM the run's process group, SIGKILL what is left after a grace period, then reap.

    The leader is reaped only after the group is killed: until then its pid (the group id)
    cannot be reused, so the signals never reach an unrelated process.
    """
    try:
        os.killpg(proc.pid, signal.SIGTERM)
    except ProcessLookupError:
        pass
    deadline = time.monotonic() + KILL_GRACE_SECONDS
    while time.monotonic() < deadline:
        try:
            if os.waitid(os.P_PID, proc.pid, os.WEXITED | os.WNOHANG | os.WNOWAIT) is not None:
                break
        except ChildProcessError:
            break
        time.sleep(0.05)
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    proc.wait()


def _signal_name(returncode: Optional[int]) -> Optional[str]:
    if returncode is None or returncode >= 0:
        return None
    try:
        return signal.Signals(-returncode).name
    except ValueError:
        return f"signal {-returncode}"


# Runs under way in any thread. Ctrl-C reaches only the main thread, and children live in
# their own sessions (so a terminal's SIGINT misses them): workflows that run several at
# once call interrupt_active_runs() to kill them all and have their run.json say so.
_ACTIVE: "set[subprocess.Popen]" = set()
_ACTIVE_LOCK = threading.Lock()
_INTERRUPTED = threading.Event()


def interrupt_active_runs() -> int:
    """Kill the process group of every run under way; returns how many there were."""
    _INTERRUPTED.set()
    with _ACTIVE_LOCK:
        procs = list(_ACTIVE)
    for proc in procs:
        _kill_group(proc)
    return len(procs)


def reset_interrupt() -> None:
    """Allow runs again after :func:`interrupt_active_runs` (for library users and tests)."""
    _INTERRUPTED.clear()


def run_once(
    model: PathLike,
    inputs: "PreparedInputs | str | None",
    config: "RunConfig | str",
    out_dir: PathLike,
    *,
    lar: "LoadAndRun | str | None" = None,
    text_dump: bool = False,
    timeout: Optional[float] = None,
    extra_flags: Sequence[str] = (),
    extra_env: Optional[Mapping[str, Optional[str]]] = None,
    label: Optional[str] = None,
    on_started: Optional[Callable[[], None]] = None,
) -> RunResult:
    """Run load_and_run once in a fresh process, in a new folder under ``out_dir``.

    ``on_started`` is called once the process has started (workflows use the wait for
    background work).

    ``inputs`` is a PreparedInputs (or a ready ``--input`` string). The folder is
    ``out_dir/<label>`` (default: the configuration name, ``-text`` for text dumps), numbered
    when it exists. Returns the RunResult of a successful run. Otherwise, after writing
    run.json: UsageError (exit 2) when the model or an input file is missing, RunTimeout when
    ``timeout`` seconds pass (the whole process group is killed), RunError (exit 3) for a
    non-zero exit or a signal. The exception's ``result`` attribute holds the RunResult.
    KeyboardInterrupt kills the process group, marks run.json ``interrupted`` and propagates.
    """
    if _INTERRUPTED.is_set():  # queued behind runs that Ctrl-C killed: do not start
        raise KeyboardInterrupt
    cfg = get_config(config).with_extra(env=extra_env)
    lar_obj = resolve_load_and_run(lar)
    label = label or (cfg.name + ("-text" if text_dump else ""))
    run_dir = new_run_dir(Path(out_dir).resolve(), label)
    dump_dir = None if text_dump else run_dir / "dump"
    text_path = run_dir / "io_dump.txt" if text_dump else None
    if isinstance(inputs, PreparedInputs):
        input_arg, input_records = inputs.input_arg, inputs.to_json()
    else:
        input_arg, input_records = inputs or "", []
    model_path = Path(model).resolve()
    env_changes = cfg.env_dict()
    record: Dict[str, Any] = {
        "schema": RUN_SCHEMA,
        "label": label,
        "config": {"name": cfg.name, "flags": list(cfg.flags), "env": env_changes},
        "status": "not_started",
        "argv": [],
        "env_changes": env_changes,
        "load_and_run": {"kind": lar_obj.kind, "path": lar_obj.path, "source": lar_obj.source,
                         "argv_prefix": list(lar_obj.argv_prefix), "version": None},
        "megengine_version": megengine_version(),
        "model": {"path": str(model_path), "sha256": None},
        "inputs": input_records,
        "dump_dir": str(dump_dir) if dump_dir else None,
        "text_dump": str(text_path) if text_path else None,
        "started": _dt.datetime.now().astimezone().isoformat(timespec="seconds"),
        "seconds": 0.0,
        "returncode": None,
        "signal": None,
        "timeout": timeout,
        "incomplete": True,
        "error": None,
        "hint": None,
        "stderr_tail": "",
    }
    json_path = run_dir / "run.json"

    def result() -> RunResult:
        return RunResult(
            label=label, config=cfg.name, dir=run_dir, dump_dir=dump_dir, text_dump=text_path,
            argv=tuple(record["argv"]), env_changes=tuple(env_changes.items()),
            returncode=record["returncode"], signal=record["signal"], seconds=record["seconds"],
            stderr_tail=record["stderr_tail"], incomplete=record["incomplete"], status=record["status"],
            error=record["error"],
        )

    def refuse(exc: UsageError) -> UsageError:
        record["error"] = str(exc)
        _write_json_atomic(json_path, record)
        exc.run_dir = run_dir  # type: ignore[attr-defined]
        exc.result = result()  # type: ignore[attr-defined]
        return exc

    try:
        argv = build_argv(lar_obj, model_path, input_arg, cfg, dump_dir=dump_dir, text_dump=text_path,
                          extra_flags=extra_flags)
    except UsageError as exc:
        raise refuse(exc) from None
    record["argv"] = argv
    if not model_path.is_file():
        raise refuse(UsageError(f"model file {model} does not exist")) from None
    for rec in input_records:
        if not Path(rec["path"]).is_file():
            raise refuse(UsageError(f"input file {rec['path']} does not exist")) from None
    record["model"]["sha256"] = sha256_file(model_path)
    record["load_and_run"]["version"] = load_and_run_version(lar_obj)
    if dump_dir is not None:
        dump_dir.mkdir()  # the real binary needs it to exist
        # iodump.DumpFolder reads this marker; it goes only when the run ends well, so a
        # folder left by a killed lar-prec is never taken for a complete dump
        (dump_dir / INCOMPLETE_MARKER).write_text("load_and_run has not finished\n")

    record["status"] = "running"
    _write_json_atomic(json_path, record)
    env = _child_env(env_changes, bundled=lar_obj.is_bundled)
    log.info("run %s: %s", label, " ".join(shlex.quote(a) for a in argv))
    t0 = time.monotonic()
    stdout_path, stderr_path = run_dir / "stdout.txt", run_dir / "stderr.txt"
    timed_out = False
    with open(stdout_path, "wb") as out_fh, open(stderr_path, "wb") as err_fh:
        try:
            proc = subprocess.Popen(argv, stdout=out_fh, stderr=err_fh, stdin=subprocess.DEVNULL, env=env,
                                    start_new_session=True)
        except OSError as exc:
            record["seconds"] = round(time.monotonic() - t0, 3)
            record["status"] = "failed"
            record["error"] = f"cannot start load_and_run {argv[0]}: {exc.strerror}"
            _write_json_atomic(json_path, record)
            err = RunError(record["error"], run_dir=run_dir, argv=argv)
            err.result = result()  # type: ignore[attr-defined]
            raise err from None
        with _ACTIVE_LOCK:
            _ACTIVE.add(proc)
        if on_started is not None:
            on_started()
        try:
            proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            timed_out = True
            _kill_group(proc)
        except BaseException:  # KeyboardInterrupt and friends: never leave the run running
            _kill_group(proc)
            record["seconds"] = round(time.monotonic() - t0, 3)
            record["status"] = "interrupted"
            record["returncode"] = proc.returncode
            record["signal"] = _signal_name(proc.returncode)
            record["error"] = "interrupted; the process group was killed"
            record["stderr_tail"] = _tail(stderr_path)
            _write_json_atomic(json_path, record)
            raise
        finally:
            with _ACTIVE_LOCK:
                _ACTIVE.discard(proc)
    record["seconds"] = round(time.monotonic() - t0, 3)
    if _INTERRUPTED.is_set():
        # another thread got Ctrl-C and killed this run's group (interrupt_active_runs)
        record["returncode"] = proc.returncode
        record["signal"] = _signal_name(proc.returncode)
        record["status"] = "interrupted"
        record["error"] = "interrupted; the process group was killed"
        record["stderr_tail"] = _tail(stderr_path)
        _write_json_atomic(json_path, record)
        raise KeyboardInterrupt
    rc = proc.returncode
    record["returncode"] = rc
    record["signal"] = _signal_name(rc)
    record["stderr_tail"] = _tail(stderr_path)
    if not timed_out and rc == 0:
        record["status"] = "ok"
        record["incomplete"] = False
        if dump_dir is not None:
            (dump_dir / INCOMPLETE_MARKER).unlink()
        _write_json_atomic(json_path, record)
        return result()

    stderr = _read_all(stderr_path)
    # the bundled runner prefixes its errors like a program does; the message already says who failed
    last = re.sub(r"^load_and_run: error: ", "", _last_meaningful_line(stderr))
    hint = failure_hint(stderr)
    record["hint"] = hint
    where = f"run {label!r} ({run_dir})"
    if timed_out:
        record["status"] = "timeout"
        msg = f"load_and_run did not finish within {timeout:g} s and was killed with its process group; {where}"
    elif rc < 0:
        record["status"] = "crashed"
        msg = f"load_and_run was killed by {record['signal']} in {where}"
        if last:
            msg += f": {last}"
    else:
        record["status"] = "failed"
        msg = f"load_and_run failed (exit {rc}) in {where}: {last or 'no message on stderr'}"
    if hint:
        msg += f" -- hint: {hint}"
    record["error"] = msg
    if dump_dir is not None and dump_dir.is_dir():
        (dump_dir / INCOMPLETE_MARKER).write_text(msg + "\n")
    _write_json_atomic(json_path, record)
    cls = RunTimeout if timed_out else RunError
    err = cls(msg, run_dir=run_dir, returncode=rc, argv=argv, stderr_tail=record["stderr_tail"])
    err.result = result()  # type: ignore[attr-defined]
    raise err


def read_run_json(run_dir: PathLike) -> Dict[str, Any]:
    """The ``run.json`` of a run folder."""
    path = Path(run_dir) / "run.json"
    try:
        return json.loads(path.read_text())
    except FileNotFoundError:
        raise UsageError(f"{run_dir} has no run.json") from None
    except json.JSONDecodeError as exc:
        raise UsageError(f"{path} is not valid JSON: {exc}") from None


# --------------------------------------------------------------------------- one command


def parse_env_assignments(items: Iterable[str]) -> Dict[str, Optional[str]]:
    """``NAME=VALUE`` strings into a dict; ``NAME=`` sets an empty value, ``-NAME`` removes it."""
    env: Dict[str, Optional[str]] = {}
    for item in items:
        if item.startswith("-") and "=" not in item:
            env[item[1:]] = None
            continue
        name, eq, value = item.partition("=")
        if not eq or not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", name):
            raise UsageError(f"--env {item!r}: expected NAME=VALUE (or -NAME to remove a variable)")
        env[name] = value
    return env


def split_lar_args(items: Iterable[str]) -> Tuple[str, ...]:
    """Extra load_and_run flags given as strings (``"--multithread 2"``), split like a shell."""
    out: List[str] = []
    for item in items:
        try:
            out.extend(shlex.split(item))
        except ValueError as exc:
            raise UsageError(f"cannot split load_and_run flags {item!r}: {exc}") from None
    return tuple(out)


def run_single(
    model: PathLike,
    input_specs: "str | Iterable[str]",
    config: "RunConfig | str",
    out: "PathLike | None" = None,
    *,
    lar: "LoadAndRun | str | None" = None,
    text_dump: bool = False,
    timeout: Optional[float] = None,
    extra_flags: Sequence[str] = (),
    extra_env: Optional[Mapping[str, Optional[str]]] = None,
    seed: int = 0,
) -> RunResult:
    """``lar-prec run``: a new analysis folder with its inputs and one run.

    Input errors are recorded in the run folder's run.json before the UsageError propagates.
    """
    cfg = get_config(config)
    lar_obj = resolve_load_and_run(lar)
    analysis = new_analysis_dir(out, "run")
    try:
        prepared = prepare_inputs(input_specs, analysis / "inputs", model if Path(model).is_file() else None,
                                  seed=seed)
    except UsageError as exc:
        run_dir = new_run_dir(analysis, cfg.name + ("-text" if text_dump else ""))
        _write_json_atomic(run_dir / "run.json", {
            "schema": RUN_SCHEMA, "label": run_dir.name, "status": "not_started", "error": str(exc),
            "model": {"path": str(Path(model).resolve()), "sha256": None}, "input_specs": split_input_specs(input_specs),
            "started": _dt.datetime.now().astimezone().isoformat(timespec="seconds"), "incomplete": True,
            "argv": [], "returncode": None, "signal": None, "seconds": 0.0, "stderr_tail": "",
        })
        exc.run_dir = run_dir  # type: ignore[attr-defined]
        raise
    return run_once(model, prepared, cfg, analysis, lar=lar_obj, text_dump=text_dump, timeout=timeout,
                    extra_flags=extra_flags, extra_env=extra_env)
