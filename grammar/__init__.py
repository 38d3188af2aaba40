"""dmn.grammar — see DESIGN §2."""
