"""Opcode family `linux`: pure specs (specs.py) beside native executors (executors.py)."""
