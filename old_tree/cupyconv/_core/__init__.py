"""Core layer: problem geometry, operand checks, kernel registry, launch mechanics, timing and
verification helpers.  Imports nothing else of the package."""
