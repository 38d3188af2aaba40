"""Root pytest configuration shared by every test folder."""
