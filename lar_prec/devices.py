"""``lar-prec devices`` from Python, under the import path the README documented
(``from lar_prec.devices import devices, parse_targets``). The code lives in
:mod:`lar_prec.workflows.devices.devices`; nothing inside the package imports this module."""
from __future__ import annotations

from lar_prec.workflows.devices.devices import Target, devices, parse_targets

__all__ = ["Target", "devices", "parse_targets"]
