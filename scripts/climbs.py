#!/usr/bin/env python
"""How far one argument travels: a walk of the static call graph of ``lar_prec``.

    .venv/bin/python scripts/climbs.py [MODULE:FUNCTION [PARAM]] [--trace] [--carriers | --all-records]

Starts in FUNCTION (default ``lar_prec.cli.analysis:naive_vs_default_cmd``) with PARAM (default
``model``) and follows every call that passes the value on, into the callee's parameter it
binds to, depth first. The value is the parameter itself, a name assigned from it (``p =
Path(model)``, ``model_path, ... = prepare_analysis(model, ...)``: the first target of a call
whose first argument is the value), a field ``model``/``model_path`` read from a record that
carries it, or a record made from it (``Settings(model=...)``; with ``--carriers`` also a
settings record a callee made from it and returned, ``prep = prepare(settings)``; with
``--all-records`` any record returned so, the run's ``RunResult`` too): passing such a record
carries the value too. Without either flag the walk is the one issue 56's numbers were
measured with (the parameter's own trip: it ends where a callee turns it into a record it returns). Each call into a lar_prec function with a body is one trip down and one climb
back up; a record's constructor without a body of its own is not walked. Prints the climbs
(every return to a caller), those that cross a module, and the modules visited in order.
"""
from __future__ import annotations

import ast
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Dict, List, Optional, Set, Tuple

ROOT = Path(__file__).resolve().parent.parent
PKG = ROOT / "lar_prec"
WRAPPERS = {"Path", "str", "fspath", "abspath", "resolve_path"}
FIELDS = {"model", "model_path"}
#: the records made to carry what to run (lar_prec/run/settings.py), followed with --carriers
#: when a callee returns one made from the value (``prep = prepare(settings)``); a result that
#: names the model for the record (``RunResult.model_path``) is followed only with --all-records
CARRIERS = {"Settings", "Prepared"}


def _name(func: ast.expr) -> str:
    return func.id if isinstance(func, ast.Name) else func.attr if isinstance(func, ast.Attribute) else ""


@dataclass
class Module:
    name: str
    tree: ast.Module
    funcs: Dict[str, ast.FunctionDef] = field(default_factory=dict)
    classes: Dict[str, ast.ClassDef] = field(default_factory=dict)
    names: Dict[str, Tuple[str, str]] = field(default_factory=dict)  # local -> (module, name)
    modules: Dict[str, str] = field(default_factory=dict)  # local -> module
    #: a top-level function's own imports (the CLI imports each command's workflow when it runs)
    scopes: Dict[str, Tuple[Dict[str, Tuple[str, str]], Dict[str, str]]] = field(default_factory=dict)


def _modname(p: Path) -> str:
    parts = p.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _import_from(node: ast.ImportFrom, pkg: str, mods: Dict[str, "Module"], names: Dict[str, Tuple[str, str]],
                 modules: Dict[str, str]) -> None:
    base = node.module or ""
    if node.level:
        up = pkg.split(".")[: len(pkg.split(".")) - node.level + 1]
        base = ".".join(up + ([base] if base else []))
    for a in node.names:
        local = a.asname or a.name
        if f"{base}.{a.name}" in mods:
            modules[local] = f"{base}.{a.name}"
        else:
            names[local] = (base, a.name)


def load() -> Dict[str, Module]:
    mods: Dict[str, Module] = {}
    for p in PKG.rglob("*.py"):
        if "__pycache__" in p.parts:
            continue
        m = Module(_modname(p), ast.parse(p.read_text()))
        mods[m.name] = m
    for m in mods.values():
        pkg = m.name if (PKG / Path(*m.name.split(".")[1:]) / "__init__.py").exists() else m.name.rsplit(".", 1)[0]
        inner = {id(n) for f in ast.walk(m.tree) if isinstance(f, (ast.FunctionDef, ast.AsyncFunctionDef))
                 for n in ast.walk(f) if isinstance(n, ast.ImportFrom)}
        for node in ast.walk(m.tree):
            if isinstance(node, ast.ImportFrom):
                if id(node) in inner:  # a function's own import: its scope only (Module.scopes)
                    continue
                _import_from(node, pkg, mods, m.names, m.modules)
            elif isinstance(node, ast.Import):
                for a in node.names:
                    if a.asname:
                        m.modules[a.asname] = a.name
            elif isinstance(node, ast.Assign):  # x = LazyModule("..."), or a tuple of them
                targets = node.targets[0].elts if isinstance(node.targets[0], ast.Tuple) else [node.targets[0]]
                values = node.value.elts if isinstance(node.value, ast.Tuple) else [node.value]
                for t, v in zip(targets, values):
                    if (isinstance(t, ast.Name) and isinstance(v, ast.Call) and isinstance(v.func, ast.Name)
                            and v.func.id == "LazyModule" and v.args and isinstance(v.args[0], ast.Constant)):
                        m.modules[t.id] = v.args[0].value
        for node in m.tree.body:
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                m.funcs[node.name] = node
                names: Dict[str, Tuple[str, str]] = {}
                modules: Dict[str, str] = {}
                for sub in ast.walk(node):
                    if isinstance(sub, ast.ImportFrom):
                        _import_from(sub, pkg, mods, names, modules)
                m.scopes[node.name] = (names, modules)
            elif isinstance(node, ast.ClassDef):
                m.classes[node.name] = node
    return mods


class Walk:
    def __init__(self, mods: Dict[str, Module], trace: bool, carriers: bool = False, all_records: bool = False) -> None:
        self.mods, self.trace, self.carriers, self.all_records = mods, trace, carriers, all_records
        self.climbs = self.cross = 0
        self.visits: List[str] = []
        self.stack: List[Tuple[str, str]] = []
        self.memo: Dict[tuple, str] = {}
        self.scope: List[Tuple[Dict[str, Tuple[str, str]], Dict[str, str]]] = []  # the walked function's own imports

    # -- resolving a call to (module, function node, is a method)
    def _lookup(self, mod: str, name: str, depth: int = 0) -> Optional[Tuple[str, object]]:
        m = self.mods.get(mod)
        if m is None or depth > 5:
            return None
        if name in m.funcs:
            return mod, m.funcs[name]
        if name in m.classes:
            return mod, m.classes[name]
        if name in m.names:
            return self._lookup(*m.names[name], depth=depth + 1)
        return None

    def resolve(self, mod: Module, func: ast.expr) -> Optional[Tuple[str, ast.FunctionDef, bool]]:
        found: Optional[Tuple[str, object]] = None
        sn, sm = self.scope[-1] if self.scope else ({}, {})
        if isinstance(func, ast.Name):
            found = self._lookup(*sn[func.id], depth=1) if func.id in sn else self._lookup(mod.name, func.id)
        elif isinstance(func, ast.Attribute):
            chain, node = [func.attr], func.value
            while isinstance(node, ast.Attribute):
                chain.insert(0, node.attr)
                node = node.value
            if isinstance(node, ast.Name) and (node.id in sm or node.id in mod.modules):
                target = sm.get(node.id) or mod.modules[node.id]
                found = self._lookup(target, chain[0])
                if found is not None and len(chain) == 2 and isinstance(found[1], ast.ClassDef):
                    cls = found[1]
                    meth = next((b for b in cls.body if isinstance(b, ast.FunctionDef) and b.name == chain[1]), None)
                    return (found[0], meth, True) if meth is not None else None
                if len(chain) != 1:
                    return None
            elif isinstance(node, ast.Name) and len(chain) == 1:
                found = self._lookup(*sn[node.id], depth=1) if node.id in sn else self._lookup(mod.name, node.id)
                if found is not None and isinstance(found[1], ast.ClassDef):
                    meth = next((b for b in found[1].body if isinstance(b, ast.FunctionDef) and b.name == chain[0]), None)
                    return (found[0], meth, True) if meth is not None else None
                return None
        if found is None:
            return None
        where, node = found
        if isinstance(node, ast.ClassDef):
            init = next((b for b in node.body if isinstance(b, ast.FunctionDef) and b.name == "__init__"), None)
            return (where, init, True) if init is not None else (where, None, False)  # type: ignore[return-value]
        return where, node, False  # type: ignore[return-value]

    # -- the value inside one function
    def carries(self, e: ast.expr, vals: Set[str], recs: Set[str]) -> bool:
        if isinstance(e, ast.Name):
            return e.id in vals or e.id in recs
        if isinstance(e, ast.Attribute):
            return isinstance(e.value, ast.Name) and e.value.id in recs and e.attr in FIELDS
        if isinstance(e, ast.Call):
            name = e.func.id if isinstance(e.func, ast.Name) else e.func.attr if isinstance(e.func, ast.Attribute) else ""
            return name in WRAPPERS and bool(e.args) and self.carries(e.args[0], vals, recs)
        if isinstance(e, ast.IfExp):
            return self.carries(e.body, vals, recs) or self.carries(e.orelse, vals, recs)
        if isinstance(e, ast.Starred):
            return self.carries(e.value, vals, recs)
        return False

    def track(self, mod: Module, fn: ast.FunctionDef, vals: Set[str], recs: Set[str]) -> None:
        """Names of ``fn`` that hold the value (``vals``) or a record carrying it (``recs``)."""
        for node in ast.walk(fn):
            if not isinstance(node, ast.Assign):
                continue
            t = node.targets[0]
            first = t.elts[0] if isinstance(t, ast.Tuple) and t.elts else t
            if not isinstance(first, ast.Name):
                continue
            v = node.value
            if isinstance(v, ast.Call):
                fname = v.func.id if isinstance(v.func, ast.Name) else v.func.attr if isinstance(v.func, ast.Attribute) else ""
                if fname == "replace" and v.args and isinstance(v.args[0], ast.Name) and v.args[0].id in recs:
                    recs.add(first.id)
                    continue
                if self.carries(v, vals, recs):
                    vals.add(first.id)
                    continue
                r = self.resolve(mod, v.func)
                if r is None:
                    continue
                bound = self.bind(r, v, vals, recs)
                if not bound:
                    continue
                if r[1] is None:  # a record made from the value carries it
                    recs.add(first.id)
                else:
                    got = self.returns(r, bound)
                    if got == "value":
                        vals.add(first.id)
                    elif got == "record":  # a record made from the value, returned
                        recs.add(first.id)
            elif self.carries(v, vals, recs):
                (recs if isinstance(v, ast.Name) and v.id in recs else vals).add(first.id)

    def returns(self, r: Tuple[str, ast.FunctionDef, bool], bound: List[str]) -> str:
        """Does the function return the value it was given (alone or first of a tuple):
        ``"value"``, or a record made from it (a constructor without a body, given the value,
        or a name holding one): ``"record"``; else ``""``."""
        where, fn, _ = r
        key = (where, fn.name, tuple(sorted(bound)))
        if key in self.memo:
            return self.memo[key]
        self.memo[key] = ""  # recursion: not until shown
        vals: Set[str] = set(bound)
        recs: Set[str] = set()
        mod = self.mods[where]
        self.scope.append(mod.scopes.get(fn.name, ({}, {})))
        self.track(mod, fn, vals, recs)
        self.scope.pop()
        out = ""
        for node in ast.walk(fn):
            if isinstance(node, ast.Return) and node.value is not None:
                e = node.value.elts[0] if isinstance(node.value, ast.Tuple) and node.value.elts else node.value
                if self.carries(e, vals, set()):
                    out = "value"
                elif not out and isinstance(e, ast.Call) and (self.all_records or self.carriers and _name(e.func) in CARRIERS):
                    rr = self.resolve(mod, e.func)
                    if rr is not None and rr[1] is None and self.bind(rr, e, vals, recs):
                        out = "record"
        self.memo[key] = out
        return out

    def bind(self, r: Tuple[str, Optional[ast.FunctionDef], bool], node: ast.Call, vals: Set[str],
             recs: Set[str]) -> List[str]:
        """The callee's parameters (or, for a record without a body, the argument positions) that get the value."""
        where, fn, method = r
        if fn is None:
            hit = any(self.carries(a, vals, recs) for a in node.args) or any(
                self.carries(k.value, vals, recs) for k in node.keywords)
            return ["<record>"] if hit else []
        params = [a.arg for a in fn.args.posonlyargs + fn.args.args][1 if method else 0:]
        bound = [params[i] for i, a in enumerate(node.args) if i < len(params) and self.carries(a, vals, recs)]
        names = {a.arg for a in fn.args.posonlyargs + fn.args.args + fn.args.kwonlyargs}
        bound += [k.arg for k in node.keywords if k.arg in names and self.carries(k.value, vals, recs)]  # type: ignore[misc]
        return bound

    def walk(self, modname: str, fn: ast.FunctionDef, vals: Set[str], recs: Set[str]) -> None:
        mod = self.mods[modname]
        self.visits.append(modname)
        self.stack.append((modname, fn.name))
        self.scope.append(mod.scopes.get(fn.name, ({}, {})))
        self.track(mod, fn, vals, recs)
        for node in sorted((n for n in ast.walk(fn) if isinstance(n, ast.Call)), key=lambda n: (n.lineno, n.col_offset)):
            self.call(mod, node, vals, recs)
        self.scope.pop()
        self.stack.pop()

    def call(self, mod: Module, node: ast.Call, vals: Set[str], recs: Set[str]) -> None:
        r = self.resolve(mod, node.func)
        if r is None or r[1] is None:
            return
        where, fn, method = r
        bound = self.bind(r, node, vals, recs)
        if not bound or (where, fn.name) in self.stack:
            return
        params = [a.arg for a in fn.args.posonlyargs + fn.args.args][1 if method else 0:]
        rec_args = {b for b, a in zip(params, node.args) if isinstance(a, ast.Name) and a.id in recs}
        rec_args |= {k.arg for k in node.keywords if isinstance(k.value, ast.Name) and k.value.id in recs}  # type: ignore[misc]
        if self.trace:
            print(f"{'  ' * len(self.stack)}{where}:{fn.name}({', '.join(bound)})")
        caller = mod.name
        self.walk(where, fn, set(bound) - rec_args, set(rec_args))
        self.climbs += 1
        self.cross += where != caller
        self.visits.append(caller)


def main(argv: List[str]) -> int:
    trace, carriers, all_records = "--trace" in argv, "--carriers" in argv, "--all-records" in argv
    argv = [a for a in argv if a not in ("--trace", "--carriers", "--all-records")]
    start = argv[0] if argv else "lar_prec.cli.analysis:naive_vs_default_cmd"
    param = argv[1] if len(argv) > 1 else "model"
    modname, fname = start.split(":")
    mods = load()
    w = Walk(mods, trace, carriers, all_records)
    w.walk(modname, mods[modname].funcs[fname], {param}, set())
    order = [m for i, m in enumerate(w.visits) if i == 0 or w.visits[i - 1] != m]
    print(f"{start} {param}: {w.climbs} climbs back up ({w.cross} across modules)")
    print("modules in order: " + " -> ".join(x.replace("lar_prec.", "") for x in order))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
