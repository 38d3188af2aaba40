"""The apps/v1 workload kinds the upstream lab reads and deletes (our chart's DaemonSet and
Deployment when it is installed by Helm); the shared resource table has no apps/v1 kinds."""

from __future__ import annotations

from dmn.api.cluster.resources import Resource

DAEMON_SETS = Resource("apps", "v1", "daemonsets", "DaemonSet", True)
DEPLOYMENTS = Resource("apps", "v1", "deployments", "Deployment", True)
