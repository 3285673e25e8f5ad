"""load_and_run command lines: the runner's flags, user flags and environment assignments.

Split from :mod:`lar_prec.runner` (which re-exports every name here). The command line is
always in the real binary's dash syntax, so the bundled runner, a local build and a device's
build get the same argv.
"""
from __future__ import annotations

import re
import shlex
from pathlib import Path
from typing import TYPE_CHECKING, Dict, Iterable, List, Optional, Sequence, Tuple

from lar_prec.errors import UsageError

if TYPE_CHECKING:
    from lar_prec.run.config import LoadAndRun, RunConfig

from lar_prec.records import PathLike  # noqa: E402


# --------------------------------------------------------------------------- command lines


# Flags the runner sets itself; user flags may not redirect them.
_RESERVED_FLAGS = {"input", "io_dump", "bin_io_dump", "io_dump_stdout", "io_dump_stderr", "bin_out_dump"}

#: flags that would corrupt a run behind lar-prec's back (issue 52; MegEngine 1.13's load_and_run
#: sources): name -> why
_CORRUPTING_FLAGS = {
    "thread": "it runs N copies of the model at once, which share load_and_run's one static dumper "
              "(their dumps overwrite one another)",
    "copy_to_host": "it replaces the output callbacks that --bin-out-dump installs",
    "flagfile": "a flag file can set the dump and input flags behind lar-prec's back",
    "fromenv": "it reads flags from the environment, which can set the dump and input flags behind lar-prec's back",
    "tryfromenv": "it reads flags from the environment, which can set the dump and input flags behind lar-prec's back",
    "lite": "it forces lite mode, where --reproducible has no effect and --bin-out-dump aborts",
}


def _flag_name(arg: str) -> Optional[str]:
    if not arg.startswith("-") or arg == "-" or arg == "--":
        return None
    name = arg.lstrip("-").split("=", 1)[0].replace("-", "_")
    return name[2:] if name.startswith("no") and name[2:] in _RESERVED_FLAGS else name


def check_extra_flags(extra_flags: Sequence[str]) -> None:
    """Refuse user flags that would redirect the dumps or inputs lar-prec sets, or corrupt the
    run (UsageError naming the flag and why)."""
    for arg in extra_flags:
        name = _flag_name(arg)
        if name in _RESERVED_FLAGS:
            raise UsageError(f"extra load_and_run flag {arg!r} conflicts with the dump and input flags lar-prec sets")
        if name in _CORRUPTING_FLAGS and not (name in ("lite", "copy_to_host")
                                              and arg.partition("=")[2].lower() in ("false", "f", "no", "n", "0")):
            raise UsageError(f"extra load_and_run flag {arg!r} is reserved: {_CORRUPTING_FLAGS[name]}")


def build_argv(
    lar: "LoadAndRun",
    model: PathLike,
    input_arg: str,
    config: "RunConfig",
    *,
    dump_dir: Optional[Path] = None,
    text_dump: Optional[Path] = None,
    extra_flags: Sequence[str] = (),
    out_dump: Optional[Path] = None,
    timed: Optional[Tuple[int, int]] = None,
) -> List[str]:
    """The command line of one run, in the real binary's (dash) syntax. ``timed``:
    ``(warmup_iter, iter)`` of a timed run (no dump given: it is only timed); else one
    iteration and no warm-up, the dumped one."""
    check_extra_flags(extra_flags)
    argv = [*lar.argv_prefix, str(model)]
    if input_arg:
        argv += ["--input", input_arg]
    if text_dump is not None:
        argv += ["--io-dump", str(text_dump)]
    elif dump_dir is not None:
        argv += ["--bin-io-dump", str(dump_dir)]
    elif out_dump is not None:
        argv += ["--bin-out-dump", str(out_dump)]
    warmup, iters = timed if timed is not None else (0, 1)
    argv += ["--iter", str(iters), "--warmup-iter", str(warmup), *config.flags, *extra_flags]
    return argv


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
