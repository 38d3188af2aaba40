"""dra-multi-network: a Kubernetes DRA driver for secondary Pod networks.

The sub-packages (``dmn.interpreter``, ``dmn.opcodes``, ``dmn.api``, ...) are the
repository's top-level folders, linked here so that everything installs under one
import namespace (design §2).
"""

DRIVER_NAME = "dra-multi-network.schseba.github.io"
API_GROUP = "networking.dra-multi-network.schseba.github.io"
API_VERSION = "v1alpha1"
EFFECTS_API_VERSION = "effects.dra-multi-network.schseba.github.io/v1alpha1"
NRI_PLUGIN_NAME = "dra-multi-network"
NAMESPACE = "dra-multi-network"

__version__ = "0.1.0"
