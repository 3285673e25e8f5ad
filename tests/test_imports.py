"""The house's shape: what importing lar_prec pulls in, layers that import only downward, no
import circle, every module documented, the documented import paths, and the entry points.

Walks every module under lar_prec/ (recursively): a module that moves or disappears fails a
test here; nothing is skipped for being missing.
"""
from __future__ import annotations

import ast
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path


from conftest import ROOT

PKG = ROOT / "lar_prec"
#: the modules the project was specified with (and users import): they must exist
SPECIFIED = ("lar_prec.runner", "lar_prec.iodump", "lar_prec.vartree")

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


def _module_name(p: Path) -> str:
    parts = p.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def all_modules() -> list:
    return sorted(_module_name(p) for p in PKG.rglob("*.py") if "__pycache__" not in p.parts)


def subpackages() -> list:
    return sorted(p.parent.relative_to(PKG).as_posix() for p in PKG.rglob("__init__.py")
                  if p.parent != PKG and "__pycache__" not in p.parts)


def test_the_walk_finds_the_stage_folders_and_the_specified_modules():
    mods = all_modules()
    assert len(mods) > 60, mods
    for m in SPECIFIED:
        assert m in mods, f"{m} is missing: the project was specified with it and users import it"
    assert {"dumps", "run", "lar", "remote", "compare", "compare/engine", "diagnosis", "report",
            "workflows", "workflows/shake", "workflows/sweep", "cli"} <= set(subpackages())


def test_import_lar_prec_pulls_in_neither_megengine_nor_click():
    proc = _py("import sys, lar_prec; bad = [m for m in ('megengine', 'megenginelite', 'click') if m in sys.modules]; print(bad)")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "[]"


def test_every_module_imports_alone_without_megengine():
    """megengine is imported only where a model is run, built or rewritten, and only then:
    each module, imported first in a fresh interpreter, needs none of it (and none of them
    depends on another being imported before it)."""
    def one(m: str):
        return m, _py(BLOCK_MEGENGINE + f"import {m}; print('ok')")

    with ThreadPoolExecutor(2) as ex:
        bad = {m: p.stderr.strip().splitlines()[-1:] for m, p in ex.map(one, all_modules())
               if p.returncode or p.stdout.strip() != "ok"}
    assert bad == {}


def test_remote_and_dump_modules_need_neither_numpy_nor_click():
    """The device side and the dump readers start without numpy (it is imported on first use)."""
    mods = [m for m in all_modules() if m.startswith(("lar_prec.remote", "lar_prec.run.device"))]
    block = BLOCK_MEGENGINE.replace("('megengine', 'megenginelite')", "('megengine', 'megenginelite', 'numpy', 'click')")
    proc = _py(block + "".join(f"import {m}\n" for m in mods) + "from lar_prec.dumps.folder import DumpFolder\nprint('ok')")
    assert proc.returncode == 0 and proc.stdout.strip() == "ok", proc.stderr[-1500:]


def test_layers_only_import_downward():
    """The layers contract of pyproject.toml ([tool.importlinter]), checked by import-linter:
    cli > workflows > report > diagnosis > compare | run > remote | lar > dumps > shared."""
    exe = Path(sys.executable).with_name("lint-imports")
    assert exe.exists(), "import-linter is a test dependency (pip install -e '.[test]')"
    proc = subprocess.run([str(exe), "--config", str(ROOT / "pyproject.toml")], cwd=ROOT, capture_output=True,
                          text=True, timeout=300)
    assert proc.returncode == 0 and "3 kept, 0 broken" in proc.stdout, proc.stdout[-3000:]


def _cycles(edges) -> list:
    import networkx as nx

    dg = nx.DiGraph()
    for m, imported in edges.items():
        dg.add_node(m)
        dg.add_edges_from((m, i) for i in imported)
    return list(nx.simple_cycles(dg))


def test_no_import_circle_at_all():
    """Not even inside one layer, and not through a TYPE_CHECKING or function-local import:
    in lar_prec, in cases/ (whose modules build the models) and among bench/'s scripts."""
    import grimp

    for pkg in ("lar_prec", "cases"):
        g = grimp.build_graph(pkg)
        assert _cycles({m: g.find_modules_directly_imported_by(m) for m in g.modules}) == [], pkg
    # bench/ is a folder of scripts (each puts bench/ on sys.path): its imports by bare name
    bench = {p.stem: p for p in (ROOT / "bench").glob("*.py")}
    edges = {}
    for name, path in bench.items():
        found = set()
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                found |= {a.name.split(".")[0] for a in node.names}
            elif isinstance(node, ast.ImportFrom) and not node.level and node.module:
                found.add(node.module.split(".")[0])
        edges[name] = found & set(bench)
    assert _cycles(edges) == [], "bench/"


def test_every_module_is_under_650_lines():
    """The house rule: a module that outgrows it is split along a seam."""
    files = [p for top in ("lar_prec", "cases", "bench", "scripts", "tests") for p in (ROOT / top).rglob("*.py")
             if "__pycache__" not in p.parts and p.is_file() and "build" not in p.relative_to(ROOT).parts[1:2]]
    long = {str(p.relative_to(ROOT)): n for p in files if (n := len(p.read_text().splitlines())) >= 650}
    assert long == {}


def _in_cli(path: Path) -> bool:
    """A module of the command-line package ``lar_prec/cli/``."""
    return path.relative_to(PKG).parts[0] == "cli"


def _local_imports(path: Path):
    tree = ast.parse(path.read_text())
    for fn in ast.walk(tree):
        if isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
            for node in ast.walk(fn):
                if isinstance(node, (ast.Import, ast.ImportFrom)):
                    yield node


def test_function_local_imports_are_lazy_loads_with_a_reason():
    """A module's header tells what it depends on: lar-prec modules are imported at the top,
    except by cli/ (each command loads its workflow on use, so --help stays fast) and the
    optional C kernel. Function-local imports of heavy third-party modules say why."""
    stdlib = set(sys.stdlib_module_names)
    problems = []
    for p in PKG.rglob("*.py"):
        lines = p.read_text().splitlines()
        for node in _local_imports(p):
            mod = (node.module or "") if isinstance(node, ast.ImportFrom) else node.names[0].name
            where = f"{p.relative_to(ROOT)}:{node.lineno}"
            if mod.startswith("lar_prec") and not _in_cli(p) and mod != "lar_prec.compare.engine":
                problems.append(f"{where}: function-local import of {mod}")
            elif mod.split(".")[0] not in stdlib and not mod.startswith("lar_prec"):
                k = node.lineno - 1  # the comment may stand above a group of such imports
                while k > 0 and lines[k - 1].strip().startswith(("import ", "from ")) and "#" not in lines[k]:
                    k -= 1
                said = "#" in lines[k] or lines[k - 1].strip().startswith("#")
                if not said:
                    problems.append(f"{where}: function-local import of {mod} without a one-line reason")
    assert problems == []


def test_click_is_imported_only_by_cli():
    offenders = [str(p.relative_to(ROOT)) for p in PKG.rglob("*.py")
                 if not _in_cli(p) and ("import click" in p.read_text() or "from click" in p.read_text())]
    assert offenders == []


def test_every_module_is_in_the_architecture_page():
    page = (ROOT / "docs" / "architecture.md").read_text()
    files = [p.relative_to(PKG).as_posix() for p in PKG.rglob("*.py") if "__pycache__" not in p.parts]
    files += [p.relative_to(PKG).as_posix() for p in PKG.rglob("*.c")]
    missing = sorted(f for f in files if f"`{f}`" not in page)
    assert missing == [], "docs/architecture.md does not name these files of lar_prec/"


def test_tests_mirror_the_subpackages():
    for sub in subpackages():
        top = sub.split("/")[0]
        # command-line tests stay at tests/ itself (docs/architecture.md): tests/test_cli_*.py
        folder, pattern = (ROOT / "tests", "test_cli_*.py") if top == "cli" else (ROOT / "tests" / top, "test_*.py")
        assert folder.is_dir() and any(folder.glob(pattern)), f"{folder.relative_to(ROOT)}/ has no {pattern}"


def test_the_import_paths_the_readme_documented_keep_working():
    """The README's examples before the stage folders: every one still imports, and a name of
    the package is always the function it names (issue 20: after importing naive_vs_default,
    ``from lar_prec import sweep`` gave the module, not callable)."""
    code = ("import inspect\n"
            "from lar_prec import naive_vs_default, shake, VarTree\n"
            "from lar_prec import sweep\n"
            "assert inspect.isfunction(sweep) and inspect.isfunction(naive_vs_default) and inspect.isfunction(shake)\n"
            "from lar_prec import compare_folders, DumpFolder, Report, run_once, RemoteSpec, parse_targets\n"
            "assert inspect.isfunction(compare_folders) and inspect.isclass(RemoteSpec)\n"
            "from lar_prec.runremote import RemoteSpec as R2\n"
            "from lar_prec.workflows import naive_vs_default as n2, shake as s2, sweep as w2\n"
            "assert n2 is naive_vs_default and s2 is shake and w2 is sweep and R2 is RemoteSpec\n"
            "from lar_prec.devices import devices, parse_targets as p2\n"
            "assert inspect.isfunction(devices) and p2 is parse_targets\n"
            "from lar_prec.vartree import parse, varNode, VarTree as V2\n"
            "assert V2 is VarTree and inspect.isclass(varNode) and inspect.isfunction(parse)\n"
            "from lar_prec.iodump import DumpFolder as D2, read_binary_dump, read_text_dump, write_binary_dump\n"
            "from lar_prec.runner import run_once as r2, RunConfig, prepare_inputs, resolve_load_and_run\n"
            "assert D2 is DumpFolder and r2 is run_once\n"
            "import lar_prec\n"
            "assert inspect.isfunction(lar_prec.workflows.sweep)\n"
            "print('ok')\n")
    proc = _py(code)
    assert proc.returncode == 0 and proc.stdout.strip() == "ok", proc.stderr[-2000:]


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


def test_bundled_load_and_run_runs_as_a_module():
    proc = subprocess.run([sys.executable, "-m", "lar_prec.lar", "--version"], cwd=ROOT, capture_output=True,
                          text=True, timeout=60)
    assert proc.returncode == 0 and proc.stdout == "load_and_run version 1.0\n", proc.stderr


def test_every_command_has_help_and_is_in_the_readme():
    from lar_prec.cli import cli

    readme = (ROOT / "README.md").read_text()
    assert set(cli.commands) >= {"naive-vs-default", "shake", "compare", "tree", "run", "sweep", "devices", "replay"}
    for name, cmd in cli.commands.items():
        assert (cmd.help or "").strip(), f"lar-prec {name} has no help text"
        assert f"lar-prec {name}" in readme, f"README does not show lar-prec {name}"
