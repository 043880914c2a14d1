"""Analyses over traces: summaries, validation, critical path, breakdowns, collectives."""
