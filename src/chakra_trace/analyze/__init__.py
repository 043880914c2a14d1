"""Analyses over traces: summaries and validation."""
