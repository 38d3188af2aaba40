"""Server TLS from operator-supplied files, reloaded when they change.

Rotation: replace the certificate and key files (e.g. a cert-manager Secret volume
update, or ``mv`` of new files into place). Every new connection checks the files'
identity (inode, size, modification time in ns — a rename or Secret symlink swap changes
the inode even when coarse timestamps do not move); when it changed, a new SSL context is
built from them and used for that and later connections. Existing connections keep their
session. If the new pair cannot be loaded (half-written files), the previous context stays
in use and the error is logged, so a rotation never takes the webhook down.
"""

from __future__ import annotations

import logging
import os
import ssl
import threading

log = logging.getLogger(__name__)


class ReloadingTLS:
    def __init__(self, cert_file: str, key_file: str) -> None:
        self.cert_file = cert_file
        self.key_file = key_file
        self._lock = threading.Lock()
        self._stamp: tuple[tuple[int, int, int], ...] | None = None
        self._context: ssl.SSLContext | None = None
        self.reloads = 0
        self.context()  # fail fast at start if the files are unusable

    def _mtimes(self) -> tuple[tuple[int, int, int], ...]:
        stats = (os.stat(self.cert_file), os.stat(self.key_file))
        return tuple((st.st_ino, st.st_size, st.st_mtime_ns) for st in stats)

    def context(self) -> ssl.SSLContext:
        with self._lock:
            try:
                stamp = self._mtimes()
            except OSError as exc:
                if self._context is None:
                    raise
                log.warning("webhook certificate unreadable; keeping previous error=%s", exc)
                return self._context
            if self._context is None or stamp != self._stamp:
                ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
                ctx.minimum_version = ssl.TLSVersion.TLSv1_2
                try:
                    ctx.load_cert_chain(self.cert_file, self.key_file)
                except (OSError, ssl.SSLError) as exc:
                    if self._context is None:
                        raise
                    log.warning("webhook certificate reload failed; keeping previous error=%s", exc)
                    return self._context
                if self._context is not None:
                    log.info("webhook certificate reloaded cert=%s", self.cert_file)
                    self.reloads += 1
                self._context = ctx
                self._stamp = stamp
            return self._context
