"""Build an official ``kubernetes.client.ApiClient`` for a real cluster or the lab server.

One function, three sources, same result type, so everything above it has one code path:

* ``url=`` — a lab API server (or any API server) by address, optional bearer token and CA;
* ``kubeconfig=`` (+ ``context=``) — a kubeconfig file, as kubectl would use it;
* neither — in-cluster service-account configuration when running in a Pod
  (``KUBERNETES_SERVICE_HOST`` set), else ``$KUBECONFIG`` / ``~/.kube/config``.
"""

from __future__ import annotations

import os

from kubernetes import client, config

USER_AGENT = "dra-multi-network/0.1.0"


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
    if url is not None:
        configuration = client.Configuration()
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
            config_file=kubeconfig, context=context, persist_config=False
        )
    else:
        configuration = client.Configuration()
        config.load_incluster_config(client_configuration=configuration)  # type: ignore[no-untyped-call]
        api_client = client.ApiClient(configuration)
    api_client.user_agent = USER_AGENT
    if impersonate_user:
        api_client.set_default_header("Impersonate-User", impersonate_user)  # type: ignore[no-untyped-call]
        if impersonate_group:
            api_client.set_default_header("Impersonate-Group", impersonate_group)  # type: ignore[no-untyped-call]
    return api_client
