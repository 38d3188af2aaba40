"""Operator-facing signals shared by the node agent and the controller.

``metrics`` (Prometheus metrics through ``prometheus-client``), ``health`` (the HTTP server
for ``/metrics``, ``/livez`` and ``/readyz`` with named, honest conditions), ``json_logs``
(structured JSON log lines carrying claim, Pod, operation and effect ids). Kubernetes Events
are written by :class:`dmn.api.cluster.events.EventRecorder`. This package imports neither
the agent nor the controller; they import it.
"""
