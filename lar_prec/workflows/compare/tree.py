"""``lar-prec tree``: the roots of what MegEngine's ``compare_binary_iodump`` printed, without
``accuracy_shake_var_tree``'s bugs ('not finite' and 'shape mismatch' failures count, any file
order works, vars without inputs can be roots)."""
from __future__ import annotations

from typing import Dict

from lar_prec.diagnosis.megcompat import tree_from_megengine_diff
from lar_prec.errors import DumpFormatError
from lar_prec.report.model import Report, from_tree


def tree_report(diff_txt: str) -> Report:
    """The report of one ``compare_binary_iodump`` output file.

    Raises:
        DumpFormatError: the file holds no failure, only a traceback (exit 2).
    """
    tree, md = tree_from_megengine_diff(diff_txt)
    if md.crashed and not md.entries:
        raise DumpFormatError(diff_txt, None, "compare_binary_iodump failures", f"only a traceback ({md.crashed})")
    kinds: Dict[str, int] = {}
    for e in md.entries:
        kinds[e.kind] = kinds.get(e.kind, 0) + 1
    verdict = f"{'divergence found' if tree.diverged else 'no divergence'}: {len(tree.diffs)} differing var(s) in {diff_txt}"
    verdict += " (" + ", ".join(f"{v} {k}" for k, v in kinds.items()) + ")" if kinds else ""
    roots = tree.roots()
    if roots:
        verdict += f"; root: {roots[0].name} ({roots[0].opr_type}, var {roots[0].id})"
        verdict += f" (+{len(roots) - 1} more)" if len(roots) > 1 else ""
    notes = [f"compare_binary_iodump stopped with {md.crashed}; later files were not compared"] if md.crashed else []
    return from_tree(tree, command="tree", verdict=verdict, notes=notes,
                     extra={"exit_code": int(tree.diverged), "crashed": md.crashed, "source": diff_txt})
