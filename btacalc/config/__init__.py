"""Configuration as validated data: models, hardware profiles and the execution (run options, layout, batch limits)."""
