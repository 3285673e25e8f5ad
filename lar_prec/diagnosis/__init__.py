"""Stage 5: where error is made. The variable tree and its roots (:mod:`.tree`), noise floors
and local error through a layerwise model (:mod:`.floors`, :mod:`.local`,
:mod:`.local_analysis`), repro folders (:mod:`.replay`) and MegEngine's own formats
(:mod:`.megcompat`)."""
