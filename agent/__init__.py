"""dmn.agent — see design §2."""
