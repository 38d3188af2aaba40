"""dmn.controller — see DESIGN §2."""
