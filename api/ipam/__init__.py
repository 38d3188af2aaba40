"""IP address management arbitrated by the API server (design §5.7).

* :mod:`.addresses` — address arithmetic for both families and the DNS-safe allocation names
  (pure);
* :mod:`.ippool`, :mod:`.ipallocation` — the strict ``IPPool`` and ``IPAllocation`` CRD models;
* :mod:`.pool_plan` — a pool compiled to integer intervals, and its semantic checks with
  reason codes (pure);
* :mod:`.allocator` — candidate order for dynamic requests, static checks, refusals (pure);
* :mod:`.client` — the one adapter over :mod:`dmn.api.cluster`: allocate with the API
  server's create as the arbiter, release with a UID precondition, find an owner's addresses;
* :mod:`.lint` — ``dmn lint`` for IPPool documents.

Everything but :mod:`.client` is pure: no I/O, no clock, no randomness.
"""
