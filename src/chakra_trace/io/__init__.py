"""Trace files at the edges: `.et` (protobuf stream) and JSON."""
