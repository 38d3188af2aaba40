"""Root pytest configuration shared by every test folder."""

pytest_plugins = ["tests.kernel_lab.harness"]
