"""The stable operator key: one string naming the same operator output in two runs whose var
ids or generated names differ (another load_and_run build, a fused or relayouted graph).

Every cross-run feature pairs through it (the results store's history, and later diff,
bisect, reduce). It is made from what survives a rewrite, per var, in two forms:

* ``n/<name>``: the var's **name, where it is stable**: a name the model file carries
  (``c1.Convolution``, ``RELU[0]``, ``FUSE_ADD_RELU(stem.bias,stem.Convolution)[181]``, which
  the tracer wrote into the file), not one MegEngine makes up at load or rewrite time
  (``dimshuffle(Pooling[1])[471]``, ``const{1,4,1,1,4}[244]``, ``fuse():...@217``: an operator
  mnemonic in lower case, a constant, a folded constant, an abbreviated input like
  ``reshape[278]``; these carry var ids of the run's own graph). Names survive layout transforms, float16 rewrites and fusion (a fused
  ConvBias takes the name of the last var it replaces: reference/graph-options.md section 3);
  when a name repeats on one side, the last producer in execution order takes it (a float16
  ``TypeCvt`` reuses its input's name), as name pairing does.
* ``s/<hash>``: for every other var, a hash of its **structure from the inputs**: operator type
  and mode, output slot and shape, the keys of its inputs in order (so its whole position from
  the model inputs), and for each constant input its shape and the hash of its values; a
  second var with the same hash gets ``#2``, ``#3`` in execution order.

Model inputs are ``in/<name>``; constants ``c/<name>`` when named, else by shape and value hash.
Matching two runs is key equality (:func:`match_keys`), and what stays unmatched is listed
with the reason. Records are duck-typed (anything with ``id``, ``name``, ``opr_type``,
``shape``, ``inputs``; optional ``opr``, ``slot``, ``value_infer``, ``dtype``): dump titles,
report vars, store rows. No numpy: a constant's value hash is given by the caller
(:func:`lar_prec.dumps.folder.DumpFolder` bytes hashed with :func:`value_hash`).

Example::

    keys = operator_keys(nodes_a, const_hashes={9: "ab12..."})
    m = match_keys(operator_keys(nodes_a), operator_keys(nodes_b))
    m.pairs  # ((id_a, id_b), ...), m.unmatched_a: ((id, reason), ...)
"""
from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
from typing import Any, Dict, Iterable, List, Mapping, Optional, Sequence, Tuple

__all__ = ["INPUT_OPRS", "CONST_OPRS", "VALUE_INFER_CONST", "is_generated_name", "var_role", "value_hash",
           "operator_keys", "match_keys", "KeyMatch"]

#: operator types whose outputs are not computed by the graph: inputs and parameters
INPUT_OPRS = frozenset({"Host2DeviceCopy"})
CONST_OPRS = frozenset({
    "ImmutableTensor", "SharedDeviceTensor", "SharedDeviceTensorWithFormat", "VolatileSharedDeviceTensor",
    "MultipleDeviceTensorHolder", "MultipleDeviceTensorWithFormatHolder",
})
#: value infer type of a var whose value is a compile-time constant (static_infer.h: CONST)
VALUE_INFER_CONST = 2

# What MegEngine names a var it creates at load or rewrite time: its C++ operator name (a
# lower-case mnemonic and the inputs, abbreviated to ``reshape[278]`` when generated too, then
# the var id), a constant ``const{1,4,1,1,4}[244]``, a folded one ``fuse():...@217``. Upper-case
# Elemwise names (``ADD(fc.bias,fc.MatrixMul)[47]``) are what the tracer wrote into the model.
_GENERATED = re.compile(r"\A(?:[a-z][a-z0-9_]*\(|const\{|fuse\(\):|\Z)|[(,][a-z][a-z0-9_]*\[\d+\]|@\d+\Z")
# an Elemwise's mode is the head of its operator's generated name: FUSE_ADD_RELU(c1.bias,...)
_MODE = re.compile(r"([A-Z][A-Z0-9_]*)\(")


def is_generated_name(name: str) -> bool:
    """True for a name MegEngine made up at load or rewrite time (it carries var ids of that
    graph), False for one the model file carries."""
    return bool(_GENERATED.search(name))


def var_role(var: Any) -> str:
    """``input``, ``const`` (a parameter, or a value MegEngine infers as constant: value infer
    type 2, which marks the vars weight preprocessing adds) or ``computed``."""
    if var.opr_type in INPUT_OPRS:
        return "input"
    if var.opr_type in CONST_OPRS or getattr(var, "value_infer", None) == VALUE_INFER_CONST:
        return "const"
    return "computed"


def value_hash(data: bytes) -> str:
    """The hash of a constant's value bytes that keys use (16 hex digits of sha256)."""
    return hashlib.sha256(data).hexdigest()[:16]


def _kind(var: Any) -> str:
    """Operator type, with the mode when its operator's name shows one (Elemwise, Reduce...)."""
    m = _MODE.match(getattr(var, "opr", "") or "")
    return f"{var.opr_type}:{m.group(1)}" if m else str(var.opr_type)


def _shape(var: Any) -> str:
    return "x".join(str(int(d)) for d in (getattr(var, "shape", None) or ()))


def operator_keys(nodes: Iterable[Any], const_hashes: Optional[Mapping[int, str]] = None) -> Dict[int, str]:
    """The key of every var of one run (``nodes`` in execution order: inputs before their
    consumers), by var id. ``const_hashes``: var id -> :func:`value_hash` of a constant's
    values (from the dump); a constant without one is keyed by its shape alone."""
    nodes = list(nodes)
    hashes = const_hashes or {}
    # the last producer of a repeated stable name takes it (a float16 TypeCvt reuses its input's name)
    last: Dict[str, int] = {}
    for v in nodes:
        if var_role(v) == "computed" and not is_generated_name(v.name):
            last[v.name] = int(v.id)
    keys: Dict[int, str] = {}
    seen: Dict[str, int] = {}
    for v in nodes:
        vid, role = int(v.id), var_role(v)
        if role == "input":
            keys[vid] = f"in/{v.name}"
            continue
        if role == "computed" and last.get(v.name) == vid:
            keys[vid] = f"n/{v.name}"
            continue
        if role == "const" and not is_generated_name(v.name) and v.opr_type in CONST_OPRS:
            keys[vid] = f"c/{v.name}"
            continue
        parts = [_kind(v), str(getattr(v, "slot", 0) or 0), _shape(v)]
        if role == "const" and vid in hashes:
            parts.append("v=" + hashes[vid])
        for u in getattr(v, "inputs", ()) or ():
            # an input not in this run (not dumped) still names a position: its id cannot, so "?"
            parts.append(keys.get(int(u), "?"))
        digest = hashlib.sha256("\x1f".join(parts).encode("utf-8", "surrogatepass")).hexdigest()[:16]
        base = ("c/" if role == "const" else "s/") + digest
        n = seen[base] = seen.get(base, 0) + 1
        keys[vid] = base if n == 1 else f"{base}#{n}"
    return keys


@dataclass(frozen=True)
class KeyMatch:
    """Two runs' vars paired by key: ``pairs`` (id in A, id in B, key) in A's order, and the
    vars of each side without a partner, each with the reason."""

    pairs: Tuple[Tuple[int, int, str], ...]
    unmatched_a: Tuple[Tuple[int, str], ...]
    unmatched_b: Tuple[Tuple[int, str], ...]

    def a_to_b(self) -> Dict[int, int]:
        return {a: b for a, b, _ in self.pairs}


def _why(key: str, other_side: str) -> str:
    if key.startswith("n/"):
        return (f"no var named {key[2:]!r} in {other_side} (fused into a neighbour, removed, or renamed by the "
                "rewrite)")
    return (f"its structure from the inputs has no twin in {other_side} (an input or constant of it changed: a "
            "relayout, a fusion, a float16 conversion, or an operator the rewrite inserted)")


def match_keys(a: Mapping[int, str], b: Mapping[int, str], only: Optional[Sequence[int]] = None) -> KeyMatch:
    """Pair the vars of two runs by equal keys (``a``, ``b``: :func:`operator_keys` results,
    in execution order). ``only``: the ids of A that take part (e.g. computed float vars)."""
    by_key_b = {k: vid for vid, k in b.items()}
    ids_a = list(a) if only is None else [i for i in only if i in a]
    pairs: List[Tuple[int, int, str]] = []
    unmatched_a: List[Tuple[int, str]] = []
    for vid in ids_a:
        k = a[vid]
        if k in by_key_b:
            pairs.append((vid, by_key_b[k], k))
        else:
            unmatched_a.append((vid, _why(k, "B")))
    keys_a = {a[i] for i in ids_a}
    unmatched_b = tuple((vid, _why(k, "A")) for vid, k in b.items() if k not in keys_a)
    return KeyMatch(tuple(pairs), tuple(unmatched_a), unmatched_b)
