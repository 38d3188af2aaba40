"""Opcode spec registry tests."""
