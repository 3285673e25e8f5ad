"""Every JSON file lar-prec writes is strict (issue 41 #7): no ``NaN`` or ``Infinity``, which
JSON itself does not have and other readers (browsers, jq, Go, Rust) refuse.

How every report the suite writes is checked: each writer encodes with ``allow_nan=False``
(``outputs.json_text`` for records, the report's stream encoder, the page's data), so a
non-finite number never reaches a file: it fails the command that would write it, and with it
the test that ran the command, on whichever xdist worker. Scanning the files after the tests
instead cannot tell lar-prec's files from the hostile ones tests write on purpose. This test
keeps the writers so (a new ``json.dumps`` without it fails here); a value that may be
non-finite is written as null with a key that says why (``nonfinite``, ``snr_note``), and
``tests/workflows/test_quant.py`` runs the command that wrote ``Infinity`` and reads every JSON
file of its analysis back strictly.
"""
from __future__ import annotations

import ast
import json
from pathlib import Path
from typing import Any, List

from conftest import ROOT


def strict_load(path: Path) -> Any:
    """``path`` read as strict JSON: ValueError on NaN/Infinity."""
    def refuse(name: str) -> Any:
        raise ValueError(f"{path}: {name} is not JSON")
    return json.loads(path.read_text(), parse_constant=refuse)


def _encoders(tree: ast.AST) -> List[ast.Call]:
    """Calls of json.dumps, json.dump and json.JSONEncoder."""
    return [n for n in ast.walk(tree) if isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute)
            and isinstance(n.func.value, ast.Name) and n.func.value.id == "json"
            and n.func.attr in ("dumps", "dump", "JSONEncoder")]


#: JSON that is no file: the store's columns (its own stage, read back by it alone)
NOT_FILES = ("lar_prec/store/",)


def test_every_json_writer_of_the_package_refuses_nan_and_infinity():
    loose = []
    for p in sorted((ROOT / "lar_prec").rglob("*.py")):
        if str(p.relative_to(ROOT)).startswith(NOT_FILES):
            continue
        for call in _encoders(ast.parse(p.read_text())):
            strict = any(k.arg == "allow_nan" and isinstance(k.value, ast.Constant) and k.value.value is False
                         for k in call.keywords)
            if not strict:
                loose.append(f"{p.relative_to(ROOT)}:{call.lineno}")
    assert loose == [], f"JSON written without allow_nan=False (use lar_prec.outputs.json_text): {loose}"


#: what reads JSON without the one reader, and why: the store's columns (its own stage, written by
#: it alone), MegEngine's operator params (strings in a model the reader loaded), the bundled
#: load_and_run's own stdout, and repro.json, read with its own bounds before anything of a
#: repro folder is trusted (issue 54: every file a command reads goes through
#: ``inputspec.read_json_file``, which refuses FIFOs and devices, bounds the size, checks UTF-8
#: and turns a nesting too deep for the parser into one line)
OWN_READERS = {
    "lar_prec/inputspec.py": 1, "lar_prec/diagnosis/repro_check.py": 1, "lar_prec/run/inputs.py": 1,
    "lar_prec/lar/quant_rewrite.py": 1, "lar_prec/lar/graph_records.py": 1, "lar_prec/lar/layerwise_build.py": 1,
}


def test_every_json_file_is_read_through_the_one_bounded_reader():
    found = {}
    for p in sorted((ROOT / "lar_prec").rglob("*.py")):
        rel = str(p.relative_to(ROOT))
        if rel.startswith(NOT_FILES):
            continue
        calls = [n for n in ast.walk(ast.parse(p.read_text())) if isinstance(n, ast.Call)
                 and isinstance(n.func, ast.Attribute) and isinstance(n.func.value, ast.Name)
                 and n.func.value.id == "json" and n.func.attr in ("load", "loads")]
        if calls:
            found[rel] = len(calls)
    assert found == OWN_READERS, "read a JSON file with lar_prec.inputspec.read_json_file"
