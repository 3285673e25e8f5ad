"""The JSON Schema (draft 2020-12) of report.json (``lar-prec.report/1``), generated from the
records that write it: :data:`VAR_FIELDS` and :data:`ROOT_FIELDS` (each key's kind, whether it
is always written, its meaning), the threshold, run and summary objects, the statuses and the
commands. ``lar-prec schema`` prints it; :func:`schema_errors` checks a document against it
with the few keywords the schema uses (the tests check every report the suite writes)."""
from __future__ import annotations

import math
from typing import Any, Dict, List, Mapping, Tuple

from lar_prec.compare.records import STATUSES
from lar_prec.report.records import COMMANDS, ROOT_FIELDS, SCHEMA, VAR_FIELDS

#: the schema's own version: bumped when the schema's text changes for one report schema
SCHEMA_VERSION = 1

_KIND: Dict[str, Dict[str, Any]] = {
    "int": {"type": "integer"}, "str": {"type": "string"}, "bool": {"type": "boolean"},
    "float": {"type": "number"}, "num": {"type": "number"},
    "ints": {"type": "array", "items": {"type": "integer"}},
}


def _nullable(s: Dict[str, Any]) -> Dict[str, Any]:
    return {**s, "type": [s["type"], "null"]}


def _table(table: Tuple[Tuple[str, str, bool, str], ...], what: str, required: Tuple[str, ...]) -> Dict[str, Any]:
    """An object of a record table: an "always" key is required and may be null (written null
    when unknown); any other key is written only with a value. Further keys are allowed (a
    record's ``extra``, written flat)."""
    props: Dict[str, Any] = {}
    for key, kind, always, meaning in table:
        s = dict(_KIND[kind])
        if key == "status":
            s["enum"] = list(STATUSES)
        props[key] = {**(_nullable(s) if always and key not in required else s), "description": meaning}
    return {"type": "object", "description": what, "required": [k for k, _, always, _ in table if always],
            "properties": props, "additionalProperties": True}


def report_schema() -> Dict[str, Any]:
    """The JSON Schema of a ``lar-prec.report/1`` document."""
    number_or_null = {"type": ["number", "null"]}
    threshold = {
        "type": "object", "description": "the threshold on max_err that separates ok from divergent",
        "required": ["value", "mode", "metric"],
        "properties": {
            "value": {**number_or_null, "description": "the threshold (null: none)"},
            "mode": {"type": "string", "description": "auto (chosen from the data, see reason) or fixed (--threshold)"},
            "metric": {"type": "string", "description": "the metric it applies to, megengine_rel"},
            "reason": {"type": "string", "description": "how it was chosen, in full (the terminal shows one line)"},
            "per_dtype": {"type": "object", "additionalProperties": number_or_null,
                          "description": "the value used for each dtype"},
        }, "additionalProperties": True}
    run = {
        "type": "object", "description": "one load_and_run process",
        "required": ["label", "dir", "argv", "returncode", "seconds"],
        "properties": {
            "label": {"type": "string", "description": "naive, default, run3..."},
            "dir": {"type": "string", "description": "its run folder"},
            "argv": {"type": "array", "items": {"type": "string"}, "description": "its command line"},
            "returncode": {"type": "integer", "description": "its exit code (negative: killed by that signal)"},
            "seconds": {**number_or_null, "description": "wall time"},
            "env": {"type": "object", "additionalProperties": {"type": ["string", "null"]},
                    "description": "the variables it changed (null: removed)"},
            "config": {"type": "string", "description": "its configuration"},
        }, "additionalProperties": True}
    summary = {
        "type": "object", "required": ["n_vars", "n_not_ok", "by_status", "n_roots", "exit_code"],
        "properties": {
            "n_vars": {"type": "integer"}, "n_not_ok": {"type": "integer"}, "n_roots": {"type": "integer"},
            "by_status": {"type": "object", "additionalProperties": {"type": "integer"},
                          "propertyNames": {"enum": list(STATUSES)}},
            "exit_code": {"enum": [0, 1], "description": "0: every variable ok, 1: any is not"},
        }, "additionalProperties": True}
    return {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "$id": f"urn:lar-prec:schema:{SCHEMA}",
        "title": f"lar-prec report.json ({SCHEMA})",
        "version": SCHEMA_VERSION,
        "type": "object",
        "required": ["schema", "command", "threshold", "vars", "roots", "runs", "verdict", "cause", "notes", "model",
                     "summary"],
        "properties": {
            "schema": {"const": SCHEMA},
            "command": {"enum": list(COMMANDS)},
            "threshold": threshold,
            "vars": {"type": "array", "description": "every compared variable, in execution order",
                     "items": _table(VAR_FIELDS, "one compared variable", ("id", "name", "opr", "opr_type", "status"))},
            "roots": {"type": "array", "description": "the roots, most likely origin first",
                      "items": _table(ROOT_FIELDS, "one root", ("id", "name", "opr", "opr_type"))},
            "runs": {"type": "array", "items": run},
            "verdict": {"type": "string", "description": "the one-line answer"},
            "cause": {"type": ["string", "null"], "description": "shake's diagnosis; null elsewhere"},
            "notes": {"type": "array", "items": {"type": "string"}},
            "model": {"type": ["string", "null"], "description": "the model file, when one ran"},
            "summary": summary,
        },
        "additionalProperties": True,
    }


_TYPES = {"object": Mapping, "array": list, "string": str, "boolean": bool, "null": type(None)}


def _is(value: Any, t: str) -> bool:
    if t == "integer":
        return isinstance(value, int) and not isinstance(value, bool)
    if t == "number":
        return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
    return isinstance(value, _TYPES[t])


def schema_errors(doc: Any, schema: Mapping[str, Any], where: str = "$", limit: int = 20) -> List[str]:
    """Where ``doc`` breaks ``schema`` (empty: it conforms), for the keywords :func:`report_schema`
    uses: type, const, enum, required, properties, additionalProperties, propertyNames, items."""
    errs: List[str] = []

    def check(v: Any, s: Mapping[str, Any], at: str) -> None:
        if len(errs) >= limit:
            return
        types = s.get("type")
        if types is not None:
            names = types if isinstance(types, list) else [types]
            if not any(_is(v, t) for t in names):
                errs.append(f"{at}: expected {' or '.join(names)}, got {type(v).__name__} {v!r:.60}")
                return
        if "const" in s and v != s["const"]:
            errs.append(f"{at}: expected {s['const']!r}, got {v!r:.60}")
        if "enum" in s and v not in s["enum"]:
            errs.append(f"{at}: {v!r:.60} is not one of {s['enum']}")
        if isinstance(v, Mapping):
            errs.extend(f"{at}: required key {k!r} missing" for k in s.get("required", ()) if k not in v)
            props = s.get("properties", {})
            extra = s.get("additionalProperties", True)
            names = s.get("propertyNames")
            for k, x in v.items():
                if names is not None:
                    check(k, names, f"{at} key {k!r}")
                if k in props:
                    check(x, props[k], f"{at}.{k}")
                elif extra is False:
                    errs.append(f"{at}: unexpected key {k!r}")
                elif isinstance(extra, Mapping):
                    check(x, extra, f"{at}.{k}")
        if isinstance(v, list) and "items" in s:
            for i, x in enumerate(v):
                check(x, s["items"], f"{at}[{i}]")

    check(doc, schema, where)
    return errs[:limit]
