"""memory-router domain library: memory types, configuration, store contract and backends,
embedding identity, retrieval, reflection gate, injection and extraction.

Pure Python: nothing here imports Ray. ``deployments/`` wraps these pieces in Ray Serve.
"""
