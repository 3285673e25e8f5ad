"""Readers (and a writer) for what ``load_and_run`` dumps, under the name the project was
specified with. The code lives in :mod:`lar_prec.dumps`; nothing inside the package imports
this module.

Example::

    from lar_prec.iodump import DumpFolder, read_text_dump

    folder = DumpFolder("run/naive/dump")
    for dump in folder:                      # execution order
        print(dump.var.id, dump.var.name, dump.var.opr_type, dump.array().max())
    text = read_text_dump("run/naive/io.txt")
    text.last()[11].val.mean
"""
from __future__ import annotations

from lar_prec.dumps.binary import (
    INCOMPLETE_MARKER,
    MAX_NDIM,
    BinaryDump,
    dump_file_name,
    read_binary_dump,
    write_binary_dump,
)
from lar_prec.dumps.dtypes import DTYPES, DType, dtype_by_name
from lar_prec.dumps.folder import DumpFolder
from lar_prec.dumps.textdump import TextDep, TextDump, TextStats, TextVar, read_text_dump
from lar_prec.dumps.titles import HEADER_SIZE, VarInfo, contiguous_layout, format_title, parse_title
from lar_prec.graph import topological_order

__all__ = [
    "DType", "DTYPES", "dtype_by_name", "VarInfo", "BinaryDump", "read_binary_dump", "write_binary_dump",
    "dump_file_name", "contiguous_layout", "format_title", "parse_title", "DumpFolder", "TextDep", "TextStats",
    "TextVar", "TextDump", "read_text_dump", "topological_order", "HEADER_SIZE", "MAX_NDIM", "INCOMPLETE_MARKER",
]
