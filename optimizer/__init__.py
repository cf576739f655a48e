"""fleetplan's library: scenario in → plan out. The public API is the `fleetplan` package."""
