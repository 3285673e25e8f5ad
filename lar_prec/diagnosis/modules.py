"""Which module of the user's network an operator belongs to (issue 40 #5).

MegEngine names an operator it made itself after its inputs: after ``optimize_for_inference``
the depthwise convolution of ``features.2.block.1`` is
``conv(features.2.block.0.act.RELU,const{72,1,1,3,3})``, named after the *previous* block's
activation, so users look in the wrong block. The dumps keep better evidence, in this order:

1. the names of its constant inputs: a weight ``features.2.block.1.conv.weight`` is the
   operator's own (constants folded by the optimiser, ``const{72,1,1,3,3}``, say nothing);
2. its own name, when the user's code named it (``blocks.0.se.fc1.Convolution``), not when
   MegEngine made it up from its inputs (``conv(...)``, ``ADD(...)``);
3. its consumer's name: a fused bias and activation right after it carries the module
   (``features.2.block.1.act.RELU``).

Where none of them tells, the module is unknown and the report says that the operator's name
is its input's. The graph records the lar writes (:mod:`lar_prec.lar.graph_records`) name the
same operators and vars as the dumps (the same loaded graph), so they add nothing here.
"""
from __future__ import annotations

import re
from typing import Callable, Dict, List, NamedTuple, Optional, Sequence

from lar_prec.compare.sources import CONSTANT_TYPES

#: a name MegEngine made from an operator and its inputs: ``conv(a,b)[12]``, ``ADD(x,y)``
_AUTO = re.compile(r"^[A-Za-z_][\w:]*\(")
#: the last part of a dotted name that names the operator or parameter, not a module: an
#: upper-case operator (``RELU``, ``Convolution``, ``ADD[2]``) or a parameter (``weight``)
_LEAF = re.compile(r"^(?:[A-Z][\w]*|weight|bias|running_mean|running_var|scale|zero_point)(?:\[\d+\])?$")


class Module(NamedTuple):
    """The module an operator belongs to, and how it was told."""

    name: Optional[str]
    how: str


def module_of_name(name: str) -> Optional[str]:
    """The module a dotted user name is in (``blocks.0.se.fc1.Convolution`` -> ``blocks.0.se.fc1``),
    None for a name MegEngine made up or a name of one part."""
    if _AUTO.match(name) or "." not in name:
        return None
    head, _, leaf = name.rpartition(".")
    return head if _LEAF.match(leaf) else name


def first_input_name(name: str) -> Optional[str]:
    """The first input an auto-name is made from (``conv(a.b.RELU,const{..})[3]`` -> ``a.b.RELU``)."""
    if not _AUTO.match(name):
        return None
    inner = name[name.index("(") + 1 :]
    depth, out = 0, []
    for ch in inner:
        if ch in "({[":
            depth += 1
        elif ch in ")}]":
            if depth == 0:
                break
            depth -= 1
        elif ch == "," and depth == 0:
            break
        out.append(ch)
    return "".join(out) or None


def module_of(var_id: int, get: Callable[[int], Optional[object]], consumers: Dict[int, List[int]]) -> Module:
    """The module of the operator writing var ``var_id`` (``get``: a var's record by id, anything
    with ``name``, ``opr_type``, ``inputs``; ``consumers``: var id -> the vars that read it)."""
    v = get(var_id)
    for u in v.inputs:  # type: ignore[union-attr]
        c = get(u)
        if c is not None and c.opr_type in CONSTANT_TYPES:  # type: ignore[attr-defined]
            m = module_of_name(c.name)  # type: ignore[attr-defined]
            if m:
                return Module(m, f"its constant {c.name}")  # type: ignore[attr-defined]
    m = module_of_name(v.name)  # type: ignore[union-attr]
    if m:
        return Module(m, "its name")
    for w in consumers.get(var_id, ()):
        c = get(w)
        if c is not None:
            m = module_of_name(c.name)  # type: ignore[attr-defined]
            if m:
                return Module(m, f"its consumer {c.name}")  # type: ignore[attr-defined]
    first = first_input_name(v.name)  # type: ignore[union-attr]
    return Module(None, f"unknown: its name is made from its input {first}" if first else "unknown")


#: consumers are looked for among this many vars after the operator (a fused bias and
#: activation follows it right away): bounded work on a model of tens of thousands of vars
CONSUMER_WINDOW = 64


def modules_of(var_ids: Sequence[int], records: Sequence[object],
               get: Optional[Callable[[int], Optional[object]]] = None) -> Dict[int, Module]:
    """:func:`module_of` of each of ``var_ids`` among ``records`` (in execution order; ``get``
    finds one by id, else a dict is made). Only those vars, their inputs and the
    :data:`CONSUMER_WINDOW` vars after each are looked at."""
    if not var_ids:
        return {}
    if get is None:
        get = {d.id: d for d in records}.get  # type: ignore[attr-defined]
    consumers: Dict[int, List[int]] = {}
    for v in var_ids:
        d = get(v)
        if d is None:
            continue
        i = getattr(d, "index", None)  # a compare record knows its place
        if not (isinstance(i, int) and 0 <= i < len(records) and records[i] is d):
            i = next(k for k, x in enumerate(records) if x is d)
        for c in records[i + 1 : i + 1 + CONSUMER_WINDOW]:
            if v in c.inputs:  # type: ignore[attr-defined]
                consumers.setdefault(v, []).append(c.id)  # type: ignore[attr-defined]
    return {v: module_of(v, get, consumers) for v in var_ids if get(v) is not None}


def module_note(opr_name: str, module: Module) -> Optional[str]:
    """What to tell the user when the operator's name points at another module than its own
    (None when it does not, or the module is unknown)."""
    first = first_input_name(opr_name)
    named = module_of_name(first) if first else None
    if module.name is None:  # said only where the name points at a module, the input's
        return (f"its name is made from its input {first} (module {named}): its own module cannot be told "
                "from the dumps") if named else None
    if named and named != module.name and not module.name.startswith(named + "."):
        return f"in module {module.name} ({module.how}), not {named}: its name is made from its input {first}"
    return None


def module_text(opr_name: str, module: Optional[str], how: Optional[str]) -> Optional[str]:
    """One line on a root's module for people: the warning of :func:`module_note` when its name
    misleads, else where it is (None when nothing was told)."""
    if how is None:
        return None
    note = module_note(opr_name, Module(module, how))
    if note:
        return note
    return f"in module {module} ({how})" if module else None
