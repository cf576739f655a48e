"""Serving: configs (model × accelerator × parallel degree × role), the TTFT path (budget and
prediction), token billing against GPU-seconds, and a model's serving table."""
