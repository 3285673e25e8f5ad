"""The commands on existing dumps (nothing runs but, with ``--model``, the layerwise model):
``lar-prec compare`` (:mod:`.compare`; with ``--model``, rooted by local error: :mod:`.local`)
and ``lar-prec tree`` on ``compare_binary_iodump``'s text (:mod:`.tree`)."""
