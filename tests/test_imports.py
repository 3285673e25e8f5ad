"""Packaging contracts: what importing lar_prec pulls in, and the entry points."""
from __future__ import annotations

import subprocess
import sys

import pytest

from conftest import ROOT

BLOCK_MEGENGINE = (
    "import sys\n"
    "class Block:\n"
    "    def find_spec(self, name, path=None, target=None):\n"
    "        if name.split('.')[0] in ('megengine', 'megenginelite'):\n"
    "            raise ImportError('megengine blocked by test: ' + name)\n"
    "sys.meta_path.insert(0, Block())\n"
)


def _py(code: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120)


def test_import_lar_prec_pulls_in_neither_megengine_nor_click():
    proc = _py("import sys, lar_prec; bad = [m for m in ('megengine', 'megenginelite', 'click') if m in sys.modules]; print(bad)")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "[]"


@pytest.mark.parametrize("module", ["iodump", "compare", "vartree", "report", "runner", "cli"])
def test_analysis_modules_work_without_megengine(module):
    proc = _py(BLOCK_MEGENGINE + f"import importlib; importlib.import_module('lar_prec.{module}'); print('ok')")
    if "No module named 'lar_prec." + module in proc.stderr:
        pytest.skip(f"lar_prec.{module} not written yet")
    assert proc.returncode == 0 and proc.stdout.strip() == "ok", proc.stderr[-1500:]


def test_click_is_imported_only_by_cli():
    offenders = [p.name for p in (ROOT / "lar_prec").glob("*.py")
                 if p.name != "cli.py" and "import click" in p.read_text()]
    assert offenders == []


def test_version_and_help_through_console_script_and_module():
    from lar_prec import __version__

    exe = ROOT / ".venv" / "bin" / "lar-prec"
    runs = [[sys.executable, "-m", "lar_prec"]]
    if exe.exists():
        runs.append([str(exe)])
    for argv in runs:
        v = subprocess.run(argv + ["--version"], capture_output=True, text=True, timeout=60)
        assert v.returncode == 0 and __version__ in v.stdout, v.stderr
        h = subprocess.run(argv + ["--help"], capture_output=True, text=True, timeout=60)
        assert h.returncode == 0 and "Exit codes" in h.stdout, h.stderr


def test_help_does_not_import_megengine():
    proc = _py(BLOCK_MEGENGINE + "import sys\nsys.argv=['lar-prec','--help']\nfrom lar_prec.cli import main\n"
               "try:\n    main()\nexcept SystemExit as e:\n    print('exit', e.code)\n")
    assert "exit 0" in proc.stdout, proc.stderr[-1500:]


def test_every_command_has_help_and_is_in_the_readme():
    from lar_prec.cli import cli

    readme = (ROOT / "README.md").read_text()
    assert set(cli.commands) >= {"naive-vs-default", "shake", "compare", "tree", "run"}
    for name, cmd in cli.commands.items():
        assert (cmd.help or "").strip(), f"lar-prec {name} has no help text"
        assert f"lar-prec {name}" in readme, f"README does not show lar-prec {name}"
