"""The agent inside one process: settings, step timing, torch hooks and facts."""
