"""Analyzers of Nsight Compute results: the kernel stage."""
