"""Pictures of traces: graph export (DOT/GraphML) and static plots; submodules import their heavy deps lazily."""
