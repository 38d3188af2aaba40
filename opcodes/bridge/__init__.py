"""Opcode family `bridge`: pure specs (specs.py) beside native executors (executors.py)."""
