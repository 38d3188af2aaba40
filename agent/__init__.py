"""dmn.agent — see DESIGN §2."""
