"""Errors raised by marshal_py.

Every error a user can cause or fix carries a one-line message that says what went wrong and
how to fix it; the CLI prints that line and exits with status 2 instead of a traceback.
"""

from __future__ import annotations


class MarshalError(Exception):
    """Base class of every error marshal_py raises on purpose."""


class ConfigurationError(MarshalError):
    """A setting has a value that cannot work (say which setting and which values would)."""


class BrokerUnavailableError(MarshalError):
    """The Kafka cluster could not be reached."""


class CoordinationTopicError(MarshalError):
    """The coordination topic is missing or configured in a way that breaks the protocol."""


class CoordinationLogLostError(CoordinationTopicError):
    """The coordination topic went back under a running member (deleted and recreated, or
    truncated): everything the member knew of the world is void, and it stops."""

    ADVICE = ("so every claim and offset known from it is void. Stop every member using it, "
              "restore the topic (or accept that the groups start over), then start them again")


class RecordTooLargeError(CoordinationTopicError):
    """A coordination record is larger than the coordination topic (or the producer) accepts
    (``max.message.bytes``); writers split what can be large (checkpoints) below it."""


class DevBrokerError(MarshalError):
    """The development broker could not be set up, started or stopped."""


class ClientIdInUseError(MarshalError):
    """Another live process holds claims under this client id in this group."""


class TopicNotFoundError(MarshalError):
    """A topic to consume does not exist."""


class TopicRecreatedError(MarshalError):
    """A consumed topic was deleted and created again under a running member: the group's
    committed offsets point into the old topic's log, so the member stops; reset the
    group's offsets (``marshal reset-offsets``) before starting it again."""


class KafkaAuthenticationError(ConfigurationError):
    """Kafka refused this client's credentials (SASL), or the TLS handshake failed (an unknown
    CA, a certificate for another host): retrying cannot help. A :class:`ConfigurationError`,
    so a running member stops on it instead of retrying."""


class KafkaAuthorizationError(ConfigurationError):
    """Kafka's ACLs do not let this client's principal do what marshal_py needs (the message
    names the principal, the resource and the ACLs to grant). A :class:`ConfigurationError`,
    so a running member stops on it instead of retrying."""


class CommitFailedError(MarshalError):
    """A commit of records whose partitions this member gave up because the application
    asked for no records for longer than ``max_poll_interval`` (Kafka's
    CommitFailedException): they will be delivered again by the partitions' next owner."""
