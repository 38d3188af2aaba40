"""Multus automatic mode, the pure core (issue 41): template rendering, template resolution,
binding names, Pod selection merge and release, and Multus' attachment status.

Every module is a pure function of its inputs: no I/O, no clock, no logging. The node agent
reads the API, calls these, and journals and applies the results. Every refusal is a
:class:`~dmn.api.multus.errors.MultusError` with a registered reason code and the path of the
offending value; no input (any text as a template or an annotation) raises anything else.

* :mod:`.template` — a template NAD bound to one allocated device: frozen bytes and digest;
* :mod:`.resolution` — which template a device binds to (device attribute vs class);
* :mod:`.names` — binding key, shadow NAD name, interface names;
* :mod:`.selections` — the Pod's ``k8s.v1.cni.cncf.io/networks`` merge and release;
* :mod:`.network_status` — whether Multus reports the shadow's interface attached;
* :mod:`.lossless_json` — JSON without numeric or ordering loss (internal).
"""
