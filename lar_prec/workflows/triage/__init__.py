"""The commands on a finished analysis (nothing runs): ``lar-prec list`` and ``lar-prec node``
(:mod:`.triage`)."""
