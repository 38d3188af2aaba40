"""dra-multi-network: a Kubernetes DRA driver for secondary Pod networks.

The sub-packages (``dmn.interpreter``, ``dmn.opcodes``, ``dmn.api``, ...) are the
repository's top-level folders, linked here so that everything installs under one
import namespace (design §2).

gRPC's fork support is off unless the environment says otherwise: the driver's processes
fork only for pyroute2's namespace helpers, which never use gRPC, and with it on every such
fork while the node agent serves logs ``fork_posix.cc ... skipping fork() handlers``.
gRPC reads the setting when ``grpc`` is first imported, and every import of it in this
project comes after this package's.
"""

import os

os.environ.setdefault("GRPC_ENABLE_FORK_SUPPORT", "false")

DRIVER_NAME = "dra-multi-network.schseba.github.io"
API_GROUP = "networking.dra-multi-network.schseba.github.io"
API_VERSION = "v1alpha1"
EFFECTS_API_VERSION = "effects.dra-multi-network.schseba.github.io/v1alpha1"
NRI_PLUGIN_NAME = "dra-multi-network"
NAMESPACE = "dra-multi-network"

__version__ = "0.1.0"
