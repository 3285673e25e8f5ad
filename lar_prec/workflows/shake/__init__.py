"""``lar-prec shake``: the repeated runs and their verdict (:mod:`.shake`), what each mode runs
(:mod:`.modes`), the disk bound (:mod:`.store`), the algorithm of each run (:mod:`.algos`), the
runs folded into one tree (:mod:`.jitter`) and the cause vocabulary of jitter (:mod:`.causes`)."""
