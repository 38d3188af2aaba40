"""dmn.lab — see design §2."""
