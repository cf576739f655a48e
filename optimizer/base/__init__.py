"""The base layer: units and the names every layer shares, the contract terms as one table,
errors with their exit codes, reading files within limits, writing them atomically."""
