"""The record of one run (:class:`RunResult`) and the one place that writes its ``run.json``.

A run's record starts ``not_started``, becomes ``running`` when load_and_run is about to
start and ends ``ok``, ``failed``, ``crashed``, ``timeout`` or ``interrupted``. Each step
makes a new frozen record (``dataclasses.replace``); :func:`write_run_json` writes it
atomically, so ``run.json`` always says what happened, even after a crash of lar-prec.
"""
from __future__ import annotations

import contextlib
import datetime as _dt
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Dict, Mapping, Optional, Tuple

from lar_prec.errors import UsageError
from lar_prec.outputs import atomic_write_text, json_text

from lar_prec.records import PathLike  # noqa: E402
from lar_prec.inputspec import read_json_file

RUN_SCHEMA = "lar-prec.run/1"
RUN_JSON = "run.json"
#: statuses a run.json can hold; every one but ``running`` is final
RUN_STATUSES = ("not_started", "running", "ok", "failed", "crashed", "timeout", "stalled", "interrupted")


def now_iso() -> str:
    """The local time, as run.json's ``started`` holds it."""
    return _dt.datetime.now().astimezone().isoformat(timespec="seconds")


@dataclass(frozen=True)
class RunResult:
    """What happened in one run; stored as ``run.json`` in ``dir`` (see :meth:`to_json`).

    The fields after ``error`` describe the run's setting (which load_and_run, model, inputs)
    and default to "unknown", so a record can be made from the contract fields alone.
    """

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
    status: str  # one of RUN_STATUSES
    error: Optional[str] = None
    hint: Optional[str] = None
    config_flags: Tuple[str, ...] = ()
    load_and_run: Mapping[str, Any] = field(default_factory=dict)  # kind, path, source, argv_prefix, version
    megengine_version: Optional[str] = None
    model_path: Optional[str] = None
    model_sha256: Optional[str] = None
    inputs: Tuple[Mapping[str, Any], ...] = ()
    started: str = ""
    timeout: Optional[float] = None
    #: ``(path, sha256)`` of each model an option rewrote and the run executed (bundled runner)
    rewritten_models: Tuple[Tuple[str, str], ...] = ()
    #: where the run ran (runenv.local_environment / remote_environment): host, OS, CPU, binary, MGB_*
    environment: Mapping[str, Any] = field(default_factory=dict)
    #: remote runs only: transport, target, device facts, pushed hashes, device folder (RemoteSession.record)
    remote: Optional[Mapping[str, Any]] = None
    #: a run that dumped the network outputs only (``--bin-out-dump``): that folder
    out_dump: Optional[Path] = None
    #: MegDNN's version as the run's stderr named it (``using MegBrain X(P) and MegDNN Y``)
    megdnn_version: Optional[str] = None
    #: where ``megengine_version`` and ``megdnn_version`` come from: ``stderr`` (the run said
    #: them), ``wheel`` (the bundled runner: the installed wheel), None (not known)
    versions_from: Optional[str] = None
    #: how MegEngine's load_and_run runs the model, from its first 16 bytes: ``mdl`` or ``lite``
    model_mode: Optional[str] = None
    #: a timed run (no dump at all): ``(warmup_iter, iter)`` it was given; None for a dump run
    timed: Optional[Tuple[int, int]] = None

    @property
    def ok(self) -> bool:
        """True when load_and_run exited 0 and its dumps are complete."""
        return self.status == "ok"

    @property
    def dump(self) -> Optional[Path]:
        """The dump of this run: the binary dump folder or the text dump file."""
        return self.text_dump if self.text_dump is not None else self.dump_dir

    @property
    def json_path(self) -> Path:
        """Where this record is stored."""
        return self.dir / RUN_JSON

    def to_json(self) -> Dict[str, Any]:
        """The ``run.json`` object (schema ``lar-prec.run/1``)."""
        env = dict(self.env_changes)
        lar = dict(self.load_and_run)
        if lar.get("argv_prefix") is not None:
            lar["argv_prefix"] = list(lar["argv_prefix"])
        return {
            "schema": RUN_SCHEMA,
            "label": self.label,
            "config": {"name": self.config, "flags": list(self.config_flags), "env": env},
            "status": self.status,
            "argv": list(self.argv),
            "env_changes": env,
            "load_and_run": lar,
            "megengine_version": self.megengine_version,
            "megdnn_version": self.megdnn_version,
            "versions_from": self.versions_from,
            "model": {"path": self.model_path, "sha256": self.model_sha256, "mode": self.model_mode},
            "rewritten_model": ({"path": self.rewritten_models[-1][0], "sha256": self.rewritten_models[-1][1]}
                                if self.rewritten_models else None),
            "inputs": [dict(i) for i in self.inputs],
            "dump_dir": str(self.dump_dir) if self.dump_dir else None,
            "text_dump": str(self.text_dump) if self.text_dump else None,
            "out_dump": str(self.out_dump) if self.out_dump else None,
            "timed": None if self.timed is None else {"warmup_iter": self.timed[0], "iter": self.timed[1]},
            "started": self.started,
            "seconds": self.seconds,
            "returncode": self.returncode,
            "signal": self.signal,
            "timeout": self.timeout,
            "incomplete": self.incomplete,
            "error": self.error,
            "hint": self.hint,
            "stderr_tail": self.stderr_tail,
            "environment": dict(self.environment),
            "remote": None if self.remote is None else dict(self.remote),
        }


def write_run_json(result: RunResult) -> Path:
    """Write ``result`` as its folder's ``run.json`` (atomically: temp file, fsync, rename).

    When the write fails (a full disk), the earlier ``run.json`` is removed and the write tried
    once more, so a folder never keeps a record that says ``running`` for a run that ended.
    Raises UsageError naming the file when even that fails (the folder then has no run.json).
    """
    path = result.json_path
    text = json_text(result.to_json(), indent=2, default=str)
    try:
        return atomic_write_text(path, text, what="run record")
    except UsageError:
        with contextlib.suppress(OSError):
            path.unlink()  # also frees the space the retry needs
        return atomic_write_text(path, text, what="run record")


def read_run_json(run_dir: PathLike) -> Dict[str, Any]:
    """The ``run.json`` of a run folder."""
    path = Path(run_dir) / RUN_JSON
    if not os.path.lexists(path):
        raise UsageError(f"{run_dir} has no run.json")
    return read_json_file(path, "run record", strict=False)  # written before run.json was strict
