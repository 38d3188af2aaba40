"""Build an official ``kubernetes.client.ApiClient`` for a real cluster or the lab server.

One function, three sources, same result type, so everything above it has one code path:

* ``url=`` — a lab API server (or any API server) by address, optional bearer token and CA;
* ``kubeconfig=`` (+ ``context=``) — a kubeconfig file, as kubectl would use it;
* neither — in-cluster service-account configuration when running in a Pod
  (``KUBERNETES_SERVICE_HOST`` set), else ``$KUBECONFIG`` / ``~/.kube/config``.

Every client retries with :class:`TimeoutsNotRetried`, so a request's timeout bounds it.
"""

from __future__ import annotations

import os
from types import TracebackType
from typing import Self

import urllib3
from kubernetes import client, config
from urllib3.connectionpool import ConnectionPool
from urllib3.response import BaseHTTPResponse
from urllib3.util.retry import Retry

USER_AGENT = "dra-multi-network/0.1.0"


class TimeoutsNotRetried(Retry):
    """urllib3's default retries, except that a request that timed out fails at once.

    By default urllib3 retries a timed-out GET three more times, so a stalled API server
    held the caller for four request timeouts (20 s for a 5-s timeout). That is past the
    deadlines kubelet and the NRI hooks give the calls waiting on it. Other failures are
    still retried: a kept-alive connection the server had closed, a refused connect.
    """

    def increment(
        self,
        method: str | None = None,
        url: str | None = None,
        response: BaseHTTPResponse | None = None,
        error: Exception | None = None,
        _pool: ConnectionPool | None = None,
        _stacktrace: TracebackType | None = None,
    ) -> Self:
        if isinstance(error, urllib3.exceptions.TimeoutError):
            raise error.with_traceback(_stacktrace)
        return super().increment(method, url, response, error, _pool, _stacktrace)


def _configuration() -> client.Configuration:
    configuration = client.Configuration()
    configuration.retries = TimeoutsNotRetried(total=3)
    return configuration


def connect(
    *,
    url: str | None = None,
    kubeconfig: str | None = None,
    context: str | None = None,
    token: str | None = None,
    ca_cert: str | None = None,
    verify_tls: bool = True,
    impersonate_user: str | None = None,
    impersonate_group: str | None = None,
) -> client.ApiClient:
    """Return a configured ``ApiClient`` (caller closes it, or uses it as a context manager).

    ``impersonate_user``/``impersonate_group`` send the ``Impersonate-*`` headers on every
    request (tests act as the controller's service account this way; one group only, as
    the client's header map holds one value per name).
    """
    configuration = _configuration()
    if url is not None:
        configuration.host = url.rstrip("/")
        if token:
            configuration.api_key = {"BearerToken": token}
            configuration.api_key_prefix = {"BearerToken": "Bearer"}
        if ca_cert:
            configuration.ssl_ca_cert = ca_cert
        configuration.verify_ssl = verify_tls
        api_client = client.ApiClient(configuration)
    elif kubeconfig is not None or "KUBERNETES_SERVICE_HOST" not in os.environ:
        api_client = config.new_client_from_config(  # type: ignore[no-untyped-call]
            config_file=kubeconfig,
            context=context,
            persist_config=False,
            client_configuration=configuration,
        )
    else:
        config.load_incluster_config(client_configuration=configuration)  # type: ignore[no-untyped-call]
        api_client = client.ApiClient(configuration)
    api_client.user_agent = USER_AGENT
    if impersonate_user:
        api_client.set_default_header("Impersonate-User", impersonate_user)  # type: ignore[no-untyped-call]
        if impersonate_group:
            api_client.set_default_header("Impersonate-Group", impersonate_group)  # type: ignore[no-untyped-call]
    return api_client
