"""What the zoo's tests share: a manifest written from real cases, the zoo command run as a user
runs it, the store's rows of a zoo, and the processes a test must not leave behind."""
from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
from pathlib import Path
from typing import Dict, Iterable, List, Optional, Sequence

from conftest import ROOT


def toml_list(items: Iterable[str]) -> str:
    return "[" + ", ".join(json.dumps(str(i)) for i in items) + "]"


def model_table(case, name: Optional[str] = None) -> str:
    return (f'[[model]]\nname = "{name or case.name}"\npath = {json.dumps(str(case.model))}\n'
            f"inputs = {toml_list(case.input_specs())}\n")


def write_manifest(path: Path, cases: Sequence, body: str, *, zoo: str = "local = false\n") -> Path:
    """A manifest of ``cases`` (absolute paths) and ``body`` (its runs, configs, builds, devices)."""
    path.write_text("[zoo]\n" + zoo + "\n" + "\n".join(model_table(c) for c in cases) + "\n" + body)
    return path


def zoo_cli(args: Sequence, *, env: Optional[Dict[str, str]] = None, timeout: float = 300,
            **kw) -> subprocess.CompletedProcess:
    """The zoo command; without timing unless ``--speed-runs`` is given (tests/zoo/test_zoo_speed.py times)."""
    args = [*args, *(() if "--speed-runs" in map(str, args) else ("--speed-runs", "0"))]
    return subprocess.run([sys.executable, "-m", "lar_prec", "zoo", *map(str, args)], cwd=ROOT, capture_output=True,
                          text=True, timeout=timeout, env={**os.environ, **(env or {})}, **kw)


def store_rows(db: Path) -> List[dict]:
    """Every run row of an SQLite store (uid, exit code, verdict, analysis folder, settings)."""
    con = sqlite3.connect(str(db))
    try:
        con.row_factory = sqlite3.Row
        return [dict(r) for r in con.execute("SELECT uid, exit_code, verdict, analysis_dir, settings, host FROM runs "
                                             "ORDER BY id")]
    finally:
        con.close()


def rows_by_task(db: Path) -> Dict[str, List[dict]]:
    out: Dict[str, List[dict]] = {}
    for r in store_rows(db):
        out.setdefault(r["uid"].rsplit("-", 1)[0][len("zoo-"):], []).append(r)
    return out


def parent(pid: int) -> int:
    """The parent of ``pid`` (0 when it is gone)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_bytes()
    except OSError:
        return 0
    return int(stat[stat.rfind(b")") + 2:].split()[1])


def descendants(pid: int) -> List[int]:
    """Every process below ``pid`` (from /proc)."""
    children: Dict[int, List[int]] = {}
    for e in os.listdir("/proc"):
        if e.isdigit():
            children.setdefault(parent(int(e)), []).append(int(e))
    out, todo = [], [pid]
    while todo:
        for c in children.get(todo.pop(), []):
            out.append(c)
            todo.append(c)
    return out


def cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


def processes_running(needle: str) -> List[int]:
    """Pids whose command line holds ``needle`` (a test's own folder: nothing of another test)."""
    return [int(e) for e in os.listdir("/proc") if e.isdigit() and needle in cmdline(int(e))]
