"""The agent's bottom layer: logging, settings, bounded buffers, the sanitiser, import hooks.

It imports nothing of the agent above it (pyproject.toml's import-linter contract), so every
other part (runtime, collectors, delivery, ab) can use it without importing one another.
"""
