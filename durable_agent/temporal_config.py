"""Where Temporal is and how to reach it: the embedded dev server, or a cluster named through
`temporalio.envconfig` (the same profiles and variables as the `temporal` CLI).

A cluster is named when TEMPORAL_ADDRESS, TEMPORAL_PROFILE or TEMPORAL_CONFIG_FILE is set. Then
the profile (TEMPORAL_PROFILE, default `default`, from TEMPORAL_CONFIG_FILE or the CLI's default
file) is read and the environment overrides it: TEMPORAL_ADDRESS, TEMPORAL_NAMESPACE,
TEMPORAL_API_KEY, TEMPORAL_TLS, TEMPORAL_TLS_CLIENT_CERT_PATH / _KEY_PATH,
TEMPORAL_TLS_SERVER_CA_CERT_PATH, TEMPORAL_TLS_SERVER_NAME, TEMPORAL_GRPC_META_*. An API key
turns TLS on. Nothing set: the embedded dev server of the state dir, plain, namespace
TEMPORAL_NAMESPACE or `default` (a CLI config file alone does not move durable-agent off its
embedded server). Light: the CLI imports it on every start.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

NAMING = ("TEMPORAL_ADDRESS", "TEMPORAL_PROFILE", "TEMPORAL_CONFIG_FILE")
DEFAULT_ADDRESS = "localhost:7233"


class TemporalConfigError(Exception):
    """A profile or variable that cannot be used, with a hint."""

    def __init__(self, message: str, hint: str) -> None:
        super().__init__(message)
        self.hint = hint


def external(env: Mapping[str, str] = os.environ) -> bool:
    """A Temporal cluster is named (so no embedded dev server is started or used)."""
    return any(env.get(name) for name in NAMING)


def connect_kwargs(
    address: str | None = None, env: Mapping[str, str] = os.environ
) -> dict[str, Any]:
    """Keyword arguments for `Client.connect`: target_host, namespace and, from a profile, tls,
    api_key and rpc_metadata. `address` is the embedded dev server's, used when no cluster is
    named; a named cluster's own address wins."""
    if not external(env):
        return {
            "target_host": address or DEFAULT_ADDRESS,
            "namespace": env.get("TEMPORAL_NAMESPACE") or "default",
        }
    from temporalio.envconfig import ClientConfigProfile

    profile = env.get("TEMPORAL_PROFILE") or None
    named_file = env.get("TEMPORAL_CONFIG_FILE")
    if named_file and not os.path.isfile(named_file):
        raise TemporalConfigError(
            f"TEMPORAL_CONFIG_FILE names {named_file}, which is not a file",
            "point it at a Temporal client config (TOML), or unset it",
        )
    try:
        loaded = ClientConfigProfile.load(profile=profile, override_env_vars=dict(env))
        kwargs: dict[str, Any] = dict(loaded.to_client_connect_config())
    except Exception as exc:  # the loader raises RuntimeError/OSError/ValueError alike
        where = env.get("TEMPORAL_CONFIG_FILE") or "the default Temporal config file"
        raise TemporalConfigError(
            f"cannot read Temporal profile {profile or 'default'!r} ({where}): "
            f"{str(exc).splitlines()[0] if str(exc) else type(exc).__name__}",
            "check TEMPORAL_CONFIG_FILE and TEMPORAL_PROFILE (TOML: [profile.NAME] address=…, "
            "namespace=…, api_key=…, [profile.NAME.tls] server_ca_cert_path=…)",
        ) from None
    kwargs.setdefault("target_host", DEFAULT_ADDRESS)
    kwargs.setdefault("namespace", "default")
    return kwargs


def target(env: Mapping[str, str] = os.environ) -> str:
    """The named cluster's address (for messages)."""
    return str(connect_kwargs(env=env)["target_host"])


def describe(kwargs: Mapping[str, Any]) -> str:
    """`host:port (namespace ns, TLS, API key)` — never the key or a certificate."""
    parts = [f"namespace {kwargs.get('namespace', 'default')}"]
    if kwargs.get("tls"):
        parts.append("TLS" if not _mutual(kwargs["tls"]) else "mTLS")
    if kwargs.get("api_key"):
        parts.append("API key")
    return f"{kwargs.get('target_host')} ({', '.join(parts)})"


def _mutual(tls: Any) -> bool:
    return bool(getattr(tls, "client_cert", None))
