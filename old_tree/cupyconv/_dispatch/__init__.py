"""Dispatch layer: per-pass algorithm registries, the choice between them (heuristic or tuned), and
the cache of prepared calls.  Sits between the public API and the kernel families."""
