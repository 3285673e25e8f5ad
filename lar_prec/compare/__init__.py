"""Stages 3 and 4: which var of A goes with which of B (:mod:`.pairing`, :mod:`.namepair`,
:mod:`.relayout`), every metric of every pair (:mod:`.metrics`, the engine in :mod:`.engine`)
and the threshold (:mod:`.threshold`); :mod:`.folders` and :mod:`.arrays` chain them into a
:class:`~.records.Comparison`. numpy only, no megengine (but for an ambiguous layout)."""
