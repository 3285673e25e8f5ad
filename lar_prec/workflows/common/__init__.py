"""What several commands share: preparing an analysis and running its plan (:mod:`.analysis`),
the verdicts naive-vs-default and diff add to a report (:mod:`.verdicts`), and a wrong value made
once more and compared bit for bit (:mod:`.nondeterminism`)."""
