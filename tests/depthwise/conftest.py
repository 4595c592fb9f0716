"""Fixtures of the depthwise tests: ``host_route``, ``no_bands`` and ``bands_preferred``
(host_route.py)."""

from host_route import bands_preferred, host_route, no_bands  # noqa: F401  (fixtures, registered by the import)
