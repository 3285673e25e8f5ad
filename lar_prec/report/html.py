"""A :class:`~lar_prec.report.Report` as one self-contained, offline HTML page.

The page is four package data files, ``lar_prec/page/report.html`` (the template, with a
Content-Security-Policy that forbids any network access), ``report.css``, ``plots.js`` (the
small plots: axes, hover values) and ``report.js`` (it builds every node with createElement/textContent, never innerHTML with data, so var
names are escaped by construction). It draws every view from the report's JSON, the sweep's
options and option-by-variable view and the devices' targets and target-by-variable view
included; :func:`render_html` only inlines the four files and the JSON into one file, so
no markup is built in Python.
"""
from __future__ import annotations

import html
import json
import logging
import re
from functools import lru_cache
from pathlib import Path
from typing import Any, Mapping, Optional, Union

from lar_prec.outputs import atomic_write_text
from lar_prec.report.model import Report

log = logging.getLogger(__name__)

__all__ = ["PAGE_DIR", "PAGE_FILES", "render_html", "write_html"]

#: where the page's files are installed (package data)
PAGE_DIR = Path(__file__).with_name("page")
PAGE_FILES = ("report.html", "report.css", "plots.js", "report.js", "speed.js")


@lru_cache(maxsize=None)
def _page_file(name: str) -> str:
    return (PAGE_DIR / name).read_text(encoding="utf-8")


def _json_for_script(obj: Any) -> str:
    """JSON safe inside ``<script type="application/json">``: ``<``, ``>`` and ``&`` only occur
    inside JSON strings, so escaping them as \\u00XX keeps it valid JSON that can never close
    the script element, whatever the var names contain."""
    text = json.dumps(obj, allow_nan=False, ensure_ascii=False, separators=(",", ":"))
    return (text.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")
            .replace("\u2028", "\\u2028").replace("\u2029", "\\u2029"))


def render_html(report: Union[Report, Mapping[str, Any]], *, title: Optional[str] = None) -> str:
    """The report as one self-contained HTML document (see :func:`write_html`). ``report`` is a
    :class:`Report` or the JSON of a command that has none (``mixed``, ``quant``: the page
    draws them by their ``schema``)."""
    data = report.to_json() if isinstance(report, Report) else dict(report)
    if title is None:
        command = data.get("command") or str(data.get("schema", "")).partition(".")[2].partition("/")[0]
        title = f"lar-prec {command}" + (f": {data['model']}" if data.get("model") else "")
    parts = {
        "TITLE": html.escape(title, quote=True),
        "CSS": "\n" + _page_file("report.css"),
        # plots.js before report.js (which calls it); speed.js (a sweep's speed plot) after
        "JS": "\n" + "\n".join(_page_file(f) for f in ("plots.js", "report.js", "speed.js")),
        "DATA": _json_for_script(data),
    }
    # One pass over the template only, so user text that happens to contain "@@DATA@@" stays text.
    return re.sub(r"@@(TITLE|CSS|JS|DATA)@@", lambda m: parts[m.group(1)], _page_file("report.html"))


def write_html(report: Union[Report, Mapping[str, Any]], path: Union[str, Path], *, title: Optional[str] = None) -> Path:
    """Write the interactive report as one offline HTML file (atomically).

    The file fetches nothing (inline CSS, JS and SVG; a Content-Security-Policy forbids any
    network access) and renders lazily, so 20,000 variables stay responsive: an error chart
    along execution order with roots and threshold marked, a sortable, filterable,
    paginated variable table, the graph neighbourhood of each root coloured by status, the
    path from the input to each root, and the runs with their command lines.

    Returns:
        The path written.

    Raises:
        UsageError: the file cannot be written (the message names it).
    """
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    p = atomic_write_text(path, render_html(report, title=title), what="HTML report")
    log.info("wrote HTML report %s", p)
    return p
