"""Fixtures of the depthwise tests: ``host_route`` and ``no_bands`` (host_route.py)."""

from host_route import host_route, no_bands  # noqa: F401  (fixtures, registered by the import)
