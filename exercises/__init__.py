"""The classroom exercises of EXERCISES.md, run from the repository root:

    python -m exercises.problems     # your tables
    python -m exercises.check        # check your work"""
