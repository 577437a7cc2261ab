"""A development broker with Kafka security on: SASL_SSL (SCRAM-SHA-512), TLS and ACLs.

:class:`SecureDevBroker` is a :class:`~marshal_py.devbroker.DevBroker` whose client listener
is ``SASL_SSL`` on 127.0.0.1, authenticated with SCRAM-SHA-512 users created when the storage
is formatted, encrypted with a certificate of a test CA it makes itself (with the JDK's
``keytool``), and authorized by Kafka's ``StandardAuthorizer`` (``super.users=User:admin``,
no ACL means no access). Everything it makes lives in ``<data_dir>/security``:

* ``ca.pem``: the test CA's certificate, the PEM truststore clients use
  (``ssl.truststore.type=PEM``, ``ssl.truststore.location``);
* ``ca.p12``, ``broker.p12``: the CA's and the broker's PKCS#12 key stores;
* ``secrets.json`` (mode 0600): the key store password and each user's password;
* ``<user>.properties`` (mode 0600): a client properties file per user, in Kafka's Java
  format, for ``--command-config`` of marshal_py's and Kafka's own tools.

Listeners: ``SASL_SSL`` on the client port serves clients and inter-broker traffic (the broker
authenticates to itself as ``admin`` with SCRAM); the controller listener is
``SASL_PLAINTEXT`` on 127.0.0.1 with mechanism PLAIN and one user, ``admin`` (KRaft
controllers cannot use SCRAM, whose credentials they store themselves). The controller port
thus carries no TLS: it only ever listens on loopback.

A member needs these ACLs (see :func:`member_acls`): READ, WRITE, DESCRIBE and
DESCRIBE_CONFIGS on the coordination topic, READ and DESCRIBE on the topics it consumes; no
group ACL (marshal_py uses no Kafka consumer group); CREATE on the cluster only for whoever
creates the coordination topic (``marshal init``, or the first member when allowed).
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import secrets
import shutil
import subprocess
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path

from marshal_py.devbroker.broker import HOST, DevBroker, find_java
from marshal_py.devbroker.properties import replace_values
from marshal_py.errors import DevBrokerError
from marshal_py.protocol.index import index_topic_for

log = logging.getLogger(__name__)

ADMIN_USER = "admin"
"""The super user: the broker's own identity, and the one that may do anything."""

DEFAULT_USERS: tuple[str, ...] = ("alice", "bob")
"""Test principals created besides ``admin`` (no ACLs: grant them what they need)."""

SCRAM_MECHANISM = "SCRAM-SHA-512"
SCRAM_LOGIN_MODULE = "org.apache.kafka.common.security.scram.ScramLoginModule"
PLAIN_LOGIN_MODULE = "org.apache.kafka.common.security.plain.PlainLoginModule"
KEYTOOL_TIMEOUT_S = 120.0
CERT_VALIDITY_DAYS = 3650
_SECURITY_DIR = "security"


def find_keytool() -> str:
    """The JDK's ``keytool``: next to the ``java`` the broker runs with, else on ``PATH``."""
    java, _ = find_java()
    beside = Path(java).resolve().parent / "keytool"
    if os.access(beside, os.X_OK):
        return str(beside)
    found = shutil.which("keytool")
    if found is None:
        raise DevBrokerError(
            f"keytool is not installed next to {java} nor on PATH; the secure development "
            "broker makes its test CA with it: install a full JDK (e.g. `apt-get install "
            "openjdk-17-jdk-headless`) or set JAVA_HOME to one"
        )
    return found


def _keytool(keytool: str, *args: str, stdin: bytes | None = None) -> bytes:
    """Run keytool; a one-line DevBrokerError when it fails."""
    try:
        result = subprocess.run(
            [keytool, *args], input=stdin, capture_output=True, timeout=KEYTOOL_TIMEOUT_S,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise DevBrokerError(f"cannot run {keytool} ({exc}); check the JDK installation") \
            from exc
    if result.returncode != 0:
        said = (result.stderr or result.stdout).decode("utf-8", "replace").strip()
        first = said.splitlines()[0] if said else f"exit status {result.returncode}"
        raise DevBrokerError(f"keytool {args[0]} failed: {first[:300]}")
    return result.stdout


def make_test_ca(directory: Path, password: str, name: str = "marshal_py dev CA",
                 keytool: str | None = None) -> Path:
    """Make a self-signed test CA in ``directory`` (``ca.p12`` with its key, ``ca.pem``
    with its certificate) and return the path of ``ca.pem``."""
    keytool = keytool or find_keytool()
    directory.mkdir(parents=True, exist_ok=True)
    store, pem = directory / "ca.p12", directory / "ca.pem"
    for stale in (store, pem):
        stale.unlink(missing_ok=True)
    _keytool(keytool, "-genkeypair", "-alias", "ca", "-keyalg", "EC", "-groupname",
             "secp256r1", "-dname", f"CN={name}", "-ext", "bc:c", "-validity",
             str(CERT_VALIDITY_DAYS), "-keystore", str(store), "-storetype", "PKCS12",
             "-storepass", password, "-keypass", password)
    _keytool(keytool, "-exportcert", "-rfc", "-alias", "ca", "-keystore", str(store),
             "-storepass", password, "-file", str(pem))
    return pem


def make_broker_keystore(directory: Path, password: str, keytool: str | None = None) -> Path:
    """Make ``broker.p12``: a key and a certificate for 127.0.0.1 and localhost signed by the
    CA in ``directory`` (see :func:`make_test_ca`); return its path."""
    keytool = keytool or find_keytool()
    ca_store, ca_pem = directory / "ca.p12", directory / "ca.pem"
    store = directory / "broker.p12"
    store.unlink(missing_ok=True)
    common = ("-keystore", str(store), "-storetype", "PKCS12", "-storepass", password)
    _keytool(keytool, "-genkeypair", "-alias", "broker", "-keyalg", "EC", "-groupname",
             "secp256r1", "-dname", "CN=localhost", "-validity", str(CERT_VALIDITY_DAYS),
             *common, "-keypass", password)
    request = _keytool(keytool, "-certreq", "-alias", "broker", *common)
    signed = _keytool(keytool, "-gencert", "-rfc", "-alias", "ca", "-keystore", str(ca_store),
                      "-storepass", password, "-validity", str(CERT_VALIDITY_DAYS),
                      "-ext", f"SAN=ip:{HOST},dns:localhost",
                      "-ext", "KU=digitalSignature,keyEncipherment",
                      "-ext", "EKU=serverAuth,clientAuth", stdin=request)
    _keytool(keytool, "-importcert", "-noprompt", "-alias", "ca", "-file", str(ca_pem),
             *common)
    _keytool(keytool, "-importcert", "-noprompt", "-alias", "broker", *common, stdin=signed)
    return store


def _jaas(module: str, username: str, password: str, extra: str = "") -> str:
    return f'{module} required username="{username}" password="{password}"{extra};'


def member_acls(principal: str, coordination_topic: str = "__marshal",
                topics: Iterable[str] = (), *, create: bool = False,
                index_topic: str | None = None, output_topics: Iterable[str] = (),
                transactional_group: str | None = None) -> list[object]:
    """The kafka-python ``ACL`` objects a marshal_py member needs (for
    ``KafkaAdminClient.create_acls``): READ, WRITE, DESCRIBE and DESCRIBE_CONFIGS on the
    coordination topic, READ, WRITE and DESCRIBE on its index (``index_topic``, default
    ``<coordination_topic>-index``), READ and DESCRIBE on each of ``topics``, and with
    ``create`` CREATE on the cluster (to create the coordination topic and its index).
    Exactly-once members also need WRITE and DESCRIBE on their ``output_topics`` and on the
    transactional ids of their group (``transactional_group``: the prefix
    ``marshal/<group>/``). ``principal``: ``"User:alice"``."""
    from kafka.admin import (
        ACL,
        ACLOperation,
        ACLPermissionType,
        ACLResourcePatternType,
        ResourcePattern,
        ResourceType,
    )

    def allow(operation: ACLOperation, kind: ResourceType, name: str,
              pattern: ACLResourcePatternType = ACLResourcePatternType.LITERAL) -> ACL:
        return ACL(principal=principal, host="*", operation=operation,
                   permission_type=ACLPermissionType.ALLOW,
                   resource_pattern=ResourcePattern(kind, name, pattern))

    acls = [allow(op, ResourceType.TOPIC, coordination_topic)
            for op in (ACLOperation.READ, ACLOperation.WRITE, ACLOperation.DESCRIBE,
                       ACLOperation.DESCRIBE_CONFIGS)]
    acls += [allow(op, ResourceType.TOPIC, index_topic or index_topic_for(coordination_topic))
             for op in (ACLOperation.READ, ACLOperation.WRITE, ACLOperation.DESCRIBE)]
    for topic in topics:
        acls += [allow(op, ResourceType.TOPIC, topic)
                 for op in (ACLOperation.READ, ACLOperation.DESCRIBE)]
    for topic in output_topics:
        acls += [allow(op, ResourceType.TOPIC, topic)
                 for op in (ACLOperation.WRITE, ACLOperation.DESCRIBE)]
    if transactional_group is not None:
        acls += [allow(op, ResourceType.TRANSACTIONAL_ID, f"marshal/{transactional_group}/",
                       ACLResourcePatternType.PREFIXED)
                 for op in (ACLOperation.WRITE, ACLOperation.DESCRIBE)]
    if create:
        acls.append(allow(ACLOperation.CREATE, ResourceType.CLUSTER, "kafka-cluster"))
    return acls


class SecureDevBroker(DevBroker):
    """A :class:`DevBroker` with SASL_SSL (SCRAM-SHA-512), a test CA and ACLs on.

    ``users`` are created besides ``admin`` (the super user) when the storage is formatted,
    each with a random password (kept in ``<data_dir>/security/secrets.json``; a kept data
    directory keeps its CA, certificates and passwords). They have no ACLs: grant them with
    :meth:`grant` (or Kafka's ``kafka-acls``). :meth:`client_config` gives admin's
    kafka-python settings, :meth:`client_config_for` any user's, and
    :meth:`properties_path` the Java-format client properties file of a user.
    """

    def __init__(
        self,
        port: int | None = None,
        data_dir: Path | None = None,
        cache_dir: Path | None = None,
        heap: str = "1g",
        *,
        users: Sequence[str] = DEFAULT_USERS,
        kafka_version: str | None = None,
    ) -> None:
        """Prepare a secure broker (nothing is made or launched until :meth:`start`).

        Args:
            port: the SASL_SSL port on 127.0.0.1; a free port when None.
            data_dir, cache_dir, heap, kafka_version: as for :class:`DevBroker`.
            users: SCRAM users to create besides ``admin`` (letters, digits, ``.``, ``_``,
                ``-``).
        """
        super().__init__(port=port, data_dir=data_dir, cache_dir=cache_dir, heap=heap,
                         kafka_version=kafka_version)
        names = [ADMIN_USER, *(u for u in users if u != ADMIN_USER)]
        for name in names:
            if not name or not all(c.isalnum() or c in "._-" for c in name):
                raise DevBrokerError(
                    f"user name {name!r} is not allowed; use letters, digits, '.', '_', '-'")
        self.users: tuple[str, ...] = tuple(dict.fromkeys(names))
        self._secrets: dict[str, object] | None = None

    # -- what clients need ---------------------------------------------------------------------

    @property
    def security_dir(self) -> Path:
        """Where the CA, the key stores, the secrets and the client properties live."""
        return self.data_dir / _SECURITY_DIR

    @property
    def ca_path(self) -> Path:
        """The test CA's certificate (PEM): the truststore of every client."""
        return self.security_dir / "ca.pem"

    def password(self, user: str) -> str:
        """The SCRAM password of ``user`` (made on the first :meth:`start`)."""
        passwords = self._load_secrets()["users"]
        assert isinstance(passwords, dict)
        if user not in passwords:
            raise DevBrokerError(f"this broker has no user {user!r}; its users are "
                                 f"{', '.join(sorted(passwords))}")
        return str(passwords[user])

    def client_config(self) -> dict[str, object]:
        """kafka-python settings of ``admin`` (the super user): SASL_SSL, SCRAM-SHA-512 and
        the test CA."""
        return self.client_config_for(ADMIN_USER)

    def client_config_for(self, user: str, password: str | None = None) -> dict[str, object]:
        """kafka-python settings to connect as ``user`` (with its own password unless
        ``password`` is given, e.g. a wrong one)."""
        return {
            "security_protocol": "SASL_SSL",
            "sasl_mechanism": SCRAM_MECHANISM,
            "sasl_plain_username": user,
            "sasl_plain_password": self.password(user) if password is None else password,
            "ssl_cafile": str(self.ca_path),
        }

    def properties_path(self, user: str = ADMIN_USER) -> Path:
        """The Java-format client properties file of ``user`` (for ``--command-config``)."""
        self.password(user)  # a clear error for an unknown user
        return self.security_dir / f"{user}.properties"

    def write_client_properties(self, path: Path, user: str,
                                password: str | None = None) -> Path:
        """Write a Java-format client properties file for ``user`` at ``path`` (mode 0600)
        and return it: security.protocol, sasl.mechanism, sasl.jaas.config and the PEM
        truststore."""
        secret = self.password(user) if password is None else password
        text = (
            f"# Client settings for {user} on the marshal_py secure development broker "
            f"{self.bootstrap_servers}\n"
            "security.protocol=SASL_SSL\n"
            f"sasl.mechanism={SCRAM_MECHANISM}\n"
            f"sasl.jaas.config={_jaas(SCRAM_LOGIN_MODULE, user, secret)}\n"
            "ssl.truststore.type=PEM\n"
            f"ssl.truststore.location={self.ca_path}\n"
        )
        _write_private(path, text)
        return path

    def grant(self, principal: str, coordination_topic: str = "__marshal",
              topics: Iterable[str] = (), *, create: bool = False,
              index_topic: str | None = None, output_topics: Iterable[str] = (),
              transactional_group: str | None = None) -> None:
        """Give ``principal`` (``"User:alice"`` or ``"alice"``) the ACLs of a member (see
        :func:`member_acls`), as admin."""
        from kafka import KafkaAdminClient

        from marshal_py.log.kafka_config import new_client

        if ":" not in principal:
            principal = f"User:{principal}"
        acls = member_acls(principal, coordination_topic, topics, create=create,
                           index_topic=index_topic, output_topics=output_topics,
                           transactional_group=transactional_group)
        admin = new_client(KafkaAdminClient, bootstrap_servers=self.bootstrap_servers,
                           client_id="marshal-devbroker-acls", **self.client_config())
        try:
            result = admin.create_acls(acls)
        finally:
            admin.close()
        if result["failed"]:
            raise DevBrokerError(f"could not create ACLs for {principal}: {result['failed']}")

    # -- lifecycle ------------------------------------------------------------------------------

    def start(self, timeout: float = 120.0) -> SecureDevBroker:
        """Make the CA, certificates, passwords and client properties on the first start,
        then start the broker (see :meth:`DevBroker.start`)."""
        if not self.is_running():
            self._ensure_material()
        super().start(timeout)
        return self

    def _ensure_material(self) -> None:
        formatted = (self._kafka_log_dir / "meta.properties").is_file()
        secrets_path = self.security_dir / "secrets.json"
        material = (secrets_path, self.ca_path, self.security_dir / "broker.p12")
        if all(p.is_file() for p in material):
            missing = [u for u in self.users if u not in self._users_in_secrets()]
            if missing and formatted:
                raise DevBrokerError(
                    f"the data directory {self.data_dir} was formatted without user(s) "
                    f"{', '.join(missing)}; use a new data directory to have them")
        elif formatted:
            raise DevBrokerError(
                f"{self.data_dir} holds a formatted broker but not its security material "
                f"({self.security_dir}); use a new data directory")
        else:
            log.info("making a test CA and the broker certificate in %s", self.security_dir)
            self.security_dir.mkdir(parents=True, exist_ok=True)
            with contextlib.suppress(OSError):
                self.security_dir.chmod(0o700)
            store_password = secrets.token_hex(16)
            keytool = find_keytool()
            make_test_ca(self.security_dir, store_password, keytool=keytool)
            make_broker_keystore(self.security_dir, store_password, keytool=keytool)
            users = {u: secrets.token_hex(16) for u in self.users}
            _write_private(secrets_path, json.dumps(
                {"keystore_password": store_password, "users": users}, indent=2) + "\n")
            self._secrets = None
            for store in ("ca.p12", "broker.p12"):  # private keys: the owner's only
                with contextlib.suppress(OSError):
                    (self.security_dir / store).chmod(0o600)
        if not formatted:  # users added to a not yet formatted directory get passwords
            secrets_ = self._load_secrets()
            users_ = secrets_["users"]
            assert isinstance(users_, dict)
            for user in self.users:
                users_.setdefault(user, secrets.token_hex(16))
            _write_private(secrets_path, json.dumps(secrets_, indent=2) + "\n")
        for user in self.users:
            self.write_client_properties(self.properties_path(user), user)

    def _users_in_secrets(self) -> Mapping[str, object]:
        users = self._load_secrets()["users"]
        assert isinstance(users, dict)
        return users

    def _load_secrets(self) -> dict[str, object]:
        if self._secrets is None:
            path = self.security_dir / "secrets.json"
            try:
                loaded = json.loads(path.read_text(encoding="utf-8"))
            except FileNotFoundError:
                raise DevBrokerError(
                    f"{path} does not exist: start the secure broker first") from None
            except (OSError, ValueError) as exc:
                raise DevBrokerError(f"cannot read {path} ({exc}); use a new data directory") \
                    from exc
            if not isinstance(loaded, dict) or not isinstance(loaded.get("users"), dict):
                raise DevBrokerError(f"{path} is not what the secure broker wrote; use a new "
                                     "data directory")
            self._secrets = loaded
        return self._secrets

    # -- broker configuration -------------------------------------------------------------------

    def _server_properties(self) -> str:
        """The plain broker's properties with the client listener on SASL_SSL, the controller
        listener on SASL_PLAINTEXT (PLAIN, loopback only), TLS and the StandardAuthorizer."""
        assert self.controller_port is not None
        keystore_password = str(self._load_secrets()["keystore_password"])
        admin_password = self.password(ADMIN_USER)
        overrides = {
            "listeners": f"SASL_SSL://{HOST}:{self.port},CONTROLLER://{HOST}:"
                         f"{self.controller_port}",
            "advertised.listeners": f"SASL_SSL://{HOST}:{self.port}",
            "listener.security.protocol.map": "SASL_SSL:SASL_SSL,CONTROLLER:SASL_PLAINTEXT",
            "inter.broker.listener.name": "SASL_SSL",
        }
        extra = {
            # Clients and the broker itself: SCRAM-SHA-512 over TLS.
            "sasl.enabled.mechanisms": SCRAM_MECHANISM,
            "sasl.mechanism.inter.broker.protocol": SCRAM_MECHANISM,
            "listener.name.sasl_ssl.scram-sha-512.sasl.jaas.config":
                _jaas(SCRAM_LOGIN_MODULE, ADMIN_USER, admin_password),
            # The controller listener: PLAIN (KRaft controllers cannot use SCRAM), one user.
            "sasl.mechanism.controller.protocol": "PLAIN",
            "listener.name.controller.sasl.enabled.mechanisms": "PLAIN",
            "listener.name.controller.plain.sasl.jaas.config": _jaas(
                PLAIN_LOGIN_MODULE, ADMIN_USER, admin_password,
                f' user_{ADMIN_USER}="{admin_password}"'),
            "ssl.keystore.type": "PKCS12",
            "ssl.keystore.location": str(self.security_dir / "broker.p12"),
            "ssl.keystore.password": keystore_password,
            "ssl.key.password": keystore_password,
            "ssl.truststore.type": "PEM",
            "ssl.truststore.location": str(self.ca_path),
            "ssl.client.auth": "none",
            "ssl.endpoint.identification.algorithm": "https",
            "authorizer.class.name":
                "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
            "super.users": f"User:{ADMIN_USER}",
            "allow.everyone.if.no.acl.found": "false",
        }
        lines, replaced = replace_values(super()._server_properties(), overrides)
        lines.append("# Security (marshal_py.devbroker.security)")
        lines += [f"{k}={v}" for k, v in {**overrides, **extra}.items() if k not in replaced]
        return "\n".join(lines) + "\n"

    def _keeps_storage_template(self) -> bool:
        """No: its settings hold secrets and paths of its own, so Kafka formats its storage
        (SCRAM users included) every time."""
        return False

    def _format_extra_args(self) -> list[str]:
        """The SCRAM users, added to the cluster metadata when the storage is formatted."""
        return [arg for user in self.users for arg in (
            "--add-scram", f"{SCRAM_MECHANISM}=[name={user},password={self.password(user)}]")]

    def __repr__(self) -> str:
        return f"SecureDevBroker(bootstrap_servers={self.bootstrap_servers!r}, pid={self.pid})"


def _write_private(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` readable by its owner only."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as handle:
        handle.write(text)
    with contextlib.suppress(OSError):
        path.chmod(0o600)
