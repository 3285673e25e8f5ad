"""The inputs of an analysis: planned and checked before any folder exists, then written once.

:func:`plan_inputs` reads the user's ``--input`` items (the grammar is :mod:`lar_prec.inputspec`),
checks them against each other and against the model's inputs, and makes the arrays, all
without writing anything, so a bad input leaves no folder behind. :func:`write_inputs` writes
them as ``.npy`` files and ``inputs.json`` into the analysis folder, shared by every run.
"""
from __future__ import annotations

import contextlib
import importlib.util
import json
import logging
import os
import re
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Dict, Iterable, List, Mapping, Optional, Tuple

from lar_prec._lazy import numpy as np  # imported on first use (start-up time)

from lar_prec import inputspec
from lar_prec.errors import UsageError
from lar_prec.outputs import atomic_write_text, json_text, sha256_file
from lar_prec.run.instruments import model_info
from lar_prec.run.proc import child_env, last_meaningful_line

log = logging.getLogger(__name__)

from lar_prec.records import PathLike  # noqa: E402
INPUTS_SCHEMA = "lar-prec.inputs/1"
#: seconds the model-description helper may take
DESCRIBE_TIMEOUT = 120.0


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


@dataclass(frozen=True)
class PlannedInput:
    """One input checked and ready to write: an array, or a plain ``.npy`` file copied as it is."""

    name: str
    source: str  # the user's spec item
    array: Any = None  # numpy array, or None for a copied file
    copy_from: Optional[str] = None
    dtype: str = ""
    shape: Tuple[int, ...] = ()
    generated: Optional[Dict[str, Any]] = None


def read_model_io(model: PathLike, timeout: float = DESCRIBE_TIMEOUT) -> Dict[str, Any]:
    """Input/output names, shapes and dtypes of a model, read by megenginelite in a child process.

    The child keeps megengine out of this process (and its debug level out of later runs).
    Raises UsageError when the model cannot be read.
    """
    code = "import sys; from lar_prec.lar.main import describe_main; sys.exit(describe_main(sys.argv[1:]))"
    try:
        proc = subprocess.run([sys.executable, "-c", code, str(model)], capture_output=True, text=True,
                              timeout=timeout, env=child_env({}, bundled=True), stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired:
        raise UsageError(f"reading the inputs of {model} took more than {timeout:.0f} s") from None
    except OSError as exc:
        raise UsageError(f"cannot read the inputs of {model}: {exc.strerror or exc}") from None
    if proc.returncode != 0:
        msg = re.sub(r"^load_and_run: error: ", "", last_meaningful_line(proc.stderr)) or f"exit {proc.returncode}"
        raise UsageError(f"cannot read the inputs of {model}: {msg}")
    return json.loads(proc.stdout)


def _model_io(model: "PathLike | None", items: List[inputspec.InputItem], lar: Any = None
              ) -> Optional[Dict[str, Dict[str, Any]]]:
    """``{input name: {"shape", "dtype"}}`` of the model when the items need it (shape-only and
    random items, or no item at all: every input then gets random data), else None.

    Only then: reading the model costs a child process (~0.7 s) before the first run. A wrong
    name in a file item is refused by the bundled load_and_run instead, which the runner turns
    into the same input error (exit 2).
    """
    if model is None or (items and not any(it.kind in ("shape", "random") for it in items)):
        return None
    if importlib.util.find_spec("megenginelite") is None:
        if lar is not None and not lar.is_bundled and lar.path is not None:
            # no wheel here: the user's MegEngine load_and_run reads the model (--model-info)
            with tempfile.TemporaryDirectory(prefix="lar-prec-model-info-") as tmp:
                info = model_info(lar, model, Path(tmp))
        elif not items or any(it.kind == "random" for it in items):
            raise UsageError(f"the inputs of {model} cannot be read here (megenginelite is not installed) to make "
                             "random data; give each input as --input name:file.npy (or name:{d0,d1,...})")
        else:
            log.warning("megenginelite is not installed: shape-only inputs get float32 random data")
            return None
    else:
        info = read_model_io(model)
    return {d["name"]: {"shape": d.get("shape"), "dtype": d.get("dtype")} for d in info["inputs"]}


def _model_dtypes(io: Optional[Dict[str, Dict[str, Any]]]) -> Optional[Dict[str, Optional[str]]]:
    return None if io is None else {n: d["dtype"] for n, d in io.items()}


def _check_name(name: str, source: str, dtypes: Optional[Dict[str, Optional[str]]], model: "PathLike | None") -> None:
    if dtypes is not None and name not in dtypes:
        raise inputspec.InputSpecError(f"--input {source}: the model {model} has no input named {name!r} "
                                       f"(its inputs: {', '.join(dtypes) or 'none'})")


def _random_array(shape: Tuple[int, ...], dtype: "np.dtype", seed: int,
                  spec: Optional[inputspec.RandomSpec] = None, source: str = "") -> Tuple["np.ndarray", Dict[str, Any]]:
    """Seeded random data: ``spec`` None (a shape-only item) standard normal floats or integers
    in [0, 10); with a ``random[LOW,HIGH]`` spec uniform floats in [LOW, HIGH) or integers from
    LOW to HIGH (both included), the defaults :data:`~lar_prec.inputspec.RANDOM_FLOAT` and
    :data:`~lar_prec.inputspec.RANDOM_INT`."""
    rng = np.random.default_rng(seed)
    rec: Dict[str, Any] = {"kind": "random", "seed": seed}
    if spec is None and dtype.kind == "f":
        arr = rng.standard_normal(shape, dtype=np.float32).astype(dtype)
        how = "standard normal"
    elif spec is None and dtype.kind in "iu":
        hi = 10  # small non-negative values fit every integer dtype
        arr = rng.integers(0, hi, size=shape, dtype=dtype)
        how = f"uniform integers in [0, {hi})"
    elif spec is not None and dtype.kind == "f":
        low, high = (spec.low, spec.high) if spec.low is not None else inputspec.RANDOM_FLOAT
        big = float(np.finfo(dtype).max)
        if max(abs(low), abs(high)) > big:  # type: ignore[arg-type]
            raise inputspec.InputSpecError(f"--input {source}: the range [{low:g}, {high:g}] does not fit "
                                           f"{dtype.name}; expected numbers within +-{big:g}")
        arr = rng.uniform(low, high, size=shape).astype(dtype)  # type: ignore[arg-type]
        how = f"uniform in [{low:g}, {high:g})"
        rec.update(low=low, high=high)
    elif spec is not None and dtype.kind in "iu":
        if spec.low is not None and not spec.integral:
            raise inputspec.InputSpecError(f"--input {source}: the model's input is {dtype.name}; expected a range "
                                           "of integers, random[LOW,HIGH] without a '.'")
        lo, hi = (int(spec.low), int(spec.high)) if spec.low is not None else inputspec.RANDOM_INT  # type: ignore[arg-type]
        info = np.iinfo(dtype)
        if lo < info.min or hi > info.max:
            raise inputspec.InputSpecError(f"--input {source}: the range [{lo}, {hi}] does not fit {dtype.name}; "
                                           f"expected integers from {info.min} to {info.max}")
        arr = rng.integers(lo, hi, size=shape, dtype=dtype, endpoint=True)
        how = f"uniform integers from {lo} to {hi}"
        rec.update(low=lo, high=hi)
    else:  # pragma: no cover - lar.py only reports lite-feedable dtypes
        raise UsageError(f"cannot make random data of dtype {dtype}")
    rec.update(distribution=how, dtype=dtype.name, shape=list(shape))
    return arr, rec


def _model_shape(name: str, raw: str, io: Dict[str, Dict[str, Any]], model: "PathLike | None"
                 ) -> Tuple[Tuple[int, ...], "np.dtype"]:
    """The shape and dtype the model gives input ``name``, for random data of its own shape."""
    d = io[name]
    shape, dtype = d.get("shape"), d.get("dtype")
    if dtype is None:
        raise inputspec.InputSpecError(f"--input {raw}: input {name!r} of {model} has a dtype megenginelite "
                                       "cannot feed; give its data as an .npy file")
    if not shape or any(int(x) <= 0 for x in shape):
        raise inputspec.InputSpecError(f"--input {raw}: {model} gives input {name!r} no fixed shape "
                                       f"({shape}); expected --input {name}:{{d0,d1,...}} or an .npy file")
    dt = np.dtype(dtype)
    return inputspec.parse_shape("{" + ",".join(str(int(x)) for x in shape) + "}", dt.itemsize), dt


def _generate(raw: str, name: str, spec: inputspec.RandomSpec, seed: int, io: Dict[str, Dict[str, Any]],
              model: "PathLike | None", why: Optional[str] = None) -> PlannedInput:
    shape, dt = _model_shape(name, raw, io, model)
    try:
        arr, how = _random_array(shape, dt, seed, spec, raw)
    except MemoryError:
        raise inputspec.InputSpecError(f"--input {raw!r}: not enough memory for random data of shape "
                                       f"{list(shape)}; give the data as an .npy file") from None
    if why:
        how["why"] = why
    return PlannedInput(name, raw, arr, None, arr.dtype.name, tuple(arr.shape), how)


#: why every input got random data (said in the verdict, the JSON and the page)
NO_INPUT_GIVEN = "no --input given"


def _default_inputs(io: Dict[str, Dict[str, Any]], seed: int, model: "PathLike | None") -> List[PlannedInput]:
    """Seeded random data for every model input when the user gave none (never the model's
    zeros): uniform in the default range, seed ``--seed`` + the input's position."""
    out = []
    for k, name in enumerate(io):
        dt = io[name].get("dtype")
        lo, hi = inputspec.RANDOM_INT if dt and np.dtype(dt).kind in "iu" else inputspec.RANDOM_FLOAT
        raw = f"{name}:random[{lo:g},{hi:g}]@{seed + k}"
        out.append(_generate(raw, name, inputspec.RandomSpec(seed=seed + k), seed + k, io, model, NO_INPUT_GIVEN))
    return out


def _plan_item(raw: str, it: inputspec.InputItem, k: int, seed: int, io: Optional[Dict[str, Dict[str, Any]]],
               model: "PathLike | None") -> List[PlannedInput]:
    dtypes = _model_dtypes(io)
    if it.kind == "image":
        raise inputspec.InputSpecError(f"--input {raw!r}: .ppm/.pgm images are not supported; convert to .npy")
    if it.kind == "json":
        out = []
        for name, arr in inputspec.load_json_inputs(it.text).items():
            _check_name(name, raw, dtypes, model)
            out.append(PlannedInput(name, raw, arr, None, arr.dtype.name, tuple(arr.shape)))
        return out
    _check_name(it.name, raw, dtypes, model)
    if it.kind == "random":
        spec = inputspec.parse_random(it.text, raw)
        if io is None:  # pragma: no cover - _model_io reads the model for random items
            raise UsageError(f"--input {raw}: random data needs the model's inputs")
        return [_generate(raw, it.name, spec, spec.seed if spec.seed is not None else seed + k, io, model)]
    if it.kind == "npy":
        inputspec.check_file(it.text, "input file")
        plain = _plain_npy(it.text)
        if plain:  # copied as it is: no numpy needed before the first run starts
            return [PlannedInput(it.name, raw, None, it.text, plain[0], plain[1])]
        arr = inputspec.load_npy(it.text)
    elif it.kind == "shape":
        dtype = np.dtype((dtypes or {}).get(it.name) or "float32")
        shape = inputspec.parse_shape(it.text, dtype.itemsize)
        try:
            arr, how = _random_array(shape, dtype, seed + k)
        except MemoryError:
            raise inputspec.InputSpecError(f"--input {raw!r}: not enough memory for random data of shape "
                                           f"{list(shape)}; give the data as an .npy file") from None
        return [PlannedInput(it.name, raw, arr, None, arr.dtype.name, tuple(arr.shape), how)]
    else:
        arr = inputspec.parse_literal(it.text)
    return [PlannedInput(it.name, raw, arr, None, arr.dtype.name, tuple(arr.shape))]


def _split_mapping(specs: Mapping[str, Any]) -> Tuple[List[str], List[PlannedInput]]:
    """``{name: array | path | --input value}`` (the Python API): the items given as text, and
    the arrays checked (a dtype load_and_run takes, at least one element) and ready to write."""
    items: List[str] = []
    arrays: List[PlannedInput] = []
    for name, value in specs.items():
        if not isinstance(name, str) or not name or ";" in name or ":" in name:
            raise inputspec.InputSpecError(f"inputs: key {name!r} is not an input name (a non-empty string "
                                           "without ';' or ':')")
        if isinstance(value, (str, os.PathLike)):
            items.append(f"{name}:{os.fspath(value)}")
            continue
        if not hasattr(value, "__array_interface__") and not hasattr(value, "__array__"):
            raise inputspec.InputSpecError(f"inputs[{name!r}]: expected a numpy array, a file path or an --input "
                                           f"value (name:random[-1,1]@0, ...), got {type(value).__name__}")
        arr = np.ascontiguousarray(np.asarray(value))
        source = f"{name}:<{arr.dtype.name} array {list(arr.shape)}>"
        if arr.dtype.name not in inputspec.NPY_DTYPES:
            raise inputspec.InputSpecError(f"inputs[{name!r}] is a {arr.dtype.name} array; load_and_run inputs must "
                                           f"be one of {', '.join(inputspec.NPY_DTYPES)} (e.g. .astype(numpy.float32))")
        arr = arr.astype(arr.dtype.newbyteorder("="), copy=False)
        arrays.append(PlannedInput(name, source, arr, None, arr.dtype.name, tuple(arr.shape)))
    return items, arrays


def plan_inputs(specs: "str | Iterable[str] | Mapping[str, Any]", model: "PathLike | None" = None, *, seed: int = 0,
                lar: Any = None) -> Tuple[PlannedInput, ...]:
    """Check the user's ``--input`` items and make their data, writing nothing.

    Items: ``name:file.npy`` (copied), ``name:file.json`` (load_and_run's JSON, one file per
    entry), ``name:{1,3,8,8}`` (seeded random data; float32, or the model's input dtype when
    ``model`` is given; the seed is recorded), ``name:[1,2,3]`` (literal data: int32, float32
    if a ``.`` appears). A missing name means ``data``. With ``model``, every name must be
    one of the model's inputs. ``name:random[LOW,HIGH]@SEED`` makes seeded random data of the
    model's own shape and dtype (:func:`lar_prec.inputspec.parse_random`); with no item at all,
    every model input gets such data (the default range, seed ``seed`` + its position,
    ``generated.why`` :data:`NO_INPUT_GIVEN`), never the model's zeros. The Python API may give
    a mapping ``{name: numpy array | path | value}``. Raises UsageError (exit 2) for malformed items, files that are
    missing or not regular files (a FIFO), unknown or duplicate names, zero-size data, shapes
    too big to make, and a seed outside ``[0, 2**63)``.
    """
    inputspec.check_seed(seed)
    given: List[PlannedInput] = []
    if isinstance(specs, Mapping):
        specs, given = _split_mapping(specs)
    parsed = [(raw, it) for raw in inputspec.split_input_specs(specs) for it in inputspec.split_input(raw)]
    for raw, it in parsed:  # cheap checks before the model is read; a FIFO is never opened
        if it.kind in ("npy", "json"):
            inputspec.check_file(it.text, "input file")
        elif it.kind == "shape":
            inputspec.parse_shape(it.text, 1)
        elif it.kind == "random":
            inputspec.parse_random(it.text, raw)
    io = _model_io(model, [it for _, it in parsed], lar) if not given or parsed else None
    planned: List[PlannedInput] = list(given)
    for k, (raw, it) in enumerate(parsed):
        planned.extend(_plan_item(raw, it, k, seed, io, model))
    for p in given:
        _check_name(p.name, p.source, _model_dtypes(io), model)
    if not parsed and not given and io:
        planned = _default_inputs(io, seed, model)
    seen: Dict[str, str] = {}
    for p in planned:
        if ";" in p.name:
            raise inputspec.InputSpecError(f"input name {p.name!r} contains ';'")
        if p.name in seen:
            raise inputspec.InputSpecError(f"input {p.name!r} is given twice ({seen[p.name]!r} and {p.source!r})")
        seen[p.name] = p.source
        inputspec.check_not_empty(p.name, p.shape, p.source)
    return tuple(planned)


def _safe_file_stem(name: str, used: set) -> str:
    stem = re.sub(r"[^A-Za-z0-9_.-]", "_", name) or "input"
    candidate, n = stem, 2
    while candidate in used:
        candidate, n = f"{stem}-{n}", n + 1
    used.add(candidate)
    return candidate


def write_inputs(planned: Iterable[PlannedInput], dest_dir: PathLike) -> PreparedInputs:
    """Write planned inputs as ``.npy`` files and ``inputs.json`` into ``dest_dir`` (a new folder).

    Raises UsageError naming the file when a write fails (read-only folder, full disk); a
    partly written file is removed.
    """
    planned = tuple(planned)
    if not planned:
        return PreparedInputs((), None)
    dest = Path(dest_dir)
    if ";" in str(dest.resolve()):
        raise UsageError(f"the inputs folder {dest} contains ';', which load_and_run's --input cannot carry")
    try:
        dest.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise UsageError(f"cannot create the inputs folder {dest}: {exc.strerror or exc}") from None
    out: List[PreparedInput] = []
    used: set = set()
    for p in planned:
        path = (dest / (_safe_file_stem(p.name, used) + ".npy")).resolve()
        if path.exists():
            raise UsageError(f"{path} exists; prepare inputs into a fresh folder")
        try:
            if p.copy_from is not None:
                shutil.copyfile(p.copy_from, path)
            else:
                np.save(path, np.ascontiguousarray(p.array))
        except OSError as exc:
            with contextlib.suppress(OSError):
                path.unlink()
            raise UsageError(f"cannot write input file {path}: {exc.strerror or exc}") from None
        out.append(PreparedInput(p.name, path, sha256_file(path), p.source, p.dtype, tuple(p.shape), p.generated))
    prepared = PreparedInputs(tuple(out), dest.resolve())
    atomic_write_text(dest / "inputs.json", json_text({"schema": INPUTS_SCHEMA, "inputs": prepared.to_json()}, indent=2),
                      what="inputs record")
    return prepared


def input_summary(prepared: PreparedInputs, model_inputs: Iterable[str] = ()) -> Dict[str, Any]:
    """The report's ``input_summary``: ``line`` ("inputs: seeded random, no --input given" when
    lar-prec made every input, else ""), ``generated`` (the inputs made so), and ``warnings``:
    each input of more than one element that is all zeros or one constant value, given or
    generated (every activation downstream then sees no variation), and each of
    ``model_inputs`` (the model's inputs the runs dumped) that was not given at all
    (``not_given``: load_and_run fed whatever the input's buffer held; two runs of the bundled
    one on multi_input were fed different values). Reads the written files."""
    generated = [i.name for i in prepared.items if (i.generated or {}).get("why") == NO_INPUT_GIVEN]
    warnings: List[str] = []
    constant: List[Dict[str, Any]] = []
    for i in prepared.items:
        try:
            flat = np.load(i.path, mmap_mode="r", allow_pickle=False).reshape(-1)
        except (OSError, ValueError):
            continue  # written by write_inputs a moment ago: nothing to say if it is gone
        if flat.size < 2 or not bool((flat == flat[0]).all()):
            continue
        value = flat[0].item()
        constant.append({"name": i.name, "value": value})
        what = "all zeros" if value == 0 else f"constant ({value:g} everywhere)"
        warnings.append(f"warning: input {i.name} is {what} ({i.source}): a kernel's error on varying data may not show")
    have = {i.name for i in prepared.items}
    not_given = sorted(set(model_inputs) - have) if have else []
    for name in not_given:
        warnings.append(f"warning: input {name} was not given (no --input for it): load_and_run fed whatever its "
                        "buffer held (give it, or no --input at all for seeded random data)")
    line = f"inputs: seeded random, {NO_INPUT_GIVEN}" if generated else ""
    return {"line": line, "generated": generated, "constant": constant, "not_given": not_given,
            "warnings": warnings}


def prepare_inputs(specs: "str | Iterable[str]", dest_dir: PathLike, model: "PathLike | None" = None, *,
                   seed: int = 0) -> PreparedInputs:
    """:func:`plan_inputs` then :func:`write_inputs` into ``dest_dir``, once per analysis."""
    return write_inputs(plan_inputs(specs, model, seed=seed), dest_dir)


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
    except (OSError, ValueError, SyntaxError, struct.error, UnicodeDecodeError, MemoryError, RecursionError):
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

