"""The experiments of results/README.md, one module each, run from the repository root:

    python -m lab.experiments.e1_flips --quick

``common``, ``stats`` and ``output`` are their shared parts (runs, statistics, figures)."""
