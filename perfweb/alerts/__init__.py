"""Team alerts: rules per project, evaluated by beat, delivered through small channel modules."""
