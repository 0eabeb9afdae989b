"""Shared basics."""
