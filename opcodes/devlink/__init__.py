"""Opcode family `devlink`: pure specs (specs.py) beside native executors (executors.py)."""
