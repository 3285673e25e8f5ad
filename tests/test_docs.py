"""Every command line and Python example of README.md and docs/*.md runs, on the cases `make
demo` builds (issue 19: no page drifts from the code).

Conventions of the pages: in ```console blocks a command is a line starting with ``$ ``; in
```sh blocks, a line starting with ``lar-prec``, ``python`` or ``adb`` (``\\`` continues it);
```python blocks are run whole. A trailing ``# exit N[,M]`` gives the exit codes it may end
with (default 0); ``# not run: why`` marks the few that need a device or a fault (counted,
bounded). Output paths live under ``/tmp/lar-prec-docs``, which the test replaces by a
folder of its own; pages run in reading order (the README first), so a page may use what an
earlier one made.
"""
from __future__ import annotations

import os
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import List, Optional, Tuple

import pytest

from conftest import ROOT

PAGES = ["README.md", "docs/triage.md", "docs/sweep.md", "docs/jitter.md", "docs/jitter-causes.md", "docs/local-error.md", "docs/reduce.md", "docs/devices.md", "docs/environments.md", "docs/api.md",
         "docs/json.md", "docs/mixed-precision.md", "docs/history.md", "docs/zoo.md", "docs/security.md", "docs/setup.md", "docs/troubleshooting.md", "docs/threshold.md",
         "docs/real-load-and-run.md", "docs/architecture.md", "docs/environment.md"]
DOCS_TMP = "/tmp/lar-prec-docs"
#: at most this many command lines may be marked "not run" (devices, faults)
MAX_NOT_RUN = 12
_FENCE = re.compile(r"^```(\w*)\s*$")
_EXIT = re.compile(r"\s+#\s*exit\s+([0-9,\s]+)$")
_NOT_RUN = re.compile(r"#\s*not run:\s*(.+)$")


@dataclass(frozen=True)
class Example:
    page: str
    line: int
    kind: str  # "shell" | "python"
    text: str
    exits: Tuple[int, ...]
    not_run: Optional[str]
    #: the output the page shows under the command (console blocks), its first line the verdict line
    shown: Tuple[str, ...] = ()


#: a measured value in a sample output: a number with a fraction or an exponent, or a count the
#: page writes ``~N`` (one that varies from run to run: jitter); other counts stay exact
_MEASURED = r"-?\d+(?:\.\d+)?(?:e[-+]?\d+)?"
_FLOAT = re.compile(r"(?<![\w.])(?:~\d+|-?\d+(?:\.\d+(?:e[-+]?\d+)?|e[-+]?\d+))(?![\w.])")


def verdict_pattern(line: str) -> "re.Pattern[str]":
    """The regex a command's verdict line must match: the page's line word for word, counts
    (integers) exact unless written ``~N``, measured values (a fraction or an exponent) any
    number, and a trailing ``...`` (the page trims) anything."""
    trimmed = line.rstrip()
    tail = ""
    if trimmed.endswith("..."):
        trimmed, tail = trimmed[:-3].rstrip(), ".*"
    parts, last = [], 0
    for m in _FLOAT.finditer(trimmed):
        parts += [re.escape(trimmed[last:m.start()]), _MEASURED]
        last = m.end()
    parts.append(re.escape(trimmed[last:]))
    return re.compile("".join(parts) + tail)


def examples(page: str) -> List[Example]:
    out: List[Example] = []
    lang, block, start = None, [], 0
    for n, raw in enumerate((ROOT / page).read_text().splitlines(), 1):
        m = _FENCE.match(raw)
        if m and lang is None:
            lang, block, start = m.group(1) or "text", [], n
            continue
        if m and lang is not None:
            out.extend(_from_block(page, lang, block, start))
            lang = None
            continue
        if lang is not None:
            block.append(raw)
    return out


def _from_block(page: str, lang: str, lines: List[str], start: int) -> List[Example]:
    if lang == "python":
        text = "\n".join(lines)
        m = _NOT_RUN.search(lines[0]) if lines else None
        return [Example(page, start, "python", text, (0,), m.group(1) if m else None)]
    if lang not in ("console", "sh", "shell", "bash"):
        return []
    found, i = [], 0
    while i < len(lines):
        ln, n = lines[i], start + 1 + i
        cmd = None
        if lang == "console" and ln.startswith("$ "):
            cmd = ln[2:]
        elif lang != "console" and re.match(r"(lar-prec|python|adb)\b", ln):
            cmd = ln
        if cmd is not None:
            while cmd.rstrip().endswith("\\") and i + 1 < len(lines):
                i += 1
                cmd = cmd.rstrip()[:-1] + " " + lines[i].strip()
            not_run = _NOT_RUN.search(cmd)
            exits = _EXIT.search(cmd)
            codes = tuple(int(x) for x in exits.group(1).replace(" ", "").split(",") if x) if exits else (0,)
            body = _EXIT.sub("", cmd) if exits else cmd
            shown = []
            while lang == "console" and i + 1 < len(lines) and lines[i + 1].strip() and \
                    not lines[i + 1].startswith("$ "):
                i += 1
                shown.append(lines[i])
            found.append(Example(page, n, "shell", body, codes, not_run.group(1) if not_run else None, tuple(shown)))
        i += 1
    return found


ALL = [e for p in PAGES if (ROOT / p).exists() for e in examples(p)]


def test_every_page_is_in_the_reading_order_and_links_resolve():
    pages = {"README.md"} | {f"docs/{p.name}" for p in (ROOT / "docs").glob("*.md")}
    assert pages <= set(PAGES), f"add to PAGES: {sorted(pages - set(PAGES))}"
    for page in pages:
        for target in re.findall(r"\]\(([^)#:]+)(?:#[^)]*)?\)", (ROOT / page).read_text()):
            assert (ROOT / page).parent.joinpath(target).exists(), f"{page}: broken link {target}"


def test_the_pages_have_examples_and_few_are_not_run():
    assert sum(e.kind == "shell" for e in ALL) >= 15
    not_run = [e for e in ALL if e.not_run]
    assert len(not_run) <= MAX_NOT_RUN, [f"{e.page}:{e.line}" for e in not_run]
    commands = {re.match(r"lar-prec (\S+)", e.text).group(1) for e in ALL
                if e.kind == "shell" and e.text.startswith("lar-prec ") and not e.not_run}
    assert commands >= {"naive-vs-default", "shake", "sweep", "devices", "compare", "tree", "run", "quant"}


def test_every_environment_variable_read_is_on_the_environment_page():
    """docs/environment.md lists every variable the package reads: each ``LAR_PREC_*`` name in its
    sources and each name read through ``os.environ``/``getenv``/click's ``envvar``; and every
    ``LAR_PREC_*`` name the page lists is still read somewhere (the package or the setup)."""
    page = (ROOT / "docs" / "environment.md").read_text()
    read = set()
    for f in (ROOT / "lar_prec").rglob("*.py"):
        text = f.read_text()
        read |= set(re.findall(r"\b(LAR_PREC_[A-Z_]+)\b", text))
        read |= set(re.findall(r"(?:environ(?:\.get)?\(|environ\[|getenv\(|setdefault\(|envvar=)\s*[\"']([A-Z][A-Z0-9_]+)",
                               text))
    assert len(read) >= 12, sorted(read)
    missing = sorted(v for v in read if f"`{v}`" not in page)
    assert not missing, f"read by lar_prec but not on docs/environment.md: {missing}"
    setup = " ".join(p.read_text() for p in [*(ROOT / "scripts").glob("*.sh"), ROOT / "Makefile"])
    stale = sorted(v for v in re.findall(r"`(LAR_PREC_[A-Z_]+)`", page) if v not in read and v not in setup)
    assert not stale, f"on docs/environment.md but read nowhere: {stale}"


def test_every_json_key_is_documented():
    from lar_prec.report.records import ROOT_FIELDS, VAR_FIELDS

    text = (ROOT / "docs" / "json.md").read_text()
    for key, *_ in VAR_FIELDS + ROOT_FIELDS:
        assert f"`{key}`" in text, key


@pytest.mark.megengine
@pytest.mark.slow
def test_every_example_runs(tmp_path):
    """All of them in one test, in reading order: later pages use what earlier ones made."""
    env = {**os.environ, "PYTHONPATH": str(ROOT), "LAR_PREC_LOAD_AND_RUN": "bundled"}
    lar = f"{sys.executable} -m lar_prec"
    failures = []
    for e in ALL:
        if e.not_run:
            continue
        text = e.text.replace(DOCS_TMP, str(tmp_path))
        if e.kind == "python":
            argv: object = [sys.executable, "-c", text]
            shell = False
        else:
            text = re.sub(r"^lar-prec\b", lar, text)
            text = re.sub(r"^python\b", sys.executable, text)
            argv, shell = text, True
        proc = subprocess.run(argv, shell=shell, cwd=ROOT, env=env, capture_output=True, text=True,
                              timeout=600, executable="/bin/bash" if shell else None)
        if proc.returncode not in e.exits:
            failures.append(f"{e.page}:{e.line}: exit {proc.returncode} (expected {e.exits}): "
                            f"{e.text[:120]}\n{proc.stderr[-1500:]}")
        elif e.page == "README.md" and e.shown:
            failures += verdict_differs(e, (proc.stdout + proc.stderr).replace(str(tmp_path), DOCS_TMP))
    assert not failures, "\n\n".join(failures)


def verdict_differs(e: Example, stdout: str) -> List[str]:
    """The README's verdict line of an example (the first line it shows) against what the
    command printed (stdout and stderr: ``run`` says "ok" there): one of its lines must match it
    word for word, counts exact, measured values as numbers (:func:`verdict_pattern`)."""
    pattern = verdict_pattern(e.shown[0])
    if any(pattern.fullmatch(ln.rstrip()) for ln in stdout.splitlines()):
        return []
    near = [ln for ln in stdout.splitlines() if ln.split(":")[0] == e.shown[0].split(":")[0]] or stdout.splitlines()[:3]
    return [f"{e.page}:{e.line}: the README shows\n    {e.shown[0]}\n  the command printed\n    "
            + "\n    ".join(near[:3])]


def test_the_verdict_pattern_holds_counts_and_words_and_lets_measured_values_move():
    p = verdict_pattern("Verdict: jitter: 28 of 51 variables differ from run 1 in up to 2 of 2 runs; first root: x ...")
    assert p.fullmatch("Verdict: jitter: 28 of 51 variables differ from run 1 in up to 2 of 2 runs; first root: x (y)")
    assert not p.fullmatch("Verdict: jitter: 28 of 51 variables differ from run 1 in up to 1 of 1 runs; first root: x")
    q = verdict_pattern("Verdict: no divergence: all 17 variables within threshold 9.54e-06 [roots by local error]")
    assert q.fullmatch("Verdict: no divergence: all 17 variables within threshold 1.2e-05 [roots by local error]")
    assert not q.fullmatch("Verdict: no divergence: all 18 variables within threshold 9.54e-06 [roots by local error]")
    assert not q.fullmatch("Verdict: no divergence: every 17 variables within threshold 9.54e-06 [roots by local error]")
    j = verdict_pattern("Verdict: jitter: ~2 of 51 variables differ")
    assert j.fullmatch("Verdict: jitter: 28 of 51 variables differ") and not j.fullmatch("Verdict: jitter: 2 of 50 variables differ")
    assert sum(bool(e.shown) for e in ALL if e.page == "README.md") >= 10
