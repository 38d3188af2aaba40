"""Opcode family `sysctl`: pure specs (specs.py) beside native executors (executors.py)."""
