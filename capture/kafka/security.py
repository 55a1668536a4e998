"""Kafka's security settings for every client of walcast, and what a refusal of them means.

The settings are named once, in the ``[kafka]`` section of ``walcast run``'s settings
(:mod:`capture.config.settings`): ``security_protocol``, ``sasl_mechanism``,
``sasl_username``, ``sasl_password_env``/``sasl_password_file``, ``ssl_ca_location``,
``ssl_certificate_location``, ``ssl_key_location``. ``walcast run`` reads them from its file,
the environment (``WALCAST__KAFKA__<KEY>``) and its flags; every other client (``walcast
consume``, ``produce-test-stream --kafka``, the Spark jobs' preflight, Kafka source and
layout reader) reads the same environment variables through :func:`client_settings`, so one
set of exports serves them all. The password is read from the variable or file named, never
from a flag, and never appears in a message (:class:`SecurityRefusedError` names settings,
user names and paths only).

:func:`java_options` turns librdkafka's settings into the Java client's (Spark's Kafka
source, ``kafka.``-prefixed): the JAAS line holding the password and the client key are
handed to Spark in memory (the Java client prints them as ``[hidden]``).

:func:`refusal` reads one librdkafka line for a refusal that retrying cannot mend (wrong
credentials, a mechanism the broker does not offer, a broker certificate the client does
not trust or that names another host, a client certificate the broker refuses) and returns
the one error to stop with, naming the setting; :class:`~capture.kafka.client.
ProtocolWatch` calls it on every line, as for a ``security.protocol`` mismatch.
"""

from __future__ import annotations

import logging
import os
import re
import socket
import ssl
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Final

from capture.errors import ConfigError, KafkaSinkError

ENV: Final = "WALCAST__KAFKA__"
_KEYS: Final = (
    ("SECURITY_PROTOCOL", "security.protocol"),
    ("SASL_MECHANISM", "sasl.mechanism"),
    ("SASL_USERNAME", "sasl.username"),
    ("SSL_CA_LOCATION", "ssl.ca.location"),
    ("SSL_CERTIFICATE_LOCATION", "ssl.certificate.location"),
    ("SSL_KEY_LOCATION", "ssl.key.location"),
)
"""``WALCAST__KAFKA__<KEY>`` and the librdkafka setting it gives."""


class SecurityRefusedError(KafkaSinkError):
    """A refused credential or certificate (either side's): one line naming the setting.

    Exit code 6, as every refusal of the client by Kafka.
    """


def client_settings(environ: Mapping[str, str] | None = None) -> dict[str, Any]:
    """The librdkafka security settings of ``WALCAST__KAFKA__*`` (empty: plaintext).

    The SASL password comes from the variable ``WALCAST__KAFKA__SASL_PASSWORD_ENV`` names,
    or the file ``WALCAST__KAFKA__SASL_PASSWORD_FILE`` names. ConfigError when SASL is set
    without a password source, or the source is empty or missing.
    """
    env = os.environ if environ is None else environ
    settings: dict[str, Any] = {}
    for key, name in _KEYS:
        value = env.get(ENV + key, "").strip()
        if value:
            settings[name] = value
    if "sasl.mechanism" in settings:
        settings["sasl.username"] = settings.get("sasl.username", "")
        settings["sasl.password"] = _password(env)
    return settings


def _password(env: Mapping[str, str]) -> str:
    variable = env.get(ENV + "SASL_PASSWORD_ENV", "").strip()
    path = env.get(ENV + "SASL_PASSWORD_FILE", "").strip()
    if variable:
        value = env.get(variable)
        if not value:
            raise ConfigError(
                f"kafka.sasl_password_env: the environment variable {variable} "
                f"({ENV}SASL_PASSWORD_ENV) is not set or empty",
                hint="export the SASL password in it",
            )
        return value
    if path:
        try:
            return Path(path).read_text().strip()
        except OSError as exc:
            raise ConfigError(
                f"kafka.sasl_password_file: cannot read {path} ({exc.strerror})",
                hint=f"point {ENV}SASL_PASSWORD_FILE at a readable file holding the password",
            ) from None
    raise ConfigError(
        "kafka.sasl_mechanism: SASL needs a password: set "
        f"{ENV}SASL_PASSWORD_ENV (the name of a variable holding it) or "
        f"{ENV}SASL_PASSWORD_FILE",
    )


def java_options(settings: Mapping[str, Any]) -> dict[str, str]:
    """The Java Kafka client's options (``kafka.``-prefixed, for Spark) for ``settings``.

    ``settings`` are librdkafka's (:func:`client_settings`); the result holds the password
    (in the JAAS line) and the client key's text: hand it to Spark in memory only.
    """
    options: dict[str, str] = {}
    protocol = settings.get("security.protocol")
    if protocol:
        options["kafka.security.protocol"] = str(protocol)
    mechanism = settings.get("sasl.mechanism")
    if mechanism:
        module = (
            "org.apache.kafka.common.security.plain.PlainLoginModule"
            if str(mechanism).upper() == "PLAIN"
            else "org.apache.kafka.common.security.scram.ScramLoginModule"
        )
        user = _jaas_quote(str(settings.get("sasl.username", "")))
        password = _jaas_quote(str(settings.get("sasl.password", "")))
        options["kafka.sasl.mechanism"] = str(mechanism)
        options["kafka.sasl.jaas.config"] = (
            f'{module} required username="{user}" password="{password}";'
        )
    ca = settings.get("ssl.ca.location")
    if ca:
        options["kafka.ssl.truststore.type"] = "PEM"
        options["kafka.ssl.truststore.location"] = str(ca)
    cert, key = settings.get("ssl.certificate.location"), settings.get("ssl.key.location")
    if cert and key:
        options["kafka.ssl.keystore.type"] = "PEM"
        options["kafka.ssl.keystore.certificate.chain"] = Path(str(cert)).read_text()
        options["kafka.ssl.keystore.key"] = Path(str(key)).read_text()
    return options


def _jaas_quote(text: str) -> str:
    return text.replace("\\", "\\\\").replace('"', '\\"')


# -- refusals --------------------------------------------------------------------------------

_BROKER: Final = re.compile(r"(?:[a-z_]+://)?(\S+?:\d+)/(?:bootstrap|-?\d+): ")
_BAD_CREDENTIALS: Final = re.compile(r"SASL authentication error: .*invalid credentials")
_MECHANISM: Final = re.compile(
    r"SASL (\S+) mechanism handshake failed: .*supported mechanisms: ([^(]*?)\s*(?:\(after|$)"
)
_VERIFY_FAILED: Final = re.compile(r"SSL handshake failed: .*certificate verify failed")
_CLIENT_CERT_REFUSED: Final = re.compile(
    r"ssl/tls alert (certificate unknown|certificate expired|bad certificate|unknown ca|"
    r"certificate required|certificate revoked|unsupported certificate)|"
    r"sslv3 alert (certificate unknown|certificate expired|bad certificate|unknown ca)"
)


def refusal(text: str, settings: Mapping[str, Any]) -> SecurityRefusedError | None:
    """The error to stop with for librdkafka's line ``text``, or None (see the module)."""
    found = list(_BROKER.finditer(text))
    broker = found[-1].group(1) if found else str(settings.get("bootstrap.servers", "?"))
    if _BAD_CREDENTIALS.search(text):
        user = settings.get("sasl.username", "")
        mechanism = settings.get("sasl.mechanism", "?")
        return SecurityRefusedError(
            f"Kafka at {broker} refused the SASL login of kafka.sasl_username {user!r} "
            f"({mechanism}): the password is wrong or the user does not exist (the broker "
            "does not say which)",
            hint="check kafka.sasl_username and the password kafka.sasl_password_env or "
            "kafka.sasl_password_file holds (kafka-configs.sh --describe --entity-type users "
            "lists the broker's SCRAM users)",
        )
    mechanism = _MECHANISM.search(text)
    if mechanism:
        return SecurityRefusedError(
            f"kafka.sasl_mechanism is {mechanism.group(1)!r} but the broker at {broker} offers "
            f"only {mechanism.group(2).strip()}",
            hint=f"set kafka.sasl_mechanism to one of: {mechanism.group(2).strip()}",
        )
    if _VERIFY_FAILED.search(text):
        return _untrusted_broker(broker, settings)
    refused = _CLIENT_CERT_REFUSED.search(text)
    if refused:
        return _client_certificate_refused(broker, settings, refused.group(0))
    return _acl_refusal(text, settings)


def _untrusted_broker(broker: str, settings: Mapping[str, Any]) -> SecurityRefusedError:
    """The broker's certificate failed verification: an unknown CA, or another host's."""
    ca = settings.get("ssl.ca.location")
    where = (
        f"kafka.ssl_ca_location ({ca})" if ca else "the system's CAs (kafka.ssl_ca_location unset)"
    )
    names, why = _names_if_trusted(broker, settings)
    host = broker.rsplit(":", 1)[0]
    if names is not None:
        shown = ", ".join(names) or "no host name"
        return SecurityRefusedError(
            f"the certificate of the broker at {broker} is for {shown}, not for {host} "
            f"(signed by a CA in {where}, but issued for another host)",
            hint="point kafka.bootstrap_servers at a host name the certificate holds, or "
            f"have the broker's certificate issued for {host} (subjectAltName)",
        )
    if why and "issuer" not in why and "self-signed" not in why and "self signed" not in why:
        return SecurityRefusedError(  # expired, not yet valid, ...: not the CA's fault
            f"the certificate of the broker at {broker} does not verify: {why}",
            hint="have the broker's certificate renewed (or its clock and walcast's checked)",
        )
    return SecurityRefusedError(
        f"the certificate of the broker at {broker} is not signed by a CA in {where}",
        hint="set kafka.ssl_ca_location to the PEM file of the CA that signed the brokers' "
        "certificates",
    )


def _names_if_trusted(
    broker: str, settings: Mapping[str, Any]
) -> tuple[list[str] | None, str | None]:
    """The host names of the broker's certificate if the client's CAs trust it.

    A TLS handshake without the host name check (with the client's certificate, if any): it
    succeeds when only the host name was wrong. Else ``(None, why)``: OpenSSL's reason when
    the certificate did not verify, None when the broker could not be asked (the caller
    then names the CA).
    """
    host, _, port = broker.rpartition(":")
    ca = settings.get("ssl.ca.location")
    cert, key = settings.get("ssl.certificate.location"), settings.get("ssl.key.location")
    try:
        context = ssl.create_default_context(cafile=str(ca) if ca else None)
        context.check_hostname = False
        if cert and key:
            context.load_cert_chain(str(cert), str(key))
        with (
            socket.create_connection((host, int(port)), timeout=3) as raw,
            context.wrap_socket(raw) as tls,
        ):
            peer = tls.getpeercert() or {}
    except ssl.SSLCertVerificationError as exc:
        return None, str(exc.verify_message or "") or None
    except (OSError, ValueError):
        return None, None
    alt: Any = peer.get("subjectAltName", ())
    names = [str(value) for kind, value in alt if kind in ("DNS", "IP Address")]
    subject: Any = peer.get("subject", ())
    return names or [str(v) for rdn in subject for k, v in rdn if k == "commonName"], None


def _client_certificate_refused(
    broker: str, settings: Mapping[str, Any], alert: str
) -> SecurityRefusedError:
    cert = settings.get("ssl.certificate.location")
    if not cert:
        return SecurityRefusedError(
            f"the broker at {broker} asks for a client certificate (mTLS) and walcast has "
            f"none (TLS: {alert})",
            hint="set kafka.ssl_certificate_location and kafka.ssl_key_location to walcast's "
            "certificate and key",
        )
    expiry = _expired(str(cert))
    if expiry is not None:
        return SecurityRefusedError(
            f"the broker at {broker} refused walcast's client certificate "
            f"kafka.ssl_certificate_location ({cert}): it expired on {expiry}",
            hint="renew the certificate (and kafka.ssl_key_location's key with it)",
        )
    return SecurityRefusedError(
        f"the broker at {broker} refused walcast's client certificate "
        f"kafka.ssl_certificate_location ({cert}) (TLS: {alert})",
        hint="have it signed by a CA in the broker's ssl.truststore, or check "
        "kafka.ssl_key_location holds its key",
    )


def _expired(path: str) -> str | None:
    """``notAfter`` of the certificate in ``path`` when it lies in the past (else None)."""
    try:
        decoded = ssl._ssl._test_decode_cert(path)  # type: ignore[attr-defined]  # noqa: SLF001
        not_after = str(decoded["notAfter"])
        if ssl.cert_time_to_seconds(not_after) < time.time():
            return not_after
    except (OSError, ValueError, KeyError, AttributeError):
        return None
    return None


# -- ACLs ------------------------------------------------------------------------------------

_IDEMPOTENCE_DENIED: Final = re.compile(
    r"idempotence PID.*Cluster authorization failed|Cluster authorization failed.*idempotence"
)
_TRANSACTIONAL_ID_DENIED: Final = re.compile(r"Transactional Id authorization failed")


def principal(settings: Mapping[str, Any]) -> str:
    """The principal Kafka knows the client as, as well as the client can tell."""
    if settings.get("sasl.mechanism"):
        return f"User:{settings.get('sasl.username', '')}"
    cert = settings.get("ssl.certificate.location")
    if cert:
        subject = _subject(str(cert))
        return f"User:{subject}" if subject else f"the principal of {cert}"
    return "User:ANONYMOUS"


def _subject(path: str) -> str | None:
    """The CN of the certificate in ``path`` (Kafka's principal under a CN mapping rule)."""
    try:
        decoded = ssl._ssl._test_decode_cert(path)  # type: ignore[attr-defined]  # noqa: SLF001
    except (OSError, ValueError, AttributeError):
        return None
    names = [str(v) for rdn in decoded.get("subject", ()) for k, v in rdn if k == "commonName"]
    return names[0] if names else None


def missing_acl(
    operation: str,
    resource_type: str,
    name: str,
    settings: Mapping[str, Any],
    *,
    why: str = "",
    prefixed: bool = False,
    also: str = "",
) -> SecurityRefusedError:
    """Kafka refused a request for want of an ACL: one line naming it and how to grant it.

    ``also``: another operation the same request needs on the resource (a transactional id
    needs DESCRIBE to find its coordinator, and WRITE).
    """
    brokers = str(settings.get("bootstrap.servers", "?"))
    who = principal(settings)
    allow = who if who.startswith("User:") else "User:<walcast's principal>"
    option = {"Topic": "--topic", "Group": "--group", "TransactionalId": "--transactional-id"}
    resource = "--cluster" if resource_type == "Cluster" else f"{option[resource_type]} '{name}'"
    pattern = " --resource-pattern-type prefixed" if prefixed else ""
    operations = f"{operation.upper()} and {also.upper()}" if also else operation.upper()
    options = f"--operation {operation}" + (f" --operation {also}" if also else "")
    return SecurityRefusedError(
        f"Kafka at {brokers} denies {who} {operations} on {resource_type} {name!r}"
        f"{' (prefixed)' if prefixed else ''}{why}: a missing ACL",
        hint=f"kafka-acls.sh --bootstrap-server {brokers} --add --allow-principal {allow} "
        f"{options}{pattern} {resource} (the README's section Kafka with SASL, TLS and ACLs "
        "lists every ACL walcast needs)",
    )


def _acl_refusal(text: str, settings: Mapping[str, Any]) -> SecurityRefusedError | None:
    if _IDEMPOTENCE_DENIED.search(text):
        return missing_acl(
            "Write",
            "Topic",
            "walcast.",
            settings,
            why=" (an idempotent producer needs WRITE on a topic, or IDEMPOTENT_WRITE on the "
            "cluster)",
            prefixed=True,
        )
    if _TRANSACTIONAL_ID_DENIED.search(text):
        tid = str(settings.get("transactional.id", "walcast-"))
        return missing_acl("Write", "TransactionalId", tid, settings, also="Describe")
    return None


def hidden_topics(
    settings: Mapping[str, Any], topics: list[str], timeout: float, logger: logging.Logger
) -> None:
    """Raise the missing ACL when one of ``topics``, absent from the metadata, is hidden.

    A broker lists only the topics the principal may DESCRIBE, so a topic hidden by a
    missing ACL looks like no topic at all: on a secured connection, DescribeTopics (which
    creates nothing) tells the two apart. Returns when none is (the caller names them
    missing). ``logger`` takes the admin client's log lines
    (:func:`capture.kafka.client.client_logger`).
    """
    if not settings.get("security.protocol") or not topics:
        return
    from confluent_kafka import KafkaError, KafkaException, TopicCollection  # noqa: PLC0415
    from confluent_kafka.admin import AdminClient  # noqa: PLC0415

    conf: dict[str, Any] = {**settings, "logger": logger}
    admin = AdminClient(conf)
    futures = admin.describe_topics(TopicCollection(list(topics)), request_timeout=timeout)
    for topic, future in futures.items():
        try:
            future.result(timeout=timeout + 5)
        except KafkaException as exc:
            if exc.args[0].code() == KafkaError.TOPIC_AUTHORIZATION_FAILED:
                raise missing_acl("Describe", "Topic", topic, settings) from None
        except Exception:  # noqa: BLE001, S112 - a timeout: the caller names the topic missing
            continue
