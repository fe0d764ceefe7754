"""Fleet views: GPU-hours wasted and what they cost (the waste page and API), and the
Prometheus export of live runs (/metrics)."""
