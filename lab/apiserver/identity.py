"""Who is calling: the user a request is attributed to, for admission ``userInfo``.

The lab does no authorization. Authentication is optional: with a token table, a request
must carry ``Authorization: Bearer <token>`` of a known user (else 401); without one, every
request is the lab administrator. ``Impersonate-User`` / ``Impersonate-Group`` headers are
honoured either way, so tests can act as the controller's service account.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class UserInfo:
    username: str
    groups: tuple[str, ...] = ()
    uid: str = ""
    extra: dict[str, list[str]] = field(default_factory=dict, compare=False, hash=False)

    def as_dict(self) -> dict[str, Any]:
        body: dict[str, Any] = {"username": self.username, "groups": list(self.groups)}
        if self.uid:
            body["uid"] = self.uid
        if self.extra:
            body["extra"] = self.extra
        return body


LAB_ADMIN = UserInfo("lab-admin", ("system:masters", "system:authenticated"))
