"""Renderings at the edge: rich tables, CSV, plots and safe file writing."""
