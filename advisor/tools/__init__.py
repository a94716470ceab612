"""The Nsight tools themselves: finding their binaries, the options a version accepts, running
their importers and exporters, and reading their error messages.

Shared by ``collect/`` (which profiles with them), ``load/`` (which reads reports through them)
and ``analyze/`` (which shows the commands it would run); it interprets no profile.
"""
