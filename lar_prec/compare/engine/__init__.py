"""The streaming comparison engine: every metric in one pass over chunks (:mod:`.scan`,
:mod:`.chunks`), how values are read (:mod:`.io`), planned (:mod:`.plan`) and run
(:mod:`.workers`), and the optional C kernel (``_kernel.c``)."""
