"""The lab's Kubernetes API server (DESIGN §6): real client code runs against it unchanged.

Start API: ``LabApiServer(port=0).start() -> url``, ``.stop()``, context manager, and the
blocking ``serve(host, port)``. See :mod:`.server` for options and :mod:`.store` for the
semantics implemented.
"""

from .identity import LAB_ADMIN, UserInfo
from .server import LabApiServer, serve
from .store import Store

__all__ = ["LAB_ADMIN", "LabApiServer", "Store", "UserInfo", "serve"]
