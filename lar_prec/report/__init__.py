"""Stage 6: one Report model of every command's result, written as JSON (:mod:`.model`),
printed in the terminal (:mod:`.terminal`) and drawn as an offline HTML page (:mod:`.html`,
``page/``)."""
