"""Getting the agent's data out: sender threads, outbox, HTTP, spill, upload."""
