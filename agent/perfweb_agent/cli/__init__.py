"""The `perf-agent` commands: attach, upload, doctor, ab, runner."""
