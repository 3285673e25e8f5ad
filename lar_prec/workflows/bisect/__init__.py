"""``lar-prec bisect``: which build of load_and_run brought a change (:mod:`.bisect`); each build
is judged with ``lar-prec diff``'s machinery (:mod:`lar_prec.workflows.diff`)."""
