"""Opcode family `ib`: pure specs (specs.py) beside native executors (executors.py)."""
