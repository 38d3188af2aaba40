"""dmn.api — see design §2."""
