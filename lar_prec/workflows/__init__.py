"""The commands users come for, each a library function that chains the stages:
:func:`naive_vs_default`, :func:`shake`, :func:`sweep`, :func:`devices`, and the
``compare``/``tree`` commands on existing dumps (:mod:`.compare`, :mod:`.tree`).
``from lar_prec.workflows import naive_vs_default`` is the path the README documented."""
from __future__ import annotations

from lar_prec.workflows.common import Analysis
from lar_prec.workflows.devices import devices, parse_targets
from lar_prec.workflows.naive_vs_default import naive_vs_default
from lar_prec.workflows.shake import shake
from lar_prec.workflows.sweep import SweepAnalysis, sweep

__all__ = ["Analysis", "SweepAnalysis", "devices", "naive_vs_default", "parse_targets", "shake", "sweep"]
