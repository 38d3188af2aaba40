"""Opcode family `share`: pure specs (specs.py) beside native executors (executors.py)."""
