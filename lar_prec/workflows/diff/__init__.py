"""``lar-prec diff``: the same model and input in two environments (builds, devices, flags,
environment variables), each repeated to measure its own jitter; per operator equal, within
jitter, outside jitter or nonfinite, and the first operator outside jitter. ``lar-prec bisect``
(:mod:`lar_prec.workflows.bisect`) judges each build with the same machinery."""
