"""dmn.grammar — see design §2."""
