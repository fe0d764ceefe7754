"""Fixes measured A/B: the engine, its probes and statistics, knobs, the jobs runner."""
