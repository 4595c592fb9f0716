"""Internals of :mod:`cupyconv.ndimage`: boundary modes, argument rules, kernel modules, passes."""
