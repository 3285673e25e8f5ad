"""The commands users come for, each a library function that chains the stages:
:func:`naive_vs_default`, :func:`shake`, :func:`sweep`, :func:`devices`, :func:`diff`,
:func:`bisect`, :func:`reduce`. Each command (or group of commands) has its folder, named after
it: ``naive_vs_default/``, ``shake/``, ``sweep/``, ``devices/``, ``compare/`` (``compare``,
``tree``), ``triage/`` (``list``, ``node``), ``diff/``, ``bisect/``, ``reduce/``, ``precision/``
(``mixed``, ``quant``), ``history/`` (``check``, ``history``, the store's commands); what several
share is in ``common/``. ``from lar_prec.workflows import naive_vs_default`` is the path the
README documented."""
from __future__ import annotations

import importlib
import sys
from types import ModuleType
from typing import Any

# name -> the module that defines it, imported on first use: ``lar-prec compare`` and ``tree``
# live in this package too and must not pay for loading every other workflow (~40 ms).
_LAZY = {
    "Analysis": "lar_prec.workflows.common.analysis",
    "bisect": "lar_prec.workflows.bisect.bisect",
    "diff": "lar_prec.workflows.diff.diff",
    "devices": "lar_prec.workflows.devices.devices",
    "parse_targets": "lar_prec.workflows.devices.devices",
    "naive_vs_default": "lar_prec.workflows.naive_vs_default.naive_vs_default",
    "reduce": "lar_prec.workflows.reduce.reduce",
    "shake": "lar_prec.workflows.shake.shake",
    "sweep": "lar_prec.workflows.sweep.sweep",
    "SweepAnalysis": "lar_prec.workflows.sweep.sweep",
}

__all__ = sorted(_LAZY)


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


class _Workflows(ModuleType):
    """This package's module type. Importing a submodule binds its name on the package
    (``workflows.devices = <module devices>``, ``workflows.sweep = <package sweep>``); where a
    function has that name, the package keeps the function, so ``from lar_prec.workflows import
    sweep`` is always callable (as when the functions were imported eagerly here). A package
    named like its function is not bound: the function loads on first use (``__getattr__``)."""

    def __setattr__(self, name: str, value: Any) -> None:
        module = _LAZY.get(name)
        if isinstance(value, ModuleType) and module is not None:
            if module == value.__name__:
                value = getattr(value, name)
            elif module.startswith(value.__name__ + "."):
                return
        super().__setattr__(name, value)


sys.modules[__name__].__class__ = _Workflows
