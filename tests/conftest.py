"""Shared fixtures: the real cases built by ``cases/build.py`` and real dumps of them.

Dumps come from real runs of the bundled load_and_run (``python -m lar_prec.lar``, which runs
the MegEngine runtime through megenginelite), each in a fresh process because
MGB_USE_MEGDNN_DBG is read once per process. They are cached for the whole session (of each
pytest-xdist worker: `make test` runs tests on every core (one worker more), so no test may share a file, port
or server with another; each makes its own under tmp_path).
"""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Dict, Iterable, Optional, Tuple

import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from cases import BUILD_DIR, Case, load_manifest  # noqa: E402

# A suite started in the background of a shell without job control inherits SIGINT ignored, and
# so would every command the Ctrl-C tests start: Python's own handler again (children get SIG_DFL).
if signal.getsignal(signal.SIGINT) == signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)

CONFIG_ENV = {"naive": {"MGB_USE_MEGDNN_DBG": "2"}, "default": {}, "reproducible": {}, "fast-run": {}}
CONFIG_FLAGS = {"naive": (), "default": (), "reproducible": ("--reproducible",), "fast-run": ("--fast-run",)}


@pytest.fixture(scope="session")
def manifest() -> Dict[str, Case]:
    """The built cases; builds them when `make` has not (e.g. pytest run by hand)."""
    if not (BUILD_DIR / "manifest.json").exists():
        subprocess.run([sys.executable, "-m", "cases.build", "--out", str(BUILD_DIR)], cwd=ROOT, check=True)
    return load_manifest()


def run_lar(model: Path, inputs: Iterable[str], out: Path, *, text: bool = False,
            env: Optional[Dict[str, str]] = None, flags: Tuple[str, ...] = (),
            check: bool = True) -> subprocess.CompletedProcess:
    """One real run of the bundled load_and_run with a binary (or, with ``text``, a text) dump."""
    argv = [sys.executable, "-m", "lar_prec.lar", str(model), "--input", ";".join(inputs),
            "--iter", "1", "--warmup-iter", "0", *flags]
    if text:
        argv += ["--io-dump", str(out)]
    else:
        out.mkdir(parents=True, exist_ok=True)
        argv += ["--bin-io-dump", str(out)]
    full_env = {**os.environ, **(env or {})}
    proc = subprocess.run(argv, cwd=ROOT, env=full_env, capture_output=True, text=True, timeout=300)
    if check and proc.returncode != 0:
        raise AssertionError(f"load_and_run failed ({proc.returncode}): {' '.join(argv)}\n{proc.stderr[-2000:]}")
    return proc


@pytest.fixture(scope="session")
def lar_dump(manifest, tmp_path_factory):
    """``lar_dump(case, config="default", text=False, env=None, flags=(), tag="")`` -> dump path.

    config is one of naive, default, reproducible, fast-run. Results are cached per argument
    set; use a different ``tag`` to get an independent second run of the same configuration.
    """
    cache: Dict[tuple, Path] = {}
    base = tmp_path_factory.mktemp("lar_dumps")

    def make(case: str, config: str = "default", text: bool = False, env: Optional[Dict[str, str]] = None,
             flags: Tuple[str, ...] = (), tag: str = "") -> Path:
        key = (case, config, text, tuple(sorted((env or {}).items())), tuple(flags), tag)
        if key not in cache:
            c = manifest[case]
            name = f"{case}-{config}{'-' + tag if tag else ''}-{len(cache)}"
            out = base / (name + ".txt" if text else name)
            run_lar(c.model, c.input_specs(), out, text=text,
                    env={**CONFIG_ENV[config], **(env or {})}, flags=CONFIG_FLAGS[config] + tuple(flags))
            cache[key] = out
        return cache[key]

    return make


def _real_lar() -> Tuple[Optional[Path], str]:
    """(MegEngine 1.13's own load_and_run as `make real-lar` built it, or None and why not)."""
    proc = subprocess.run(["bash", str(ROOT / "scripts" / "real-lar.sh"), "path"], cwd=ROOT, capture_output=True,
                          text=True, timeout=60)
    folder = proc.stdout.strip()
    if proc.returncode != 0 or not folder:
        src = os.environ.get("LAR_PREC_REAL_LAR_SRC", "../shared/real-lar")
        return None, f"no {src} (the real load_and_run's sources) beside this checkout"
    binary = Path(folder) / "load_and_run"
    if not (Path(folder) / ".built").exists() or not os.access(binary, os.X_OK):
        log = Path(folder) / "build.log"
        return None, (f"the real load_and_run is not built in {folder} (make real-lar"
                      + (f"; its last build failed, see {log})" if log.exists() else ")"))
    return binary, ""


@pytest.fixture(scope="session")
def real_lar() -> Path:
    """MegEngine 1.13's own C++ load_and_run (``make real-lar``). Without it the test skips
    with the reason; under CI=true it fails: CI must run these tests."""
    binary, why = _real_lar()
    if binary is None:
        if os.environ.get("CI") == "true":
            pytest.fail(f"CI=true and {why}", pytrace=False)
        pytest.skip(why)
    return binary


def pytest_collection_modifyitems(config, items):
    """The tests marked slow (the docs' examples, every option on every case: minutes each)
    first, the rest in collection order: started last, one of them kept a worker busy alone
    while the other had nothing left (make test on 2 cores)."""
    items.sort(key=lambda item: 0 if item.get_closest_marker("slow") else 1)


#: how a report written by lar-prec's own writer starts (report/model.py streams the keys in order);
#: a test's hand-made or deliberately broken JSON (json.dumps) does not start so
_WRITTEN_REPORT = b'{\n "schema": "lar-prec.report/1"'


@pytest.fixture(autouse=True)
def _reports_conform_to_the_schema(request):
    """Every report.json (or --json report) a test's command wrote under its tmp_path conforms to
    the JSON Schema ``lar-prec schema`` prints (issue 53): checked after the test, a mismatch is
    an error of that test."""
    if "tmp_path" not in request.fixturenames:
        yield
        return
    tmp = request.getfixturevalue("tmp_path")
    yield
    from lar_prec.report.schema import report_schema, schema_errors

    bad, schema = [], None
    for p in tmp.rglob("*.json"):
        if not p.is_file():
            continue  # a FIFO or a device a hostile-file test made: opening it would block
        try:
            with open(p, "rb") as f:
                if f.read(len(_WRITTEN_REPORT)) != _WRITTEN_REPORT:
                    continue
            doc = json.loads(p.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            continue  # a report still being written by a command the test killed
        schema = schema or report_schema()
        errs = schema_errors(doc, schema, limit=3)
        if errs:
            bad.append(f"{p}: {'; '.join(errs)}")
    assert not bad, "reports that do not conform to `lar-prec schema`:\n" + "\n".join(bad)
