"""dmn.api — see DESIGN §2."""
