"""The bundled load_and_run imports megenginelite without megfile and pkg_resources (~0.4 s of
every run), and megenginelite's own check of the installed packages still sees them."""
from __future__ import annotations

import importlib.metadata
import json
import os
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
MODEL = ROOT / "cases" / "build" / "cnn" / "model.mge"

_PROBE = """
import json, sys
from lar_prec.lar.main import _Lite, describe_model
lite = _Lite()
io = describe_model(sys.argv[1])
print(json.dumps({"modules": sorted(m for m in ("megfile", "boto3", "pkg_resources") if m in sys.modules),
                  "inputs": [i["name"] for i in io["inputs"]], "version": lite.version()}))
"""


def _probe(*, extra_path: str = "") -> subprocess.CompletedProcess:
    env = dict(os.environ)
    if extra_path:
        env["PYTHONPATH"] = os.pathsep.join(p for p in (extra_path, env.get("PYTHONPATH", "")) if p)
    return subprocess.run([sys.executable, "-c", _PROBE, str(MODEL)], cwd=ROOT, env=env, capture_output=True,
                          text=True, timeout=300)


def test_lite_loads_a_model_without_megfile_or_pkg_resources():
    proc = _probe()
    assert proc.returncode == 0, proc.stderr
    got = json.loads(proc.stdout)
    assert got["modules"] == []  # the stand-ins left sys.modules, the real ones were never imported
    assert got["inputs"] == ["data"]  # the model was read through the file the lar opened
    assert got["version"].startswith("1.13")


def test_the_package_list_is_what_importlib_metadata_says():
    from lar_prec.lar.quickimport import _installed

    def key(name: str) -> str:
        return re.sub(r"[^A-Za-z0-9.]+", "-", name).lower()

    expected = {key(d.metadata["Name"]) for d in importlib.metadata.distributions()}
    assert {p.key for p in _installed()} == expected
    assert "megengine" in expected


def test_megenginelite_still_refuses_megbrain_installed_beside_megengine(tmp_path):
    (tmp_path / "megbrain-1.0.dist-info").mkdir()
    proc = _probe(extra_path=str(tmp_path))
    assert proc.returncode != 0
    assert "Your python packages may be corrupted" in proc.stderr


def test_a_megenginelite_asking_more_of_them_gets_the_real_modules(tmp_path):
    # another megenginelite version might use more of megfile or pkg_resources than the
    # stand-ins have: it is imported again with the real ones
    pkg = tmp_path / "megenginelite"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("import pkg_resources\nVERSION = pkg_resources.get_distribution('numpy').version\n"
                                     "import megfile.fs\n")
    (pkg / "tensor.py").write_text("")
    code = ("import sys\nfrom lar_prec.lar.main import _import_lite\nL, LT = _import_lite()\n"
            "print(L.__file__, L.VERSION, hasattr(sys.modules['pkg_resources'], 'get_distribution'))")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in (str(tmp_path), os.environ.get("PYTHONPATH")) if p)}
    proc = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    where, version, real = proc.stdout.split()
    assert where == str(pkg / "__init__.py") and version[0].isdigit() and real == "True"
