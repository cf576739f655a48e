"""`fleetplan …`: the flags, checked like scenario fields, and the commands."""

from optimizer.cli.main import main

__all__ = ["main"]
