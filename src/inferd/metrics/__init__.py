"""Prometheus metrics with Triton's names, read from the core's statistics at scrape time."""
