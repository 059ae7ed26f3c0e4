"""tapescope application layer: CLI, main window, session controller."""
