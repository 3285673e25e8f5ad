"""One run (:func:`run_once`) and the ``lar-prec run`` command (:func:`run_single`).

A *run* is one process: ``load_and_run MODEL --input ... --bin-io-dump DIR --iter 1
--warmup-iter 0`` plus a configuration's flags and environment. MGB_USE_MEGDNN_DBG is read once
per process (per comp node), so configurations are never mixed in one process.

Folder layout of an analysis (:func:`lar_prec.run.dirs.new_analysis_dir`)::

    <analysis>/inputs/<name>.npy, inputs.json     prepared once, shared by every run
    <analysis>/<label>/run.json                   one folder per run, never reused
    <analysis>/<label>/dump/                      --bin-io-dump folder
    <analysis>/<label>/io_dump.txt                --io-dump file (text-dump runs)
    <analysis>/<label>/stdout.txt, stderr.txt     the process's output

``run.json`` is written when the run starts (status ``running``) and rewritten when it ends,
so a folder always says what happened to it, even after a crash of lar-prec itself.
"""
from __future__ import annotations

import contextlib
import os
from dataclasses import replace
from pathlib import Path
from typing import Callable, Iterable, Mapping, Optional, Sequence

from lar_prec.dumps.binary import INCOMPLETE_MARKER

from lar_prec.errors import AnalysisInterrupted, UsageError
from lar_prec.inputspec import check_file
from lar_prec.records import PathLike
from lar_prec.run.argv import check_extra_flags
from lar_prec.run.config import LoadAndRun, RunConfig, check_timeout, get_config, resolve_load_and_run
from lar_prec.run.device import RemoteSessions, RemoteSpec, open_sessions, remote_load_and_run, run_once_remote
from lar_prec.run.dirs import new_analysis_dir, new_run_dir
from lar_prec.run.inputs import PreparedInputs, plan_inputs, write_inputs
from lar_prec.run.process import execute, preflight
from lar_prec.run.proc import interrupted
from lar_prec.run.record import RunResult
from lar_prec.run.steps import ZEROED_HEAP, conclude, new_record, resolve_path, spurious_text_dump


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
    remote: "RemoteSessions | None" = None,
    outputs_only: bool = False,
    model_mode: Optional[str] = None,
) -> RunResult:
    """Run load_and_run once in a fresh process, in a new folder under ``out_dir``.

    ``model_mode``: the model's mode when the caller read it already (a prepared analysis,
    :class:`lar_prec.run.settings.Prepared`); else it is read from the model's first bytes.

    ``outputs_only``: no ``--bin-io-dump``; the network outputs alone are dumped with
    ``--bin-out-dump`` into ``<run folder>/outputs`` (a run nothing observes but that: shake's
    observer check). Local runs only.

    With ``remote`` (:class:`lar_prec.runremote.RemoteSessions`) the process runs on that
    device (``lar`` is then ignored: the sessions name the device's load_and_run) and its
    folder is pulled into the run folder; transport failures raise RemoteError (exit 3).

    ``on_started`` is called once the process has started (workflows use the wait for
    background work).

    ``inputs`` is a PreparedInputs (or a ready ``--input`` string). The folder is
    ``out_dir/<label>`` (default: the configuration name, ``-text`` for text dumps), numbered
    when it exists. Returns the RunResult of a successful run. Otherwise, after writing
    run.json: UsageError (exit 2) when the model or an input file is missing, the timeout is
    not a finite positive number or the folder cannot be written, RunTimeout when ``timeout``
    seconds pass (the whole process group is killed), RunError (exit 3) for a non-zero exit or
    a signal. The exception's ``result`` attribute holds the RunResult. KeyboardInterrupt
    kills the process group, marks run.json ``interrupted`` and propagates.
    """
    if interrupted():  # queued behind runs that Ctrl-C killed: do not start
        raise KeyboardInterrupt
    timeout = check_timeout(timeout)
    cfg = get_config(config).with_extra(env=extra_env)
    label = label or (cfg.name + ("-text" if text_dump else ""))
    if remote is not None:
        if outputs_only:
            raise UsageError("a run that dumps its outputs only (--bin-out-dump) runs on this machine, not on a device")
        check_extra_flags(extra_flags)
        lar_obj = remote_load_and_run(remote)
    else:
        lar_obj = resolve_load_and_run(lar)
    run_dir = new_run_dir(resolve_path(out_dir), label, what="analysis folder")
    rec = new_record(run_dir, label, cfg, lar_obj, model, inputs, text_dump, timeout, outputs_only, model_mode)
    if remote is not None:
        rec = run_once_remote(rec, Path(model), inputs, cfg, remote, text_dump=text_dump, extra_flags=extra_flags,
                              on_started=on_started)
        if interrupted():
            raise KeyboardInterrupt
        return rec
    input_arg = inputs.input_arg if isinstance(inputs, PreparedInputs) else (inputs or "")
    rec = preflight(rec, lar_obj, cfg, model, input_arg, extra_flags)
    rec, ended = execute(rec, lar_obj, on_started)
    if ended == "exited" and spurious_text_dump(rec):
        rec, ended = _again_zeroed(rec, lar_obj, on_started)
    rec = conclude(rec, ended)
    if interrupted():  # it ended well just as Ctrl-C came: its record says ok, the analysis stops
        raise KeyboardInterrupt
    return rec


def _again_zeroed(rec: RunResult, lar: LoadAndRun, on_started: Optional[Callable[[], None]]):
    """The run once more with every allocation zero-filled (:data:`ZEROED_HEAP`): MegEngine's
    load_and_run read its dump switches from uninitialized memory. The first attempt's stderr
    stays beside as ``stderr-uninitialized.txt``; run.json names the variable."""
    with contextlib.suppress(OSError):
        os.replace(rec.dir / "stderr.txt", rec.dir / "stderr-uninitialized.txt")
    if rec.dump_dir is not None and rec.dump_dir.is_dir():
        for p in rec.dump_dir.iterdir():
            if p.name != INCOMPLETE_MARKER and p.is_file():
                with contextlib.suppress(OSError):
                    p.unlink()
    return execute(replace(rec, env_changes=tuple(rec.env_changes) + (ZEROED_HEAP,)), lar, on_started)


# --------------------------------------------------------------------------- one command

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
    remote: "RemoteSpec | None" = None,
) -> RunResult:
    """``lar-prec run``: a new analysis folder with its inputs and one run
    (on the device of ``remote``, a :class:`lar_prec.runremote.RemoteSpec`, when given).

    The model, the inputs, the timeout and the flags are checked before the folder is
    claimed, so a usage error (exit 2) leaves nothing behind. Ctrl-C raises
    AnalysisInterrupted (exit 130) naming the folder.
    """
    analysis: Optional[Path] = None
    try:
        cfg = get_config(config)
        timeout = check_timeout(timeout)
        lar_obj = resolve_load_and_run(lar) if remote is None else None
        check_file(model, "model file")
        check_extra_flags(extra_flags)
        planned = plan_inputs(input_specs, model, seed=seed)
        analysis = new_analysis_dir(out, "run")
        prepared = write_inputs(planned, analysis / "inputs")
        if remote is not None:
            with open_sessions(remote, Path(model), prepared) as sessions:  # type: ignore[union-attr]
                return run_once(model, prepared, cfg, analysis, text_dump=text_dump, timeout=timeout,
                                extra_flags=extra_flags, extra_env=extra_env, remote=sessions)
        return run_once(model, prepared, cfg, analysis, lar=lar_obj, text_dump=text_dump, timeout=timeout,
                        extra_flags=extra_flags, extra_env=extra_env)
    except KeyboardInterrupt:
        where = f"; the run folder is kept in {analysis} (see its run.json)" if analysis else " before the run started"
        raise AnalysisInterrupted(f"interrupted{where}", analysis_dir=analysis) from None
