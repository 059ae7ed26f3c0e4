"""Device layer: backends (cuda, host), kernel library, replay, fusion, emitc."""
