"""Command-line tools: ``python -m cupyconv {demo,profile,compile-check}`` and what they measure
against."""
