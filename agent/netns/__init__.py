"""Namespace pins: sandbox network namespaces bind-mounted under the agent's state directory."""
