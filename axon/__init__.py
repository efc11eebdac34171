"""Axon."""
