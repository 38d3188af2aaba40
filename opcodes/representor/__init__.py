"""Opcode family `representor`: pure specs (specs.py) beside native executors (executors.py)."""
