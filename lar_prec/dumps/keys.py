"""The stable operator key (:mod:`lar_prec.opkey`) of every var of a ``--bin-io-dump`` folder:
its titles give each var's name, operator, type, shape and inputs, and each constant's bytes
give its value hash. What the store keys a summary's rows by and ``diff``/``bisect`` pair two
builds' dumps by when their graphs differ.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Dict, Optional, Tuple

from lar_prec.dumps.folder import DumpFolder
from lar_prec.opkey import operator_keys, value_hash, var_role
from lar_prec.records import PathLike

__all__ = ["dump_keys"]


@dataclass(frozen=True)
class _Node:
    id: int
    name: str
    opr: str
    opr_type: str
    shape: Tuple[int, ...]
    inputs: Tuple[int, ...]
    slot: int = 0
    value_infer: Optional[int] = None


def dump_keys(dump_dir: PathLike) -> Dict[int, str]:
    """Var id -> stable operator key for every var of a dump folder (constants hashed from
    their bytes).

    Raises:
        LarPrecError: the folder or a file in it cannot be read as a dump; OSError.
    """
    folder = DumpFolder(dump_dir)
    nodes, hashes = [], {}
    for d in folder:
        v = d.var
        node = _Node(v.id, v.name, v.owner, v.opr_type, tuple(v.shape), tuple(u.id for u in d.inputs), v.slot,
                     v.value_infer)
        nodes.append(node)
        if var_role(node) == "const":
            with open(d.file, "rb") as fh:
                fh.seek(d.data_offset)
                hashes[v.id] = value_hash(fh.read(d.nbytes))
    return operator_keys(nodes, hashes)
