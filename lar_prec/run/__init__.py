"""Stage 1: running load_and_run, one fresh process per run, each in its own folder.

Configurations and which load_and_run (:mod:`.config`), command lines (:mod:`.argv`), the
inputs of an analysis (:mod:`.inputs`), folders (:mod:`.dirs`), the run record and run.json
(:mod:`.record`), the steps of one run (:mod:`.steps`) executed as a local process
(:mod:`.process`) or on a device (:mod:`.device`), and :func:`.once.run_once` that chains them.
``lar_prec.runner`` re-exports the public names.
"""
