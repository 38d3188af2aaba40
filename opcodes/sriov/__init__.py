"""Opcode family `sriov`: pure specs (specs.py) beside native executors (executors.py)."""
