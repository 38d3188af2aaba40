"""Opcode family `rdma`: pure specs (specs.py) beside native executors (executors.py)."""
