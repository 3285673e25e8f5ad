"""The commands on the store: ``lar-prec check``, ``baseline update``, ``history``, ``store add``
and what ``--store`` writes (:mod:`.history`), and the regression rule they judge by, with the
baseline file (:mod:`.rule`)."""
