"""Opcode family `vfio`: pure specs (specs.py) beside native executors (executors.py)."""
