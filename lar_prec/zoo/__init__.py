"""The model zoo (``lar-prec zoo MANIFEST``): a TOML manifest of models, analyses, configurations,
builds and devices expanded into tasks (one analysis of one model on one build on one device,
identified by a hash of what it runs), run on Dask distributed (an embedded LocalCluster, or a
team's scheduler) by the single-model workflows, and written into the results store as results
arrive. The only package that imports Dask (an import-linter contract). docs/zoo.md."""
