"""``lar-prec sweep``: the option sweep (:mod:`.sweep`), the options it tries and its records
(:mod:`.options`), one option's dump against the reference (:mod:`.analysis`), local error under
each option (:mod:`.local`) and the sweep's Report (:mod:`.report`)."""
