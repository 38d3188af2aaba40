"""Fixtures of the journal tests: the crash fork server and a fast crash directory."""

from tests.journal.crashkit import crash_dir, server

__all__ = ["crash_dir", "server"]
