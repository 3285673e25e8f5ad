"""The variable tree of a comparison and its roots, under the name the project was specified
with; also MegEngine's ``accuracy_shake_var_tree`` API (``parse``, ``varNode``) for scripts
written for it. The code lives in :mod:`lar_prec.diagnosis.tree` and
:mod:`lar_prec.diagnosis.megcompat`; nothing inside the package imports this module.

Example::

    from lar_prec.vartree import VarTree, parse, varNode

    tree = VarTree.from_folders("vars_naive", "vars_default")
    for root in tree.roots():
        print(root.id, root.name, root.max_err)
    nodes = parse("diff.txt")                       # compare_binary_iodump's output
    varNode.get_varNode("id:3").get_dependence_list()
"""
from __future__ import annotations

from lar_prec.diagnosis.megcompat import MegDiff, MegEntry, parse, read_megengine_diff, tree_from_megengine_diff, varNode
from lar_prec.diagnosis.tree import Root, VarTree

__all__ = ["Root", "VarTree", "parse", "varNode", "MegDiff", "MegEntry", "read_megengine_diff", "tree_from_megengine_diff"]
