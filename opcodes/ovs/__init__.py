"""Opcode family `ovs`: pure specs (specs.py) beside native executors (executors.py)."""
