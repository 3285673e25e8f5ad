"""``lar-prec diff``: the same model and input in two environments (builds, devices, flags,
environment variables), each repeated to measure its own jitter; per operator equal, within
jitter, within rounding (each side within the operator's bound of the naive reference:
:mod:`.rounding`), outside or nonfinite, and the first operator outside. ``lar-prec bisect``
(:mod:`lar_prec.workflows.bisect.bisect`) judges each build with the same machinery."""
