"""A manifest expanded into tasks: one analysis of one model on one build on one device.

A task's id is a hash of what it runs (model, input and float-model sha256, command, options,
configuration flags, the command's settings, seed, build identity, device), never of names or
time: the same manifest on the same files and build gives the same ids, so a retry or a second
run of the zoo finds what the store already holds (``zoo-<id>-<sample>`` is the run's uid there).

Expansion (docs/zoo.md): every model x run x configuration x option (naive-vs-default and shake:
one task per option; sweep: one task trying them all) x build x device, where the bundled build,
``mixed`` and ``quant`` run on local devices only and a run's or build's ``devices`` limits it.
"""
from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence, Tuple

from lar_prec import __version__
from lar_prec.inputspec import split_input
from lar_prec.outputs import sha256_file
from lar_prec.run.config import megengine_version
from lar_prec.workflows.sweep.options import OPTIONS
from lar_prec.zoo.manifest import FLAGGED, Manifest, ManifestError, ZooBuild, ZooConfig, ZooDevice, ZooModel, ZooRun


@dataclass(frozen=True)
class Task:
    """Everything a worker needs to run one analysis (plain values: it travels to the worker)."""

    id: str
    model: str
    model_path: str
    inputs: Tuple[str, ...]
    command: str
    options: Tuple[str, ...]
    config: str
    flags: Tuple[str, ...]
    build: str
    lar: Optional[str]  # None: the bundled load_and_run
    device: str
    remote: Optional[str]
    remote_dir: Optional[str]
    resource: Optional[str]
    params: Tuple[Tuple[str, Any], ...]
    local: bool
    timeout: float
    seed: int
    identity: Tuple[Tuple[str, Any], ...]  # what the id hashes (also kept in the store's settings)
    float_path: Optional[str] = None

    @property
    def column(self) -> str:
        """The page's column: the analysis and its configuration."""
        opts = f" {','.join(self.options)}" if self.options else ""
        return f"{self.command}{opts} \u00b7 {self.config}"

    @property
    def label(self) -> str:
        return f"{self.model} \u00b7 {self.column} \u00b7 {self.build} \u00b7 {self.device}"

    def param(self, key: str, default: Any = None) -> Any:
        return dict(self.params).get(key, default)

    def to_json(self) -> Dict[str, Any]:
        return {"id": self.id, "model": self.model, "command": self.command, "options": list(self.options),
                "config": self.config, "flags": list(self.flags), "build": self.build, "device": self.device,
                "column": self.column}


class _Hashes:
    """sha256 of each file once per expansion (a model is in many tasks)."""

    def __init__(self) -> None:
        self.done: Dict[str, str] = {}

    def file(self, path: "str | Path") -> str:
        key = str(path)
        if key not in self.done:
            self.done[key] = sha256_file(path)
        return self.done[key]

    def inputs(self, items: Sequence[str]) -> str:
        parts = []
        for it in split_input(";".join(items)):
            value = self.file(it.text) if it.kind in ("npy", "json", "image") else it.text
            parts.append(f"{it.name}={value}")
        return hashlib.sha256(";".join(parts).encode()).hexdigest()


def build_identity(build: ZooBuild, hashes: _Hashes) -> str:
    """The build as the task id sees it: the bundled runner by lar-prec's and MegEngine's versions;
    a binary by its path and, where this machine can read it, its sha256 (a binary on a device is
    named by its path: the store records what the device reports)."""
    if build.bundled:
        return f"bundled lar-prec {__version__} megengine {megengine_version()}"
    try:
        return f"path {build.path} sha256 {hashes.file(str(build.path))}"
    except OSError:
        return f"path {build.path}"


def task_id(identity: Sequence[Tuple[str, Any]]) -> str:
    text = json.dumps(dict(identity), sort_keys=True, separators=(",", ":"), default=str, allow_nan=False)
    return hashlib.sha256(text.encode()).hexdigest()[:32]


def _models_of(run: ZooRun, models: Sequence[ZooModel], where: str) -> List[ZooModel]:
    chosen = [m for m in models if run.models is None or m.name in run.models]
    if run.command == "quant":
        without = [m.name for m in chosen if m.float_path is None]
        if run.models is not None and without:
            raise ManifestError(f"{where}: quant needs the float model of {without[0]!r} (its [[model]] has no `float`)")
        chosen = [m for m in chosen if m.float_path is not None]
        if not chosen:
            raise ManifestError(f"{where}: quant needs a [[model]] with `float` (the float model it was quantized from)")
    return chosen


def _option_sets(run: ZooRun) -> List[Tuple[str, ...]]:
    if run.command == "sweep":
        return [run.options]  # () = the default set of the worker's CPU
    if run.command in ("naive-vs-default", "shake"):
        return [(o,) for o in run.options] or [()]
    return [()]


def _runs_on(run: ZooRun, build: ZooBuild, device: ZooDevice) -> bool:
    if run.devices is not None and device.name not in run.devices:
        return False
    if build.devices is not None and device.name not in build.devices:
        return False
    if device.remote is not None and (build.bundled or run.command not in FLAGGED):
        return False  # the bundled runner, mixed and quant run on the worker's own machine
    return True


def expand(manifest: Manifest) -> List[Task]:
    """Every task of the manifest, in manifest order (model, run, configuration, option, build, device).

    Raises ManifestError when a run has no task at all (its models, builds and devices never meet).
    """
    hashes = _Hashes()
    builds = {b.name: build_identity(b, hashes) for b in manifest.builds}
    tasks: List[Task] = []
    seen: Dict[str, str] = {}
    for i, run in enumerate(manifest.runs, 1):
        where = f"{manifest.path}: [[run]] #{i} ({run.command})"
        before = len(tasks)
        configs: Sequence[ZooConfig] = ([c for c in manifest.configs if run.configs is None or c.name in run.configs]
                                        if run.command in FLAGGED else [ZooConfig("default")])
        local = manifest.local if run.local is None else run.local
        for m in _models_of(run, manifest.models, where):
            model_sha, input_sha = hashes.file(m.path), hashes.inputs(m.inputs)
            float_sha = hashes.file(m.float_path) if m.float_path else None
            for cfg in configs:
                for opts in _option_sets(run):
                    for b in manifest.builds:
                        for d in manifest.devices:
                            if not _runs_on(run, b, d):
                                continue
                            identity = (("model", model_sha), ("input", input_sha), ("float", float_sha),
                                        ("command", run.command), ("options", list(opts)),
                                        ("option_flags", [f for o in opts for f in OPTIONS[o].flags]),
                                        ("flags", list(cfg.flags)), ("params", dict(run.params)), ("local", local),
                                        ("seed", manifest.seed), ("build", builds[b.name]),
                                        ("device", d.remote or "local"))
                            tid = task_id(identity)
                            label = f"{m.name} {run.command} {','.join(opts)} {cfg.name} {b.name} {d.name}"
                            if tid in seen:
                                raise ManifestError(f"{where}: the task {label} runs exactly what {seen[tid]} runs "
                                                    "(same files, command, flags, build and device)")
                            seen[tid] = label
                            tasks.append(Task(
                                tid, m.name, str(m.path), m.inputs, run.command, opts, cfg.name, cfg.flags, b.name,
                                b.path, d.name, d.remote, d.remote_dir, d.resource, run.params, local,
                                run.timeout or manifest.timeout, manifest.seed, identity,
                                str(m.float_path) if m.float_path else None))
        if len(tasks) == before:
            raise ManifestError(f"{where}: no task: its models, builds and devices never meet (the bundled build, "
                                "mixed and quant run on local devices only)")
    return tasks
