"""Properties entries to kafka-python settings: which Java client keys marshal_py reads
(:data:`SUPPORTED_KEYS`), what each becomes, and the checks that they can work together (a
SASL protocol with credentials, a PEM trust store, files that exist). Error messages name
the file and the line and never show a password."""

from __future__ import annotations

import re
from pathlib import Path

from marshal_py.config.properties_syntax import Entry, parse_jaas
from marshal_py.errors import ConfigurationError

__all__ = ["SASL_MECHANISMS", "SECURITY_PROTOCOLS", "SUPPORTED_KEYS", "KafkaProperties",
           "PropertiesMapper"]

SECURITY_PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")
SASL_MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")
_LOGIN_MODULES = {
    "org.apache.kafka.common.security.plain.PlainLoginModule": "PLAIN",
    "org.apache.kafka.common.security.scram.ScramLoginModule": "SCRAM",
}

_INT_SETTINGS = {
    "request.timeout.ms": "request_timeout_ms",
    "metadata.max.age.ms": "metadata_max_age_ms",
    "retry.backoff.ms": "retry_backoff_ms",
    "reconnect.backoff.ms": "reconnect_backoff_ms",
    "reconnect.backoff.max.ms": "reconnect_backoff_max_ms",
    "connections.max.idle.ms": "connections_max_idle_ms",
    "send.buffer.bytes": "send_buffer_bytes",
    "receive.buffer.bytes": "receive_buffer_bytes",
}
_FILE_SETTINGS = {
    "ssl.ca.location": "ssl_cafile",
    "ssl.certificate.location": "ssl_certfile",
    "ssl.key.location": "ssl_keyfile",
    "ssl.crl.location": "ssl_crlfile",
}
_OTHER_KEYS = (
    "security.protocol", "sasl.mechanism", "sasl.jaas.config",
    "ssl.truststore.location", "ssl.truststore.type", "ssl.keystore.location",
    "ssl.keystore.type", "ssl.key.password", "ssl.endpoint.identification.algorithm",
    "client.id", "client.dns.lookup", "isolation.level",
)
SUPPORTED_KEYS: tuple[str, ...] = tuple(sorted((*_OTHER_KEYS, *_INT_SETTINGS, *_FILE_SETTINGS)))
"""The Java property names :func:`~marshal_py.config.kafka_properties.load_properties`
understands."""

#: Keys that Kafka knows but that mean something else here, with what to do instead.
_REDIRECTED = {
    "bootstrap.servers": "give the brokers with --bootstrap-servers (bootstrap_servers=), "
                         "not in the properties file",
    "ssl.truststore.password": "a PEM truststore has no password; remove the line",
    "ssl.keystore.password": "a PEM keystore has no store password (only ssl.key.password "
                             "for an encrypted key); remove the line",
    "ssl.truststore.certificates": "put the certificates in a PEM file and name it with "
                                   "ssl.truststore.location",
    "ssl.keystore.certificate.chain": "put the key and certificates in a PEM file and name it "
                                      "with ssl.keystore.location",
    "ssl.keystore.key": "put the key and certificates in a PEM file and name it with "
                        "ssl.keystore.location",
    "sasl.login.callback.handler.class": "only the PLAIN and SCRAM login modules are "
                                         "supported",
    "sasl.client.callback.handler.class": "only the PLAIN and SCRAM login modules are "
                                          "supported",
}


class KafkaProperties(dict[str, object]):
    """kafka-python settings read from a properties file; :attr:`source` names the file
    (error messages point at it)."""

    source: str | None = None


class PropertiesMapper:
    """Maps the entries of one properties file to kafka-python settings, checking each key
    and that the settings can work together (errors name the file and the line)."""

    def __init__(self, entries: dict[str, Entry], source: str) -> None:
        self.entries = entries
        self.source = source
        self.out = KafkaProperties()
        self.out.source = source

    def where(self, key: str) -> str:
        entry = self.entries.get(key)
        return f"{self.source}:{entry.line}" if entry else self.source

    def fail(self, key: str, message: str) -> ConfigurationError:
        return ConfigurationError(f"{self.where(key)}: {message}")

    def value(self, key: str) -> str | None:
        entry = self.entries.get(key)
        return None if entry is None else entry.value.strip()

    def settings(self) -> KafkaProperties:
        for key in self.entries:
            if key in _REDIRECTED:
                raise self.fail(key, f"{key} is not supported here: {_REDIRECTED[key]}")
            if key not in SUPPORTED_KEYS:
                raise self.fail(
                    key, f"{key} is not a Kafka client setting marshal_py supports; it reads "
                         f"{', '.join(SUPPORTED_KEYS)} (others: Marshaler(kafka_config=...) "
                         "with kafka-python's names)")
        protocol = self._protocol()
        self._sasl(protocol)
        self._ssl(protocol)
        self._simple()
        return self.out

    def _protocol(self) -> str:
        value = self.value("security.protocol")
        if value is None:
            return "PLAINTEXT"
        protocol = value.upper()
        if protocol not in SECURITY_PROTOCOLS:
            raise self.fail("security.protocol",
                            f"security.protocol={value} is not one of "
                            f"{', '.join(SECURITY_PROTOCOLS)}")
        self.out["security_protocol"] = protocol
        return protocol

    def _sasl(self, protocol: str) -> None:
        mechanism_value = self.value("sasl.mechanism")
        jaas = self.value("sasl.jaas.config")
        if not protocol.startswith("SASL_"):
            for key in ("sasl.mechanism", "sasl.jaas.config"):
                if key in self.entries:
                    raise self.fail(key, f"{key} is set but security.protocol={protocol} uses "
                                         "no SASL; set security.protocol=SASL_SSL (or "
                                         "SASL_PLAINTEXT) or remove the line")
            return
        if mechanism_value is None:
            raise self.fail("security.protocol",
                            f"security.protocol={protocol} needs sasl.mechanism (one of "
                            f"{', '.join(SASL_MECHANISMS)}); Kafka's default, GSSAPI, is not "
                            "supported")
        mechanism = mechanism_value.upper()
        if mechanism not in SASL_MECHANISMS:
            raise self.fail("sasl.mechanism",
                            f"sasl.mechanism={mechanism_value} is not supported; use one of "
                            f"{', '.join(SASL_MECHANISMS)} (other mechanisms: "
                            "Marshaler(kafka_config=...) with kafka-python's settings)")
        self.out["sasl_mechanism"] = mechanism
        if jaas is None:
            raise self.fail("sasl.mechanism",
                            f"sasl.mechanism={mechanism} needs sasl.jaas.config with the "
                            "username and password")
        parsed = parse_jaas(jaas)
        family = "PLAIN" if mechanism == "PLAIN" else "SCRAM"
        expected = next(m for m, f in _LOGIN_MODULES.items() if f == family)
        example = f'{expected} required username="..." password="...";'
        if parsed is None:
            raise self.fail("sasl.jaas.config",
                            f"sasl.jaas.config is not of the form {example} (check the "
                            "quotes and the final ';')")
        module, options = parsed
        if module not in _LOGIN_MODULES:
            raise self.fail("sasl.jaas.config",
                            f"sasl.jaas.config names login module {module}, which is not "
                            f"supported; with sasl.mechanism={mechanism} use {expected}")
        if _LOGIN_MODULES[module] != family:
            raise self.fail("sasl.jaas.config",
                            f"sasl.jaas.config names {module.rsplit('.', 1)[-1]} but "
                            f"sasl.mechanism={mechanism} needs {expected.rsplit('.', 1)[-1]}")
        for option in ("username", "password"):
            if not options.get(option):
                raise self.fail("sasl.jaas.config",
                                f"sasl.jaas.config has no {option}; use {example}")
        unknown = sorted(set(options) - {"username", "password", "tokenauth"})
        if unknown:
            raise self.fail("sasl.jaas.config",
                            f"sasl.jaas.config option(s) {', '.join(unknown)} are not "
                            "supported; give username and password only")
        if options.get("tokenauth", "false").lower() == "true":
            raise self.fail("sasl.jaas.config",
                            "delegation tokens (tokenauth=true) are not supported")
        self.out["sasl_plain_username"] = options["username"]
        self.out["sasl_plain_password"] = options["password"]

    def _ssl(self, protocol: str) -> None:
        tls = protocol in ("SSL", "SASL_SSL")
        ssl_keys = [k for k in self.entries if k.startswith("ssl.")]
        if ssl_keys and not tls:
            raise self.fail(ssl_keys[0],
                            f"{ssl_keys[0]} is set but security.protocol={protocol} uses no "
                            "TLS; set security.protocol=SASL_SSL (or SSL) or remove the line")
        self._truststore()
        self._keystore()
        for key, setting in _FILE_SETTINGS.items():
            if key in self.entries:
                self.out[setting] = self._existing_file(key)
        if "ssl.ca.location" in self.entries and "ssl.truststore.location" in self.entries:
            raise self.fail("ssl.ca.location",
                            "give either ssl.truststore.location or ssl.ca.location, not both")
        if "ssl.certificate.location" in self.entries \
                and "ssl.keystore.location" in self.entries:
            raise self.fail("ssl.certificate.location",
                            "give either ssl.keystore.location or ssl.certificate.location, "
                            "not both")
        if "ssl.key.location" in self.entries and "ssl_certfile" not in self.out:
            raise self.fail("ssl.key.location",
                            "ssl.key.location needs ssl.certificate.location (the client "
                            "certificate)")
        password = self.value("ssl.key.password")
        if password is not None:
            self.out["ssl_password"] = password
        algorithm = self.value("ssl.endpoint.identification.algorithm")
        if algorithm is not None:
            if algorithm.lower() not in ("https", ""):
                raise self.fail("ssl.endpoint.identification.algorithm",
                                "ssl.endpoint.identification.algorithm must be https (check "
                                "the broker's host name) or empty (do not)")
            self.out["ssl_check_hostname"] = algorithm.lower() == "https"

    def _existing_file(self, key: str) -> str:
        value = self.value(key) or ""
        if not value:
            raise self.fail(key, f"{key} is empty; name a file")
        if not Path(value).is_file():
            raise self.fail(key, f"{key}={value}: no such file")
        return value

    def _pem_store(self, kind: str, what: str) -> str | None:
        """The PEM file of ``ssl.<kind>.location``; an error for JKS and PKCS12 stores."""
        location_key, type_key = f"ssl.{kind}.location", f"ssl.{kind}.type"
        store_type = self.value(type_key)
        if location_key not in self.entries:
            if store_type is not None:
                raise self.fail(type_key, f"{type_key} is set without {location_key}")
            return None
        path = self._existing_file(location_key)
        if store_type is None:  # Kafka's default is JKS; accept a file that is PEM anyway
            try:
                head = Path(path).read_bytes()[:4096]
            except OSError as exc:
                raise self.fail(location_key, f"cannot read {path}: {exc}") from exc
            store_type = "PEM" if b"-----BEGIN" in head else "JKS"
            type_key = location_key
        if store_type.upper() != "PEM":
            convert = ("keytool -exportcert -rfc -keystore FILE -alias ALIAS > ca.pem"
                       if kind == "truststore" else
                       "openssl pkcs12 -in FILE.p12 -out client.pem -nodes")
            raise self.fail(type_key,
                            f"{kind} {path} is {store_type.upper()}: marshal_py (kafka-python) "
                            f"reads only PEM {what}; convert it (e.g. `{convert}`) and set "
                            f"{location_key}=<the .pem> with ssl.{kind}.type=PEM")
        return path

    def _truststore(self) -> None:
        path = self._pem_store("truststore", "trust stores")
        if path is not None:
            self.out["ssl_cafile"] = path

    def _keystore(self) -> None:
        path = self._pem_store("keystore", "key stores (the key and certificate in one file)")
        if path is not None:
            self.out["ssl_certfile"] = path

    def _simple(self) -> None:
        for key, setting in _INT_SETTINGS.items():
            value = self.value(key)
            if value is None:
                continue
            if key.endswith(".buffer.bytes") and value == "-1":
                continue  # Kafka's "the operating system's default", kafka-python's too
            lowest = 1 if key in ("request.timeout.ms", "metadata.max.age.ms") else 0
            if not re.fullmatch(r"\d+", value) or int(value) < lowest:
                raise self.fail(key, f"{key}={value} is not a whole number >= {lowest}")
            self.out[setting] = int(value)
        client_id = self.value("client.id")
        if client_id is not None:
            self.out["client_id"] = client_id
        lookup = self.value("client.dns.lookup")
        if lookup is not None:
            choices = ("use_all_dns_ips", "resolve_canonical_bootstrap_servers_only")
            if lookup not in choices:
                raise self.fail("client.dns.lookup",
                                f"client.dns.lookup={lookup} is not one of {', '.join(choices)}")
            self.out["client_dns_lookup"] = lookup
        isolation = self.value("isolation.level")
        if isolation is not None:
            choices = ("read_committed", "read_uncommitted")
            if isolation not in choices:
                raise self.fail("isolation.level",
                                f"isolation.level={isolation} is not one of {', '.join(choices)}")
            self.out["isolation_level"] = isolation
