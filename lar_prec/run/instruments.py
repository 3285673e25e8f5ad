"""MegEngine's load_and_run's own instruments (issue 52 #4), each one process of the user's binary
whose stderr is read as data, strictly:

* ``--range X`` (NumRangeChecker): the first variable with a value of magnitude above X, NaN
  and Inf included, without dumping anything: :func:`first_nonfinite` (X = float32's largest
  finite value), a fast first pass when an output is NaN/Inf.
* ``--check-var-value 1:0`` (VarValueChecker): every variable of one process compared between
  its executions, one variable per execution: :func:`check_var_values`, an in-process
  determinism check (a race, memory read before written) before a long shake.
* ``--model-info``: the input and output names, shapes and dtypes (its text table):
  :func:`model_info`, where the wheel's Python is not at hand to read the model.

The bundled runner implements none of ``--range`` and ``--check-var-value`` (megenginelite has no
such plugins): for it they answer None, "not told".
"""
from __future__ import annotations

import re
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence

from lar_prec.errors import UsageError
from lar_prec.records import PathLike
from lar_prec.run.config import LoadAndRun
from lar_prec.run.proc import child_env, run_logged

#: float32's largest finite value: ``--range`` above it catches NaN and Inf only
FLOAT32_MAX = "3.4028234e38"

_VAR = re.compile(r"var: \{id:(\d{1,12}), layout:\{[^}]{0,400}\}, \w{1,40}, owner:(.{0,400}?)\{(\w{1,80})\}, "
                  r"name:(.{0,400}?), slot:\d{1,6}, ")
_RANGE = re.compile(r"float value out of range: ")
_VALUE = re.compile(r" value=(\S{1,40}) range=\S{1,40} index=\{([0-9,]{0,200})\}/\{([0-9,]{0,200})\}")
_CHECKING = re.compile(r"VarValueChecker: going to check #(\d{1,9}): ")


@dataclass(frozen=True)
class VarHit:
    """A variable an instrument stopped at: MDL var id, name, operator type; the value and
    index for ``--range``; the instrument's own line."""

    id: int
    name: str
    opr_type: str
    value: Optional[str] = None
    index: Optional[List[int]] = None
    line: str = ""

    def to_json(self) -> Dict[str, Any]:
        return {"id": self.id, "name": self.name, "opr_type": self.opr_type, "value": self.value,
                "index": self.index, "line": self.line}


def _run(lar: LoadAndRun, argv: Sequence[str], folder: Path, timeout: float,
         env: Optional[Dict[str, Optional[str]]] = None) -> str:
    if lar.is_bundled or lar.path is None:
        raise UsageError("this instrument needs MegEngine's load_and_run (--lar PATH); the bundled runner lacks it")
    folder.mkdir(parents=True, exist_ok=True)
    run_logged([lar.path, *argv], env=child_env(dict(env or {}), bundled=False), timeout=timeout,
               stdout_path=folder / "stdout.txt", stderr_path=folder / "stderr.txt")
    return (folder / "stderr.txt").read_text(encoding="utf-8", errors="replace")


def parse_range(stderr: str) -> Optional[VarHit]:
    """The variable of NumRangeChecker's error (``float value out of range: var: {...}``)."""
    m = _RANGE.search(stderr)
    if m is None:
        return None
    rest = stderr[m.end():m.end() + 4000]
    v = _VAR.match(rest)
    if v is None:
        return None
    val = _VALUE.search(rest)
    index = [int(x) for x in val.group(2).split(",") if x] if val else None
    line = rest.splitlines()[0] if rest else ""
    return VarHit(int(v.group(1)), v.group(4), v.group(3), val.group(1) if val else None, index,
                  ("float value out of range: " + line)[:400])


def first_nonfinite(lar: LoadAndRun, model: PathLike, input_arg: str, folder: Path, *,
                    flags: Sequence[str] = (), env: Optional[Dict[str, Optional[str]]] = None,
                    timeout: float = 600.0) -> Optional[VarHit]:
    """The first variable holding NaN or Inf in one run of ``lar`` with ``--range`` (nothing
    dumped), or None when every value is finite. The run's output stays in ``folder``."""
    text = _run(lar, [str(model), "--input", input_arg, "--iter", "1", "--warmup-iter", "0", *flags,
                      "--range", FLOAT32_MAX], folder, timeout, env)
    return parse_range(text)


@dataclass(frozen=True)
class VarValueCheck:
    """What ``--check-var-value`` found in one process: how many variables it compared between
    executions, and the first whose values differed (None: every one the same)."""

    checked: int
    mismatch: Optional[VarHit]
    seconds: float
    returncode: Optional[int]
    folder: str

    def to_json(self) -> Dict[str, Any]:
        return {"checked": self.checked, "mismatch": None if self.mismatch is None else self.mismatch.to_json(),
                "seconds": round(self.seconds, 3), "returncode": self.returncode, "dir": self.folder}

    def words(self) -> str:
        if self.mismatch is not None:
            return (f"in one process, {self.mismatch.name} ({self.mismatch.opr_type}, var {self.mismatch.id}) "
                    "took other values in another execution (MegEngine's VarValueChecker): a race or memory "
                    "read before it is written, inside the process")
        return (f"in one process, {self.checked} variables kept their values from execution to execution "
                "(MegEngine's VarValueChecker): what differs between runs comes from the process, not a race in it")


def check_var_values(lar: LoadAndRun, model: PathLike, input_arg: str, n_vars: int, folder: Path, *,
                     flags: Sequence[str] = (), env: Optional[Dict[str, Optional[str]]] = None,
                     timeout: float = 600.0) -> VarValueCheck:
    """One process of ``lar`` under ``--check-var-value 1:0`` with enough executions to compare
    each of ``n_vars`` variables once (the checker takes one per execution, after the first)."""
    t0 = time.monotonic()
    argv = [str(model), "--input", input_arg, "--iter", str(n_vars + 2), "--warmup-iter", "0", *flags,
            "--check-var-value", "1:0"]
    if lar.is_bundled or lar.path is None:
        raise UsageError("--check-var-value needs MegEngine's load_and_run (--lar PATH); the bundled runner lacks it")
    folder.mkdir(parents=True, exist_ok=True)
    _ended, rc = run_logged([lar.path, *argv], env=child_env(dict(env or {}), bundled=False), timeout=timeout, stdout_path=folder / "stdout.txt",
                            stderr_path=folder / "stderr.txt")
    text = (folder / "stderr.txt").read_text(encoding="utf-8", errors="replace")
    checked = len({m.group(1) for m in _CHECKING.finditer(text)})
    mismatch = None
    if rc not in (0, None):
        # AssertEqual::UnequalError names the var the checker compared last
        last = list(_CHECKING.finditer(text))
        if last:
            v = _VAR.match("var: " + text[last[-1].end():last[-1].end() + 4000])
            if v is not None:
                mismatch = VarHit(int(v.group(1)), v.group(4), v.group(3), line=_last_what(text))
    return VarValueCheck(checked, mismatch, time.monotonic() - t0, rc, str(folder))


def _last_what(text: str) -> str:
    found = re.findall(r"what\(\):\s{0,8}(.{0,300})", text)
    return found[-1].strip() if found else ""


# --------------------------------------------------------------------------- --model-info

_ROW = re.compile(r"^\|\s{0,40}(INPUT|OUTPUT)\s{0,40}\|\s{0,40}(\S{1,400}?)\s{0,40}\|\s{0,40}\{([0-9,]{0,200})\}"
                  r"\s{0,40}\|\s{0,40}(\w{0,20})\s{0,40}\|$", re.MULTILINE)


def parse_model_info(stderr: str) -> Optional[Dict[str, List[Dict[str, Any]]]]:
    """``{"inputs": [{"name", "shape", "dtype"}], "outputs": [...]}`` from ``--model-info``'s
    table (the first one: it is printed again after the run), or None without one."""
    rows = _ROW.findall(stderr)
    if not rows:
        return None
    out: Dict[str, List[Dict[str, Any]]] = {"inputs": [], "outputs": []}
    seen = set()
    for kind, name, shape, dtype in rows:
        key = (kind, name)
        if key in seen:
            break  # the table again, after the run
        seen.add(key)
        out["inputs" if kind == "INPUT" else "outputs"].append(
            {"name": name, "shape": [int(x) for x in shape.split(",") if x], "dtype": dtype or None})
    return out


def model_info(lar: LoadAndRun, model: PathLike, folder: Path, timeout: float = 120.0
               ) -> Dict[str, List[Dict[str, Any]]]:
    """The model's inputs and outputs as MegEngine's load_and_run reads them (``--model-info``,
    no execution: ``--iter 0 --warmup-iter 0``). UsageError when it prints no table."""
    text = _run(lar, [str(model), "--model-info", "--iter", "0", "--warmup-iter", "0"], folder, timeout)
    info = parse_model_info(text)
    if info is None:
        raise UsageError(f"load_and_run {lar.describe()} --model-info printed no table of {model}'s inputs "
                         f"(see {folder / 'stderr.txt'})")
    return info
