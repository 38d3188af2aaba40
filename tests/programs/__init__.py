"""Builtin plugin program tests."""
