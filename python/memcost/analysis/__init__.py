"""Summaries computed from raw probe samples, one module per experiment."""
