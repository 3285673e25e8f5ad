"""A zoo manifest (TOML) read and checked before anything runs: every table's keys, names,
types, files and device targets; every problem one :class:`ManifestError` (exit 2) naming the
manifest, the table and what was expected. The reference of every key is docs/zoo.md.

Paths (models, input files, ``float``, builds) are relative to the manifest's folder and come out
absolute; nothing read here reaches a command line, an environment or an import unchecked:
options are names of the sweep's table, flags go through the runner's allow-list
(:func:`lar_prec.run.argv.check_extra_flags`), targets through :func:`parse_target`.
"""
from __future__ import annotations

import math
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple

try:  # Python 3.11+
    import tomllib
except ModuleNotFoundError:  # Python 3.10: the same parser as a package
    import tomli as tomllib  # type: ignore[no-redef]

from lar_prec.errors import UsageError
from lar_prec.inputspec import MAX_SEED, TOO_DEEP, check_file, read_text_file, split_input
from lar_prec.records import PathLike
from lar_prec.run.argv import check_extra_flags
from lar_prec.run.config import program_problem
from lar_prec.run.device import RemoteSpec
from lar_prec.workflows.sweep.options import parse_options

COMMANDS = ("naive-vs-default", "shake", "sweep", "mixed", "quant")
#: commands that take load_and_run flags (configurations) and run on a device over ssh/adb
FLAGGED = ("naive-vs-default", "shake", "sweep")
#: the keys of a [[run]] table besides the common ones, per command
_RUN_KEYS = {
    "naive-vs-default": {"options", "threshold"},
    "shake": {"options", "threshold", "repeat"},
    "sweep": {"options"},
    "mixed": {"option", "tolerance"},
    "quant": set(),
}
_COMMON_RUN_KEYS = {"command", "models", "configs", "devices", "local", "timeout"}
_TOP_KEYS = {"zoo", "model", "run", "config", "build", "device"}
#: a name goes into folder names, Dask resource names and the page: short and plain
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.+-]{0,63}\Z")
_RESOURCE = re.compile(r"[A-Za-z][A-Za-z0-9_.@+-]{0,99}\Z")
BUNDLED = "bundled"
LOCAL = "local"
DEFAULT_TIMEOUT = 600.0
DEFAULT_RETRIES = 2
#: the bounds of the manifest's numbers: those of the CLI's options where it has them (shake's
#: --repeat 2..1000, --seed, --min-history >= 1), else what a night of runs can use (a run's
#: timeout at most a week, a task tried at most 100 times after the first, min_history at most
#: 10000 past runs): a value past them is a typo, not a plan
MAX_TIMEOUT = 7 * 24 * 3600.0
MAX_RETRIES = 100
MAX_REPEAT = 1000
MAX_MIN_HISTORY = 10000
#: largest manifest read (a zoo of thousands of models is a few hundred kilobytes)
MANIFEST_LIMIT = 16 << 20


class ManifestError(UsageError):
    """The manifest is not a zoo manifest lar-prec can run (exit 2, before anything runs)."""


@dataclass(frozen=True)
class ZooModel:
    name: str
    path: Path
    inputs: Tuple[str, ...]  # --input items, file paths absolute
    float_path: Optional[Path] = None  # quant: the float model this int8 model was quantized from


@dataclass(frozen=True)
class ZooRun:
    """One [[run]] table: a command and its settings; ``params`` holds the command's own keys."""

    command: str
    options: Tuple[str, ...] = ()
    models: Optional[Tuple[str, ...]] = None
    configs: Optional[Tuple[str, ...]] = None
    devices: Optional[Tuple[str, ...]] = None
    local: Optional[bool] = None
    timeout: Optional[float] = None
    params: Tuple[Tuple[str, Any], ...] = ()


@dataclass(frozen=True)
class ZooConfig:
    name: str
    flags: Tuple[str, ...] = ()


@dataclass(frozen=True)
class ZooBuild:
    name: str
    path: Optional[str] = None  # None: the bundled load_and_run (python -m lar_prec.lar)
    devices: Optional[Tuple[str, ...]] = None

    @property
    def bundled(self) -> bool:
        return self.path is None


@dataclass(frozen=True)
class ZooDevice:
    name: str
    remote: Optional[str] = None  # ssh:[user@]host[:port] or adb[:serial]; None: the worker's own machine
    remote_dir: Optional[str] = None
    resource: Optional[str] = None  # the Dask worker resource that owns it (None for local)


@dataclass(frozen=True)
class Manifest:
    path: Path
    name: str
    models: Tuple[ZooModel, ...]
    runs: Tuple[ZooRun, ...]
    configs: Tuple[ZooConfig, ...]
    builds: Tuple[ZooBuild, ...]
    devices: Tuple[ZooDevice, ...]
    timeout: float = DEFAULT_TIMEOUT
    retries: int = DEFAULT_RETRIES
    seed: int = 0
    local: bool = True
    #: past runs of a task's series before a regression is said (as ``lar-prec check --min-history``)
    min_history: int = 3


def device_resource(target: str) -> str:
    """The default worker resource of a device: ``dev-ssh-HOST[-PORT]``, ``dev-adb-SERIAL``
    (the user is left out: one board is one device whoever logs in)."""
    kind, _, rest = target.partition(":")
    rest = rest.rpartition("@")[2] if kind == "ssh" else rest
    return "dev-" + re.sub(r"[^A-Za-z0-9_.+-]+", "-", f"{kind}-{rest}" if rest else kind).strip("-")


class _Table:
    """One table of the manifest, read key by key; :meth:`done` refuses the keys left over."""

    def __init__(self, where: str, data: Any, allowed: Optional[set]) -> None:
        self.where = where
        if not isinstance(data, Mapping):
            raise ManifestError(f"{where}: expected a table, found {type(data).__name__}")
        self.data = dict(data)
        unknown = sorted(set(self.data) - allowed) if allowed is not None else []  # None: the caller checks
        if unknown:
            raise ManifestError(f"{where}: unknown key {unknown[0]!r} (expected one of {', '.join(sorted(allowed))})")

    def fail(self, key: str, expected: str) -> ManifestError:
        return ManifestError(f"{self.where}: {key} = {self.data.get(key)!r}: expected {expected}")

    def text(self, key: str, default: Optional[str] = None, *, required: bool = False) -> Optional[str]:
        v = self.data.get(key, default)
        if v is None and not required:
            return None
        if not isinstance(v, str) or not v.strip() or any(c in v for c in "\n\0"):
            raise self.fail(key, "a non-empty string on one line")
        return v

    def name(self, key: str = "name", default: Optional[str] = None) -> str:
        v = self.text(key, default, required=True)
        if not _NAME.match(v or ""):
            raise self.fail(key, "a name of letters, digits and _ . + - (at most 64, not starting with a sign)")
        return str(v)

    def names(self, key: str) -> Optional[Tuple[str, ...]]:
        v = self.data.get(key)
        if v is None:
            return None
        if not isinstance(v, list) or not v or not all(isinstance(x, str) and x for x in v):
            raise self.fail(key, "a non-empty list of strings")
        return tuple(v)

    def number(self, key: str, *, integer: bool = False, low: float = 0.0, open_low: bool = False,
               high: float = math.inf) -> Optional[float]:
        """The number at ``key`` in [low, high] (``open_low``: low excluded), the bounds the CLI
        puts on the same option; out of them, one line naming the key and its range."""
        v = self.data.get(key)
        if v is None:
            return None
        ok = isinstance(v, int) if integer else isinstance(v, (int, float))
        if isinstance(v, bool) or not ok or not math.isfinite(v) or v < low or (open_low and v == low) or v > high:
            what = "an integer" if integer else "a number"
            lo, hi = (str(x) if isinstance(x, int) else str(int(x)) if x.is_integer() else f"{x:g}"
                      for x in (low, high))
            span = (f"{'>' if open_low else '>='} {lo}" if high == math.inf
                    else f"{'over' if open_low else 'from'} {lo} {'and at most' if open_low else 'to'} {hi}")
            raise self.fail(key, f"{what} {span}")
        return v

    def flag(self, key: str) -> Optional[bool]:
        v = self.data.get(key)
        if v is not None and not isinstance(v, bool):
            raise self.fail(key, "true or false")
        return v


def _resolve(base: Path, text: str) -> Path:
    p = Path(text).expanduser()
    return p if p.is_absolute() else (base / p)


def _model(t: _Table, base: Path) -> ZooModel:
    name = t.name()
    path = check_file(_resolve(base, str(t.text("path", required=True))), f"{t.where}: model file")
    items = t.names("inputs") or ()
    inputs = []
    for spec in items:
        for item in split_input(spec):
            if item.kind in ("npy", "json", "image"):
                f = check_file(_resolve(base, item.text), f"{t.where}: input file of {item.name!r}")
                inputs.append(f"{item.name}:{f.resolve()}")
            else:
                inputs.append(item.spec)
    float_text = t.text("float")
    float_path = check_file(_resolve(base, float_text), f"{t.where}: float model") if float_text else None
    return ZooModel(name, path.resolve(), tuple(inputs), float_path.resolve() if float_path else None)


def _run(t: _Table) -> ZooRun:
    command = t.text("command", required=True)
    if command not in COMMANDS:
        raise t.fail("command", " | ".join(COMMANDS))
    extra = sorted(set(t.data) - _COMMON_RUN_KEYS - _RUN_KEYS[str(command)])
    if extra:
        raise ManifestError(f"{t.where}: {extra[0]!r} is not a key of a {command} run (its keys: "
                            f"{', '.join(sorted(_COMMON_RUN_KEYS | _RUN_KEYS[str(command)]))})")
    if command not in FLAGGED and "configs" in t.data:
        raise ManifestError(f"{t.where}: {command} takes no load_and_run flags, so no configs")
    options: Tuple[str, ...] = ()
    if "options" in t.data:
        names = t.names("options") or ()
        try:
            options = tuple(o.name for o in parse_options(list(names)))
        except UsageError as exc:
            raise ManifestError(f"{t.where}: {exc}") from None
    params: Dict[str, Any] = {}
    if "threshold" in t.data:
        th = t.data["threshold"]
        if not (th in ("auto", "band") or (isinstance(th, (int, float)) and not isinstance(th, bool)
                                           and math.isfinite(th) and th >= 0)):
            raise t.fail("threshold", '"auto", "band" or a finite number >= 0')
        params["threshold"] = th
    repeat = t.number("repeat", integer=True, low=2, high=MAX_REPEAT)
    if repeat is not None:
        params["repeat"] = int(repeat)
    if "option" in t.data:
        if t.data["option"] not in ("ioc16", "io16xc32"):
            raise t.fail("option", '"ioc16" or "io16xc32"')
        params["option"] = t.data["option"]
    tol = t.number("tolerance")
    if tol is not None:
        params["tolerance"] = float(tol)
    timeout = t.number("timeout", open_low=True, high=MAX_TIMEOUT)
    return ZooRun(str(command), options, t.names("models"), t.names("configs"), t.names("devices"), t.flag("local"),
                  None if timeout is None else float(timeout), tuple(sorted(params.items())))


def _config(t: _Table) -> ZooConfig:
    flags = t.data.get("flags", [])
    if not isinstance(flags, list) or not all(isinstance(f, str) for f in flags):
        raise t.fail("flags", 'a list of load_and_run flags, e.g. ["--fast-run"]')
    try:
        check_extra_flags(flags)
    except UsageError as exc:
        raise ManifestError(f"{t.where}: {exc}") from None
    return ZooConfig(t.name(), tuple(flags))


def _build(t: _Table, base: Path) -> ZooBuild:
    name = t.name()
    path = t.text("path")
    if path is None and name != BUNDLED:
        raise ManifestError(f"{t.where}: build {name!r} has no path (only the build named \"bundled\" may leave it "
                            "out: python -m lar_prec.lar)")
    return ZooBuild(name, None if path in (None, BUNDLED) else str(_resolve(base, str(path))), t.names("devices"))


def _check_build(where: str, build: ZooBuild, devices: Sequence[ZooDevice]) -> None:
    """A build that runs on this machine's devices must be a program here (a worker needs it at
    the same path, as it needs the models); a path only devices run is theirs to say about."""
    if build.bundled:
        return
    here = any(d.remote is None for d in devices if build.devices is None or d.name in build.devices)
    problem = program_problem(str(build.path)) if here else None
    if problem:
        raise ManifestError(f"{where}: build {build.name!r}: path {build.path} {problem}")


def _device(t: _Table) -> ZooDevice:
    name = t.name()
    remote = t.text("remote")
    if remote is None:
        if name != LOCAL:
            raise ManifestError(f"{t.where}: device {name!r} has no remote (only the device named \"local\" may "
                                "leave it out: the machine of the worker that takes the task)")
        for key in ("remote_dir", "resource"):
            if key in t.data:
                raise ManifestError(f"{t.where}: {key} applies to a remote device only")
        return ZooDevice(name)
    remote_dir = t.text("remote_dir")
    try:
        RemoteSpec(remote, remote_dir=remote_dir)  # the target and folder checked as --remote checks them
    except UsageError as exc:
        raise ManifestError(f"{t.where}: {exc}") from None
    resource = t.text("resource") or device_resource(remote)
    if not _RESOURCE.match(resource):
        raise t.fail("resource", "a Dask resource name: letters, digits and _ . @ + - (no '=', ',' or space)")
    return ZooDevice(name, remote, remote_dir, resource)


def _tables(doc: Mapping[str, Any], key: str, where: str) -> List[Any]:
    v = doc.get(key, [])
    if not isinstance(v, list):
        raise ManifestError(f"{where}: {key} must be an array of tables ([[{key}]]), found a {type(v).__name__}")
    return v


def _unique(items: Sequence[Any], what: str, where: str) -> None:
    seen: Dict[str, int] = {}
    for i, it in enumerate(items, 1):
        if it.name in seen:
            raise ManifestError(f"{where}: [[{what}]] #{i} repeats the name {it.name!r} of #{seen[it.name]}")
        seen[it.name] = i


def _known(t_where: str, key: str, names: Optional[Sequence[str]], known: Sequence[str], what: str) -> None:
    for n in names or ():
        if n not in known:
            raise ManifestError(f"{t_where}: {key} names {what} {n!r}, which the manifest does not define "
                                f"(defined: {', '.join(known) or 'none'})")


def load_manifest(path: PathLike) -> Manifest:
    """Read and check a zoo manifest.

    Raises:
        ManifestError (exit 2): not TOML, an unknown key, a missing model or input file, a name
            used twice, an unknown command, option, configuration, build or device, a flag
            lar-prec refuses, a combination that cannot run (see docs/zoo.md).
    """
    p = check_file(path, "zoo manifest")
    where = str(p)
    try:
        text = read_text_file(p, "zoo manifest", limit=MANIFEST_LIMIT)
    except UsageError as exc:
        raise ManifestError(str(exc)) from None
    try:
        doc = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ManifestError(f"{where}: not a TOML file: {exc}") from None
    except RecursionError:  # the parser recurses once per level of nested arrays and tables
        raise ManifestError(f"zoo manifest {where} {TOO_DEEP.format('TOML')}") from None
    unknown = sorted(set(doc) - _TOP_KEYS)
    if unknown:
        raise ManifestError(f"{where}: unknown key {unknown[0]!r} (expected the tables [zoo], [[model]], [[run]], "
                            "[[config]], [[build]], [[device]])")
    base = p.resolve().parent
    top = _Table(f"{where}: [zoo]", doc.get("zoo", {}), {"name", "timeout", "retries", "seed", "local", "min_history"})

    def each(key: str, allowed: Optional[set]) -> List[_Table]:
        return [_Table(f"{where}: [[{key}]] #{i}", d, allowed) for i, d in enumerate(_tables(doc, key, where), 1)]

    models = tuple(_model(t, base) for t in each("model", {"name", "path", "inputs", "float"}))
    runs_t = each("run", None)  # a run's keys depend on its command: _run checks them
    runs = tuple(_run(t) for t in runs_t)
    configs = tuple(_config(t) for t in each("config", {"name", "flags"})) or (ZooConfig("default"),)
    builds = tuple(_build(t, base) for t in each("build", {"name", "path", "devices"})) or (ZooBuild(BUNDLED),)
    devices_t = each("device", {"name", "remote", "remote_dir", "resource"})
    devices = tuple(_device(t) for t in devices_t) or (ZooDevice(LOCAL),)
    if not models:
        raise ManifestError(f"{where}: no [[model]]: expected at least one model (name, path, inputs)")
    if not runs:
        raise ManifestError(f"{where}: no [[run]]: expected at least one analysis (command = \"sweep\", ...)")
    for items, what in ((models, "model"), (configs, "config"), (builds, "build"), (devices, "device")):
        _unique(items, what, where)
    names = {"models": [m.name for m in models], "configs": [c.name for c in configs],
             "devices": [d.name for d in devices]}
    for t, r in zip(runs_t, runs):
        for key, what in (("models", "model"), ("configs", "config"), ("devices", "device")):
            _known(t.where, key, getattr(r, key), names[key], what)
    for i, b in enumerate(builds, 1):
        _known(f"{where}: [[build]] #{i}", "devices", b.devices, names["devices"], "device")
        _check_build(f"{where}: [[build]] #{i}", b, devices)
    timeout = top.number("timeout", open_low=True, high=MAX_TIMEOUT)
    retries = top.number("retries", integer=True, high=MAX_RETRIES)
    seed = top.number("seed", integer=True, high=MAX_SEED)
    local = top.flag("local")
    min_history = top.number("min_history", integer=True, low=1, high=MAX_MIN_HISTORY)
    return Manifest(p.resolve(), top.name("name", p.stem if _NAME.match(p.stem) else "zoo"), models, runs, configs,
                    builds, devices, DEFAULT_TIMEOUT if timeout is None else float(timeout),
                    DEFAULT_RETRIES if retries is None else int(retries), int(seed or 0),
                    True if local is None else local, 3 if min_history is None else int(min_history))
