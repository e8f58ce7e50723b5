"""Helpers for tests and benchmarks (never imported by the service itself)."""
