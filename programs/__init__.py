"""dmn.programs — see DESIGN §2."""
