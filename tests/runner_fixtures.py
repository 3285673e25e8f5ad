"""Fixtures and helpers of the runner tests (test_runner.py, test_runner_errors.py): a stand-in
load_and_run (tests/fake_lar.py behind a shell wrapper), a model file and inputs for it, small
disks, and the real ``lar-prec`` command in a fresh process."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from lar_prec import runner

FAKE = Path(__file__).resolve().parent / "fake_lar.py"


@pytest.fixture(autouse=True)
def clean_env(monkeypatch):
    """Runs must not depend on the developer's shell."""
    for name in ("LAR_PREC_LOAD_AND_RUN", "MGB_USE_MEGDNN_DBG", "MGB_DUMP_INPUT", "FAKE_LAR_MODE",
                 "FAKE_LAR_SOURCE_DUMP", "FAKE_LAR_SOURCE_TEXT", "FAKE_LAR_RECORD", "FAKE_LAR_CHILD_PID",
                 "FAKE_LAR_VERSION_MODE", "FAKE_LAR_VERSION_CHILD_PID"):
        monkeypatch.delenv(name, raising=False)


@pytest.fixture
def fake_lar(tmp_path, monkeypatch):
    """An executable ``load_and_run`` (shell wrapper around fake_lar.py) and its argv record."""
    bindir = tmp_path / "bin"
    bindir.mkdir()
    wrapper = bindir / "load_and_run"
    wrapper.write_text(f'#!/bin/sh\nexec "{sys.executable}" "{FAKE}" "$@"\n')
    wrapper.chmod(0o755)
    record = tmp_path / "calls.jsonl"
    monkeypatch.setenv("FAKE_LAR_RECORD", str(record))

    class Fake:
        path = wrapper

        @staticmethod
        def calls():
            return [json.loads(line) for line in record.read_text().splitlines()] if record.exists() else []

    return Fake


@pytest.fixture
def model_file(tmp_path):
    """A model file for runs of the fake binary (which never reads it)."""
    p = tmp_path / "model.mge"
    p.write_bytes(b"fake model bytes")
    return p


@pytest.fixture
def prepared(tmp_path):
    x = tmp_path / "x.npy"
    np.save(x, np.arange(6, dtype=np.float32).reshape(2, 3))
    return runner.prepare_inputs([f"data:{x}"], tmp_path / "analysis" / "inputs")


ROOT = Path(__file__).resolve().parent.parent


def lar_prec(*args, cwd=None, env=None, timeout=120) -> subprocess.CompletedProcess:
    """The real ``lar-prec`` command in a fresh process."""
    full = {**os.environ, "PYTHONPATH": str(ROOT), **(env or {})}
    return subprocess.run([sys.executable, "-m", "lar_prec", *map(str, args)], cwd=cwd or ROOT, env=full,
                          capture_output=True, text=True, timeout=timeout)


def assert_one_line_error(code, stderr, *needles):
    """Exit ``code``, ``Error: ...`` first, no traceback of lar-prec, the line names ``needles``."""
    assert "Traceback" not in stderr, stderr
    first = stderr.splitlines()[0] if stderr else ""
    assert first.startswith("Error: "), stderr
    for needle in needles:
        assert needle in first, first
    return first


@pytest.fixture
def small_disk(tmp_path):
    """``small_disk(options)`` mounts a tmpfs (e.g. ``size=64k`` or ``ro``) and returns it."""
    mnt = tmp_path / "disk"
    mnt.mkdir()
    mounted = []

    def mount(options: str) -> Path:
        proc = subprocess.run(["mount", "-t", "tmpfs", "-o", options, "tmpfs", str(mnt)], capture_output=True,
                              text=True)
        if proc.returncode != 0:
            pytest.skip(f"cannot mount a tmpfs here: {proc.stderr.strip()}")
        mounted.append(mnt)
        return mnt

    yield mount
    for m in mounted:
        subprocess.run(["umount", "-l", str(m)], capture_output=True)


@pytest.fixture
def npy_input(tmp_path):
    x = tmp_path / "x.npy"
    np.save(x, np.arange(6, dtype=np.float32))
    return f"data:{x}"
