"""dmn.lab — see DESIGN §2."""
