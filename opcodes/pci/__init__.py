"""Opcode family `pci`: pure specs (specs.py) beside native executors (executors.py)."""
