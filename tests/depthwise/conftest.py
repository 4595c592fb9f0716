"""Fixtures of the depthwise tests: ``host_route`` (host_route.py)."""

from host_route import host_route  # noqa: F401  (a fixture, registered by the import)
