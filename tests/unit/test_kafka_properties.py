"""The Java-style client properties file (--command-config) and its kafka-python settings."""

from __future__ import annotations

from pathlib import Path

import pytest

from marshal_py.config.kafka_properties import (
    SUPPORTED_KEYS,
    KafkaProperties,
    load_properties,
    parse_jaas,
    parse_properties,
)
from marshal_py.errors import ConfigurationError
from marshal_py.log.kafka import KafkaLogConfig

PEM = "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n"
SCRAM = "org.apache.kafka.common.security.scram.ScramLoginModule"
PLAIN = "org.apache.kafka.common.security.plain.PlainLoginModule"


@pytest.fixture
def ca(tmp_path: Path) -> Path:
    path = tmp_path / "ca.pem"
    path.write_text(PEM)
    return path


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "client.properties"
    path.write_text(text)
    return path


def error_of(text: str, source: str = "client.properties") -> str:
    with pytest.raises(ConfigurationError) as caught:
        parse_properties(text, source)
    message = str(caught.value)
    assert "\n" not in message
    return message


def test_sasl_ssl_scram_with_a_pem_truststore(tmp_path: Path, ca: Path) -> None:
    path = write(tmp_path, f"""\
# written by hand
security.protocol=SASL_SSL
sasl.mechanism=SCRAM-SHA-512
sasl.jaas.config={SCRAM} required username="alice" password="s3cret";
ssl.truststore.type=PEM
ssl.truststore.location={ca}
client.id=orders-worker
request.timeout.ms=40000
""")
    settings = load_properties(path)
    assert settings == {
        "security_protocol": "SASL_SSL",
        "sasl_mechanism": "SCRAM-SHA-512",
        "sasl_plain_username": "alice",
        "sasl_plain_password": "s3cret",
        "ssl_cafile": str(ca),
        "client_id": "orders-worker",
        "request_timeout_ms": 40000,
    }
    assert isinstance(settings, KafkaProperties)
    assert settings.source == str(path)
    KafkaLogConfig(kafka_config=settings)  # every setting is one kafka-python knows


def test_java_syntax_separators_continuations_escapes_and_comments(ca: Path) -> None:
    settings = parse_properties(f"""\
! a comment
   # another
security.protocol : sasl_plaintext
sasl.mechanism PLAIN
sasl.jaas.config = {PLAIN} \\
      required \\
      username="b\\\\"ob" password=pw-1;

client.id=a\\u0062c\\tx
""")
    assert settings["security_protocol"] == "SASL_PLAINTEXT"
    assert settings["sasl_mechanism"] == "PLAIN"
    assert settings["sasl_plain_username"] == 'b"ob'
    assert settings["sasl_plain_password"] == "pw-1"
    assert settings["client_id"] == "abc\tx"


def test_the_last_definition_wins_as_in_java() -> None:
    assert parse_properties("client.id=a\nclient.id=b\n") == {"client_id": "b"}


def test_empty_file_means_plaintext_defaults() -> None:
    assert parse_properties("# nothing\n\n") == {}


def test_ssl_client_certificate_and_hostname_check(tmp_path: Path, ca: Path) -> None:
    keystore = tmp_path / "client.pem"
    keystore.write_text(PEM)
    settings = parse_properties(f"""\
security.protocol=SSL
ssl.truststore.location={ca}
ssl.keystore.type=PEM
ssl.keystore.location={keystore}
ssl.key.password=kp
ssl.endpoint.identification.algorithm=
""")
    assert settings == {"security_protocol": "SSL", "ssl_cafile": str(ca),
                        "ssl_certfile": str(keystore), "ssl_password": "kp",
                        "ssl_check_hostname": False}


def test_librdkafka_locations(tmp_path: Path, ca: Path) -> None:
    cert, key = tmp_path / "c.pem", tmp_path / "k.pem"
    cert.write_text(PEM)
    key.write_text("key")
    settings = parse_properties(f"security.protocol=SSL\nssl.ca.location={ca}\n"
                                f"ssl.certificate.location={cert}\nssl.key.location={key}\n")
    assert settings == {"security_protocol": "SSL", "ssl_cafile": str(ca),
                        "ssl_certfile": str(cert), "ssl_keyfile": str(key)}


def test_a_pem_truststore_without_a_type_is_accepted(ca: Path) -> None:
    settings = parse_properties(f"security.protocol=SSL\nssl.truststore.location={ca}\n")
    assert settings["ssl_cafile"] == str(ca)


def test_unknown_key_names_the_key_file_and_line() -> None:
    message = error_of("security.protocol=PLAINTEXT\n\nsasl.kerberos.principal=x\n")
    assert message.startswith("client.properties:3: sasl.kerberos.principal is not a Kafka "
                              "client setting marshal_py supports")
    assert "security.protocol" in message  # it lists what is supported


def test_bootstrap_servers_belongs_to_the_option() -> None:
    message = error_of("bootstrap.servers=broker:9092\n")
    assert message.startswith("client.properties:1: bootstrap.servers is not supported here")
    assert "--bootstrap-servers" in message


def test_jks_truststore_says_to_use_pem(tmp_path: Path) -> None:
    jks = tmp_path / "truststore.jks"
    jks.write_bytes(b"\xfe\xed\xfe\xed\x00\x00\x00\x02")
    message = error_of(f"security.protocol=SSL\nssl.truststore.type=JKS\n"
                       f"ssl.truststore.location={jks}\n")
    assert message.startswith("client.properties:2:")
    assert "JKS" in message and "PEM" in message and "keytool -exportcert -rfc" in message
    # Without a type, Kafka's default is JKS: a binary file gets the same advice.
    message = error_of(f"security.protocol=SSL\nssl.truststore.location={jks}\n")
    assert message.startswith("client.properties:2:") and "PEM" in message
    message = error_of(f"security.protocol=SSL\nssl.truststore.type=PKCS12\n"
                       f"ssl.truststore.location={jks}\n")
    assert "PKCS12" in message


def test_truststore_password_is_not_for_pem(ca: Path) -> None:
    message = error_of(f"security.protocol=SSL\nssl.truststore.location={ca}\n"
                       "ssl.truststore.password=changeit\n")
    assert message.startswith("client.properties:3: ssl.truststore.password")
    assert "changeit" not in message


def test_missing_truststore_file() -> None:
    message = error_of("security.protocol=SSL\nssl.truststore.type=PEM\n"
                       "ssl.truststore.location=/nonexistent/ca.pem\n")
    assert message == ("client.properties:3: ssl.truststore.location=/nonexistent/ca.pem: "
                       "no such file")


@pytest.mark.parametrize(("text", "line", "needle"), [
    ("security.protocol=TLS\n", 1, "not one of PLAINTEXT, SSL, SASL_PLAINTEXT, SASL_SSL"),
    ("security.protocol=SASL_SSL\n", 1, "needs sasl.mechanism"),
    ("security.protocol=SASL_SSL\nsasl.mechanism=GSSAPI\n", 2, "GSSAPI is not supported"),
    ("security.protocol=SASL_SSL\nsasl.mechanism=PLAIN\n", 2, "needs sasl.jaas.config"),
    (f"security.protocol=SASL_SSL\nsasl.mechanism=PLAIN\nsasl.jaas.config={SCRAM} required "
     'username="a" password="b";\n', 3, "needs PlainLoginModule"),
    ("security.protocol=SASL_SSL\nsasl.mechanism=SCRAM-SHA-256\nsasl.jaas.config="
     f'{SCRAM} required username="a";\n', 3, "has no password"),
    ("security.protocol=SASL_SSL\nsasl.mechanism=SCRAM-SHA-256\nsasl.jaas.config="
     f'{SCRAM} required username="a" password="b"\n', 3, "final ';'"),
    ("security.protocol=SASL_SSL\nsasl.mechanism=PLAIN\nsasl.jaas.config="
     'com.example.Login required username="a" password="b";\n', 3,
     "login module com.example.Login"),
    (f'sasl.jaas.config={PLAIN} required username="a" password="b";\n', 1, "uses no SASL"),
    ("ssl.endpoint.identification.algorithm=https\n", 1, "uses no TLS"),
    ("security.protocol=SSL\nssl.endpoint.identification.algorithm=ldap\n", 2,
     "must be https"),
    ("request.timeout.ms=soon\n", 1, "not a whole number"),
    ("client.dns.lookup=default\n", 1, "not one of use_all_dns_ips"),
])
def test_settings_that_cannot_work(text: str, line: int, needle: str) -> None:
    message = error_of(text)
    assert message.startswith(f"client.properties:{line}:"), message
    assert needle in message
    assert '"b"' not in message  # never a password


def test_unreadable_file(tmp_path: Path) -> None:
    with pytest.raises(ConfigurationError, match="cannot read the Kafka properties file"):
        load_properties(tmp_path / "missing.properties")


def test_parse_jaas() -> None:
    assert parse_jaas(f'{SCRAM} required username="u" password="p\\"q";') == (
        SCRAM, {"username": "u", "password": 'p"q'})
    assert parse_jaas(f"{PLAIN} optional username=u password=p ;") == (
        PLAIN, {"username": "u", "password": "p"})
    assert parse_jaas(f"{PLAIN} maybe username=u;") is None
    assert parse_jaas(f"{PLAIN} required username;") is None


def test_supported_keys_are_listed() -> None:
    for key in ("security.protocol", "sasl.mechanism", "sasl.jaas.config",
                "ssl.truststore.location", "ssl.truststore.type", "ssl.ca.location",
                "ssl.keystore.location", "ssl.endpoint.identification.algorithm",
                "client.id", "request.timeout.ms"):
        assert key in SUPPORTED_KEYS


def test_isolation_level_is_read_and_checked() -> None:
    assert parse_properties("isolation.level=read_uncommitted")["isolation_level"] == \
        "read_uncommitted"
    with pytest.raises(ConfigurationError, match=r"isolation.level=committed is not one of "
                                                 r"read_committed, read_uncommitted"):
        parse_properties("isolation.level=committed")
