"""Qt widgets, one per model object."""
