"""The steps every run goes through, wherever it runs (a local process or a device).

:func:`new_record` makes the record of a run that has not started, :func:`refuse` records why
a run could not start, :func:`record_interrupt` records Ctrl-C, and :func:`conclude` writes the
final run.json and turns a failed run into RunError / RunTimeout (exit 3) or, for an input the
model lacks, UsageError (exit 2). :mod:`lar_prec.run.process` and :mod:`lar_prec.run.device`
execute the run between these steps.
"""
from __future__ import annotations

import contextlib
import logging
import os
import re
from dataclasses import replace
from pathlib import Path
from typing import Optional

from lar_prec.dumps.binary import INCOMPLETE_MARKER
from lar_prec.errors import RunError, RunTimeout, UsageError
from lar_prec.records import PathLike
from lar_prec.run.config import LoadAndRun, RunConfig, megengine_version
from lar_prec.run.inputs import PreparedInputs
from lar_prec.run.probe import model_mode, read_versions
from lar_prec.run.proc import STALL_ENV, failure_hint, last_meaningful_line, read_end, stall_after
from lar_prec.run.record import RunResult, now_iso, write_run_json

log = logging.getLogger(__name__)


def resolve_path(path: PathLike) -> Path:
    """An absolute path, symlinks resolved where they can be (a loop stays as given)."""
    try:
        return Path(path).resolve()
    except (OSError, RuntimeError):  # RuntimeError: a symlink loop (Python < 3.13)
        return Path(os.path.abspath(path))


def new_record(run_dir: Path, label: str, cfg: RunConfig, lar: LoadAndRun, model: PathLike,
                inputs: "PreparedInputs | str | None", text_dump: bool, timeout: Optional[float],
                outputs_only: bool = False, mode: Optional[str] = None) -> RunResult:
    """Step 1: the record of a run that has not started (``outputs_only``: it dumps the
    network outputs alone, ``--bin-out-dump``, and no var with ``--bin-io-dump``; ``mode``:
    the model's mode when the caller read it already)."""
    return RunResult(
        label=label, config=cfg.name, dir=run_dir,
        dump_dir=None if text_dump or outputs_only else run_dir / "dump",
        out_dump=run_dir / "outputs" if outputs_only else None,
        text_dump=run_dir / "io_dump.txt" if text_dump else None,
        argv=(), env_changes=cfg.env, returncode=None, signal=None, seconds=0.0, stderr_tail="",
        incomplete=True, status="not_started", config_flags=cfg.flags,
        load_and_run={"kind": lar.kind, "path": lar.path, "source": lar.source,
                      "argv_prefix": list(lar.argv_prefix), "version": None},
        # an external binary's MegEngine is what its run says (conclude), never the host's wheel
        megengine_version=megengine_version() if lar.is_bundled else None,
        versions_from="wheel" if lar.is_bundled else None, model_mode=model_mode(model) if mode is None else mode,
        model_path=str(resolve_path(model)),
        inputs=tuple(inputs.to_json()) if isinstance(inputs, PreparedInputs) else (),
        started=now_iso(), timeout=timeout,
    )


def refuse(rec: RunResult, exc: UsageError) -> UsageError:
    """The run cannot start: record why (as far as the disk lets us) and return ``exc``."""
    rec = replace(rec, status="not_started", error=str(exc))
    with contextlib.suppress(UsageError):  # a full disk: the error itself says enough
        write_run_json(rec)
    exc.run_dir, exc.result = rec.dir, rec
    return exc


def record_interrupt(rec: RunResult, error: str) -> None:
    rec = replace(rec, status="interrupted", error=error)
    try:
        write_run_json(rec)
    except UsageError as exc:
        log.warning("%s", exc)


def with_versions(rec: RunResult) -> RunResult:
    """The record with the MegBrain and MegDNN versions its stderr names (MegEngine's
    load_and_run logs them at start; the bundled runner logs the wheel's the same way)."""
    found = read_versions(rec.dir / "stderr.txt")
    if found is None:
        return rec
    return replace(rec, megengine_version=found.megbrain, megdnn_version=found.megdnn, versions_from="stderr")


#: what a run with --record-comp-seq(2) and an operator dump does in MegEngine's load_and_run
RECORD_DUMP_WORDS = (
    "MegEngine's record mode (--record-comp-seq) cannot dump under load_and_run: its dumper writes when it is "
    "destroyed, and load_and_run holds it in a static that dies after the graph (\"pure virtual method called\", "
    "abort at exit), so nothing was dumped")


def record_dump_abort(rec: RunResult, stderr: str) -> bool:
    """The run asked for record mode and an operator dump, and died of it at exit."""
    names = {a.lstrip("-").split("=", 1)[0].replace("-", "_") for a in rec.argv if a.startswith("-")}
    return (bool(names & {"record_comp_seq", "record_comp_seq2"}) and bool(names & {"bin_io_dump", "io_dump"})
            and "pure virtual method called" in stderr)


#: MegEngine 1.13's load_and_run leaves IOdumpOption's enable_* bools uninitialized (``new
#: IOdumpOption`` without ``()``): a long ``--input`` (a layerwise model's, a reduced part's)
#: leaves text in the heap they are read from, so it logs a text dump nobody asked for, into
#: stdout and into the --bin-io-dump folder (fopen of a folder: NULL), and dies of SIGSEGV.
#: glibc's MALLOC_PERTURB_=255 zero-fills every allocation, so the bools read false.
ZEROED_HEAP = ("MALLOC_PERTURB_", "255")
_SPURIOUS_DUMP = re.compile(r"enable text io dump")


def spurious_text_dump(rec: RunResult) -> bool:
    """The run died of a text dump it never asked for (the uninitialized flags above)."""
    if rec.returncode is None or rec.returncode >= 0 or rec.load_and_run.get("kind") == "bundled":
        return False
    names = {a.lstrip("-").split("=", 1)[0].replace("-", "_") for a in rec.argv if a.startswith("-")}
    if names & {"io_dump", "io_dump_stdout", "io_dump_stderr"} or dict(rec.env_changes).get(ZEROED_HEAP[0]):
        return False
    return bool(_SPURIOUS_DUMP.search(read_end(rec.dir / "stderr.txt")))


#: the bundled runner's message for an --input name the model lacks
_UNKNOWN_INPUT = re.compile(r"^the model has no input named ")


def conclude(rec: RunResult, ended: str) -> RunResult:
    """Step 4: the final run.json; the record of a good run, or RunError / RunTimeout.
    ``ended``: how :func:`lar_prec.run.process.execute` saw it end (exited, timeout, stalled)."""
    timed_out = ended == "timeout"
    rec = with_versions(rec)
    if ended == "exited" and rec.returncode == 0:
        rec = replace(rec, status="ok", incomplete=False)
        if rec.dump_dir is not None:
            with contextlib.suppress(FileNotFoundError):
                (rec.dump_dir / INCOMPLETE_MARKER).unlink()
        try:
            write_run_json(rec)
        except UsageError as exc:  # the run is fine, its record is not on disk: an output error
            exc.run_dir, exc.result = rec.dir, rec
            raise
        return rec
    stderr = read_end(rec.dir / "stderr.txt")
    # the bundled runner prefixes its errors like a program does; the message already says who failed
    last = re.sub(r"^load_and_run: error: ", "", last_meaningful_line(stderr))
    hint = failure_hint(stderr)
    where = f"run {rec.label!r} ({rec.dir})"
    if timed_out:
        status = "timeout"
        msg = f"load_and_run did not finish within {rec.timeout:g} s and was killed with its process group; {where}"
    elif ended == "stalled":
        status = "stalled"
        msg = (f"load_and_run stalled: alive but using no CPU for {stall_after():g} s ({STALL_ENV} sets this) "
               f"with no thread waiting on anything, ended with its process group; {where}"
               + (f"; stalled after: {last}" if last else ""))
    elif rec.returncode is not None and rec.returncode < 0:
        status = "crashed"
        msg = f"load_and_run was killed by {rec.signal} in {where}" + (f": {last}" if last else "")
    else:
        status = "failed"
        msg = f"load_and_run failed (exit {rec.returncode}) in {where}: {last or 'no message on stderr'}"
    if record_dump_abort(rec, stderr):
        msg = f"{RECORD_DUMP_WORDS}; {where}"
        hint = "drop --record-comp-seq (or judge its outputs alone: --bin-out-dump works in record mode)"
    if hint:
        msg += f" -- hint: {hint}"
    rec = replace(rec, status=status, error=msg, hint=hint)
    if rec.dump_dir is not None and rec.dump_dir.is_dir():
        with contextlib.suppress(OSError):
            (rec.dump_dir / INCOMPLETE_MARKER).write_text(msg + "\n")
    try:
        write_run_json(rec)
    except UsageError as exc:
        msg += f" (and {exc})"
    if rec.load_and_run.get("kind") == "bundled" and _UNKNOWN_INPUT.search(last):
        # an input the model lacks is the user's input error (exit 2), as for shape-only inputs
        usage = UsageError(f"{last} -- see {rec.json_path}")
        usage.run_dir, usage.result = rec.dir, rec
        raise usage
    cls = RunTimeout if timed_out else RunError
    err = cls(msg, run_dir=rec.dir, returncode=rec.returncode, argv=rec.argv, stderr_tail=rec.stderr_tail)
    err.result = rec
    raise err
