"""The variants benchmark: families of generated training scripts, each with a planted problem written many ways and
its fixed twin, run through ``advisor diagnose`` and timed without it (see README.md beside this file).

- ``program``: the pieces every generated script is built from (models, loops, settings, the step-time harness);
- ``families/``: one module per problem family, each a ``Family`` that picks structurally distinct variants;
- ``generate``: writes the scripts, their twins and ``manifest.json`` for a seed;
- ``measure``: times variant and twin without the advisor (the truth);
- ``run``: diagnoses each, compares with the truth and prints a table per family.
"""
