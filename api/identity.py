"""Project identity constants shared by every API object (design §1).

These strings are part of the public contract: CRD groups, the DRA driver name that
DeviceClass selectors pin, the finalizer on revisions and the labels the controller
puts on what it generates. Change none of them without a migration.
"""

from __future__ import annotations

GROUP = "networking.dra-multi-network.schseba.github.io"
VERSION = "v1alpha1"
API_VERSION = f"{GROUP}/{VERSION}"
DRIVER = "dra-multi-network.schseba.github.io"
EFFECTS_API_VERSION = "effects.dra-multi-network.schseba.github.io/v1alpha1"

#: Finalizer the controller keeps on a revision until verified release (design §4.6).
REVISION_FINALIZER = f"{GROUP}/revision-retention"

#: Labels on generated objects (revision and DeviceClass).
LABEL_TOPOLOGY = f"{DRIVER}/topology"
LABEL_TOPOLOGY_UID = f"{DRIVER}/topology-uid"
LABEL_REVISION = f"{DRIVER}/revision"
LABEL_ROOT_STEP = f"{DRIVER}/root-step"
LABEL_MANAGED_BY = "app.kubernetes.io/managed-by"
#: On a topology root's stable DeviceClass (value "true"): the class whose name never
#: changes and whose selector and root binding follow the newest Ready revision.
LABEL_STABLE_CLASS = f"{DRIVER}/stable-class"
MANAGED_BY = "dra-multi-network-controller"

#: Annotation carrying the full revision digest on generated objects.
ANNOTATION_DIGEST = f"{DRIVER}/digest"
#: Annotation carrying the full topology name on a stable DeviceClass (labels are cut to 63).
ANNOTATION_TOPOLOGY = f"{DRIVER}/topology"
