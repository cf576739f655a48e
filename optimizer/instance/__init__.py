"""The instance: everything the MIP needs as index sets and parameter tables, and the
pre-flight checks that explain, before any solve, why a scenario cannot be planned."""
