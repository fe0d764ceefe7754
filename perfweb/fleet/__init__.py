"""Fleet views of a project: the Prometheus export of its live runs."""
