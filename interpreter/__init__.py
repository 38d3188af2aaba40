"""dmn.interpreter — see DESIGN §2."""
