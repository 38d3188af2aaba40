"""dmn.controller — see design §2."""
