"""Toy environments for tests."""
