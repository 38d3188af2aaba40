"""The one error kernel access raises: a refusal or failure with a stable reason code.

Opcode executors raise and catch the same class under the name ``ExecutorError``
(:mod:`dmn.opcodes.executor`), so what the host layer refuses (``E_NETNS_GONE``,
``E_NETLINK_<errno>``, ...) reaches the runner as the effect's failure code unchanged.
"""

from __future__ import annotations


class HostError(Exception):
    """A kernel request was refused or failed; ``code`` is a stable reason code."""

    def __init__(self, code: str, message: str) -> None:
        self.code = code
        super().__init__(message)
