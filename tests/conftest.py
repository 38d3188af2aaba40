"""Root pytest configuration shared by every test folder."""

from tests import crash_points, netns_sockets

pytest_plugins = ["tests.kernel_lab.harness", "tests.e2e_beside"]

netns_sockets.install()


def pytest_report_header() -> str:
    return crash_points.describe()
