"""The bundled load_and_run (``python -m lar_prec.lar``) and MegEngine's graph rewrites.

:mod:`.main` runs a model on megenginelite, :mod:`.flags` is its command line,
:mod:`.graphopts` the graph rewrites for options lite lacks, :mod:`.layerwise_build` builds the
layerwise model. Kept empty so ``python -m lar_prec.lar`` starts fast: import the modules.
"""
