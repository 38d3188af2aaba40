"""dmn.opcodes — see design §2."""
