"""The package version, in one place (the tuning cache and the profiler record it)."""

__version__ = "0.1.0"
