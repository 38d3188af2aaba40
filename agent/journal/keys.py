"""Key layout of the node journal (RocksDB, raw byte keys, JSON values).

Keys are ``/``-separated ASCII paths. Every variable component is escaped (``%`` → ``%25``,
``/`` → ``%2F``) so that a prefix scan of ``<family>/<component>/`` never matches a longer
component by accident. Families and the lookups they serve:

==========================================  ================================================
key                                         value / lookup it serves
==========================================  ================================================
``meta/schema``                             ``{"version": N}``; newer than this build → refuse
``prep/<claimUID>/<fingerprint>``           PreparationRecord; NodePrepare/Unprepare by claim
                                            UID + allocation fingerprint (prefix ``prep/<uid>/``
                                            finds every fingerprint of one claim)
``att/<nodeUID>/<bootID>/<podUID>/<sbx>``   AttachmentRecord; by attachment identity (prefix
                                            ``att/<node>/<boot>/<pod>/`` finds a Pod's sandboxes)
``op/<opID>``                               operation header (bound program, digests,
                                            authorisations, state, result, failure)
``op/<opID>/e/<index:05d>``                 one effect record (state, before-image, inputs,
                                            outputs); prefix scan loads an operation in order
``opscope/<scope>/<opID>``                  ``{}``; the operations of a preparation/attachment
``open/<opID>``                             ``{"seq": n}`` while the operation is unfinished;
                                            start-up recovery scans only this family
``fence/<scope>``                           terminal fence of a scope (removal happened)
``share/<parentInventoryID>/<claimUID>/<shareID>``  ShareRef; by parent inventory id
``resv/<resource>``                         Reservation; one exclusive holder per resource
``pin/<attachmentID>``                      NamespacePin; by attachment id
==========================================  ================================================

``<attachmentID>`` is :func:`attachment_id`: ``att-`` and 32 hex digits of a SHA-256 over the
four identity components. It names the pin file, the attachment's operation scope
(``attachment/<attachmentID>``) and its NetworkAttachmentStatus, so it must be a safe file
name whatever the runtime put in the sandbox id. (Until schema version 2 this module also
had an ``attachment_id`` that returned the escaped ``att/`` key tail — a string with ``/``
that no pin could be named by — while the coordinator used its own hash; the hash was the
one actually written, so it is the one that stayed.)
"""

from __future__ import annotations

import hashlib

from dmn.agent.journal.records import AttachmentIdentity

SCHEMA = b"meta/schema"


def esc(component: str) -> str:
    return component.replace("%", "%25").replace("/", "%2F")


def unesc(component: str) -> str:
    return component.replace("%2F", "/").replace("%25", "%")


def key(*components: str) -> bytes:
    """``key("prep", uid, fp)`` → ``b"prep/<uid>/<fp>"``; the family name is not escaped."""
    family, *rest = components
    return "/".join([family, *(esc(c) for c in rest)]).encode("utf-8")


def prefix(*components: str) -> bytes:
    return key(*components) + b"/"


def split(raw: bytes) -> list[str]:
    family, *rest = raw.decode("utf-8").split("/")
    return [family, *(unesc(c) for c in rest)]


def attachment_id(identity: AttachmentIdentity) -> str:
    """The one id of a sandbox incarnation: pin-safe (``att-`` + 32 hex digits), never a
    runtime-supplied string verbatim, different for every identity component."""
    raw = f"{identity.node_uid}/{identity.boot_id}/{identity.pod_uid}/{identity.sandbox_id}"
    return "att-" + hashlib.sha256(raw.encode()).hexdigest()[:32]


def attachment_key(identity: AttachmentIdentity) -> bytes:
    """``att/<node>/<boot>/<pod>/<sandbox>`` (escaped), so a prefix finds a Pod's sandboxes."""
    return key("att", identity.node_uid, identity.boot_id, identity.pod_uid, identity.sandbox_id)


def pin_key(attachment: str) -> bytes:
    return key("pin", attachment)


def operation_key(op_id: str) -> bytes:
    return key("op", op_id)


def effect_key(op_id: str, index: int) -> bytes:
    return key("op", op_id, "e", f"{index:05d}")


def effect_prefix(op_id: str) -> bytes:
    return prefix("op", op_id, "e")
