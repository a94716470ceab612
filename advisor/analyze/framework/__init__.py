"""Analyzers of PyTorch Profiler (Kineto) traces, one trace at a time: the framework stage."""
