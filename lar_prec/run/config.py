"""Run configurations (naive, default, reproducible, fast-run) and which load_and_run runs them.

A :class:`RunConfig` is a named set of flags and environment changes; :func:`resolve_load_and_run`
chooses the binary (``--lar``, ``$LAR_PREC_LOAD_AND_RUN``, ``load_and_run`` on PATH, else the
bundled ``python -m lar_prec.lar``).
"""
from __future__ import annotations

import errno
import functools
import math
import os
import re
import shutil
import stat
import sys
from dataclasses import dataclass, replace
from typing import Dict, Mapping, Optional, Sequence, Tuple

from lar_prec import __version__
from lar_prec.errors import LoadAndRunNotFound, UsageError
from lar_prec.run.proc import run_bounded

#: environment variable naming the load_and_run to use when --lar is not given
ENV_LOAD_AND_RUN = "LAR_PREC_LOAD_AND_RUN"
#: value of --lar / LAR_PREC_LOAD_AND_RUN that forces the bundled runner
BUNDLED = "bundled"
DEBUG_ENV = "MGB_USE_MEGDNN_DBG"
#: seconds ``load_and_run --version`` may take (less when the run's own timeout is shorter)
VERSION_TIMEOUT = 10.0

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
# Every configuration runs on the CPU (--cpu), as the naive reference must: a real load_and_run
# otherwise runs an MDL model where the model says (xpux: the GPU of a CUDA build), and naive
# against default would compare two devices unsaid. A device flag of the user's (--cuda), given
# after these, moves the test runs; workflows.common.analysis.reference_flags keeps it from the reference.
CONFIGS: Dict[str, RunConfig] = {
    "naive": RunConfig(
        "naive", ("--cpu",), ((DEBUG_ENV, "2"),),
        "reference kernels: MGB_USE_MEGDNN_DBG=2, on CPU (the variable only affects CPU comp nodes)",
    ),
    "default": RunConfig("default", ("--cpu",), ((DEBUG_ENV, None),), "the default kernels and algorithm heuristic"),
    "reproducible": RunConfig(
        "reproducible", ("--cpu", "--reproducible"), ((DEBUG_ENV, None),), "algorithms restricted to reproducible ones"
    ),
    "fast-run": RunConfig(
        "fast-run", ("--cpu", "--fast-run"), ((DEBUG_ENV, None),), "algorithms picked by profiling (fast-run)"
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


def program_problem(path: str) -> Optional[str]:
    """Why ``path`` cannot be run as a program (``"does not exist"``, ``"is a folder, not a
    program"``, ``"is a symlink loop"``, ``"is not executable (chmod +x?)"``...), or None."""
    try:
        st = os.stat(path)
    except FileNotFoundError:
        return "is a broken symlink" if os.path.islink(path) else "does not exist"
    except OSError as exc:
        return "is a symlink loop" if exc.errno == errno.ELOOP else f"cannot be read ({exc.strerror})"
    if stat.S_ISDIR(st.st_mode):
        return "is a folder, not a program"
    if not stat.S_ISREG(st.st_mode):
        return "is not a regular file (a FIFO, socket or device), not a program"
    if not os.access(path, os.X_OK):
        return "is not executable (chmod +x?)"
    return None


def _external(value: str, source: str) -> LoadAndRun:
    candidate = os.path.expanduser(value)
    found = candidate if os.sep in candidate else shutil.which(candidate)
    problem = "does not exist" if found is None else program_problem(found)
    if found is None and os.path.lexists(candidate):  # a file of that name here, not a program on PATH
        problem = f"is not on PATH (./{candidate} runs the file here)"
    if problem:
        raise LoadAndRunNotFound(f"load_and_run {value!r} (from {source}) {problem}")
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


_MGE_DIST = re.compile(r"^megengine-([^-]+?)(?:\.dist-info|\.egg-info|-py[^-]*\.egg-info)$", re.IGNORECASE)


@functools.lru_cache(maxsize=None)
def megengine_version() -> Optional[str]:
    """The installed megengine wheel's version, without importing it (None when absent).

    Read from the name of its ``megengine-VERSION.dist-info`` folder on ``sys.path``, the
    first one in path order as importlib.metadata takes it: importing importlib.metadata
    costs ~40 ms, paid before the first load_and_run run starts."""
    for entry in sys.path:
        try:
            with os.scandir(entry or ".") as it:
                found = next((m.group(1) for m in map(_MGE_DIST.match, (e.name for e in it)) if m), None)
        except OSError:  # not a folder (a zip), or gone
            continue
        if found:
            return found
    return None


def load_and_run_version(lar: LoadAndRun, timeout: Optional[float] = None) -> str:
    """What ``--version`` of an external binary prints (first line), or the bundled runner's name.

    The check runs in its own process group for at most ``timeout`` (and at most
    :data:`VERSION_TIMEOUT`) seconds; Ctrl-C kills it and raises KeyboardInterrupt.
    """
    if lar.is_bundled:
        return f"bundled lar_prec.lar {__version__} (megenginelite {megengine_version() or 'missing'})"
    if lar.path is None:
        return "unknown"
    if lar.path not in _VERSION_CACHE:
        limit = VERSION_TIMEOUT if timeout is None else min(VERSION_TIMEOUT, timeout)
        try:
            text = run_bounded([lar.path, "--version"], timeout=limit)
        except OSError as exc:
            text = f"unknown ({exc.strerror or exc.__class__.__name__})"
        if text is None:
            text = f"unknown (--version did not answer within {limit:g} s)"
        _VERSION_CACHE[lar.path] = text.splitlines()[0] if text else "unknown (--version printed nothing)"
    return _VERSION_CACHE[lar.path]


def check_timeout(timeout: object) -> Optional[float]:
    """A run's timeout in seconds: None (no timeout) or a finite number > 0; else UsageError."""
    if timeout is None:
        return None
    try:
        value = float(timeout)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        value = math.nan
    if isinstance(timeout, bool) or not (math.isfinite(value) and value > 0):
        raise UsageError(f"--timeout {timeout!r}: expected a finite number of seconds > 0 "
                         "(leave --timeout out for no timeout)")
    return value
