"""Kafka client security settings from a Java-style properties file.

The file is the one Kafka's own tools take with ``--command-config``::

    security.protocol=SASL_SSL
    sasl.mechanism=SCRAM-SHA-512
    sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required \\
        username="alice" password="alice-secret";
    ssl.truststore.type=PEM
    ssl.truststore.location=/etc/kafka/ca.pem

:func:`load_properties` maps it to kafka-python settings for
``Marshaler(kafka_config=...)``; ``marshal ... --command-config FILE`` does the same. The keys
it understands (:data:`SUPPORTED_KEYS`):

* ``security.protocol``: PLAINTEXT, SSL, SASL_PLAINTEXT or SASL_SSL;
* ``sasl.mechanism``: PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512, with ``sasl.jaas.config`` naming
  ``PlainLoginModule`` or ``ScramLoginModule`` with ``username`` and ``password``;
* ``ssl.truststore.location`` with ``ssl.truststore.type=PEM`` (or librdkafka's
  ``ssl.ca.location``): the CA certificates to trust; JKS and PKCS12 trust stores are not
  supported (convert them to PEM);
* ``ssl.keystore.location`` with ``ssl.keystore.type=PEM`` (the client's key and certificate
  in one PEM file), or librdkafka's ``ssl.certificate.location`` and ``ssl.key.location``;
  ``ssl.key.password`` when the key is encrypted;
* ``ssl.endpoint.identification.algorithm``: ``https`` (default: check the broker's host
  name) or empty (do not);
* ``client.id``, ``request.timeout.ms``, ``metadata.max.age.ms``, ``retry.backoff.ms``,
  ``reconnect.backoff.ms``, ``reconnect.backoff.max.ms``, ``connections.max.idle.ms``,
  ``send.buffer.bytes``, ``receive.buffer.bytes``, ``client.dns.lookup``;
* ``isolation.level`` (``read_committed`` or ``read_uncommitted``): how consumers read data
  topics when ``--isolation-level`` does not say.

Any other key is a :class:`~marshal_py.errors.ConfigurationError` naming the key, the file and
the line, as is a setting that cannot work (a SASL protocol without credentials, a
truststore that is not PEM, a file that does not exist). No error message shows a password.

The file's syntax is read in :mod:`~marshal_py.config.properties_syntax`; its keys are mapped
and checked in :mod:`~marshal_py.config.properties_mapping`.
"""

from __future__ import annotations

import os
from pathlib import Path

from marshal_py.config.properties_mapping import (
    SASL_MECHANISMS,
    SECURITY_PROTOCOLS,
    SUPPORTED_KEYS,
    KafkaProperties,
    PropertiesMapper,
)
from marshal_py.config.properties_syntax import Entry, parse_jaas, read_entries
from marshal_py.errors import ConfigurationError

__all__ = ["SASL_MECHANISMS", "SECURITY_PROTOCOLS", "SUPPORTED_KEYS", "KafkaProperties",
           "load_properties", "parse_jaas", "parse_properties"]


def load_properties(path: str | os.PathLike[str]) -> KafkaProperties:
    """Read a Java-style client properties file (as Kafka tools' ``--command-config``) and
    return the kafka-python settings it means (see the module docstring for the keys).

    Raises:
        ConfigurationError: the file cannot be read, or a key is unknown or unsupported, or
            the settings cannot work together; the message names the file and the line.
    """
    file = Path(path)
    try:
        raw = file.read_bytes()
    except OSError as exc:
        reason = exc.strerror or str(exc)
        raise ConfigurationError(f"cannot read the Kafka properties file {file}: {reason}") \
            from exc
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        text = raw.decode("latin-1")  # what java.util.Properties reads
    return parse_properties(text, str(file))


def parse_properties(text: str, source: str = "<properties>") -> KafkaProperties:
    """:func:`load_properties` on the text of a properties file; ``source`` names it in
    error messages."""
    entries: dict[str, Entry] = {}
    for entry in read_entries(text, source):
        entries[entry.key] = entry  # as java.util.Properties: the last one wins
    return PropertiesMapper(entries, source).settings()
