"""Analyzers of distributed runs: the ranks compared, and the collectives between them."""
