"""``lar-prec reduce``: the smallest model that still fails the way an analysis found
(:mod:`.reduce`; the finding :mod:`.finding`, the parts :mod:`.candidate`, the search :mod:`.search`)."""
