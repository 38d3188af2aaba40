"""dmn.opcodes — see DESIGN §2."""
