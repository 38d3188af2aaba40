"""Root pytest configuration shared by every test folder."""

from tests import netns_sockets

pytest_plugins = ["tests.kernel_lab.harness"]

netns_sockets.install()
