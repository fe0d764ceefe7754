"""The browser dashboard: login, the runs list and one aligned timeline per run."""
