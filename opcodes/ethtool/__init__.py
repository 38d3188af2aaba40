"""Opcode family `ethtool`: pure specs (specs.py) beside native executors (executors.py)."""
