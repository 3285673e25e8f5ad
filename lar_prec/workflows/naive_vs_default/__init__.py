"""``lar-prec naive-vs-default``: the reference kernels against the default ones
(:mod:`.naive_vs_default`)."""
