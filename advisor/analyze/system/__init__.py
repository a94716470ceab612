"""Analyzers of Nsight Systems exports: the system stage."""
