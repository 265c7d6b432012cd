"""The real servers of the connector contract suite: the fixtures of each connector's own tests,
imported here so that a case starts its server on first use (on a loopback port, stopped at the
end of the session). A server that cannot start fails its cases; none is skipped."""

from tests.kafka.conftest import broker
from tests.postgres.conftest import postgres
from tests.redis_connector.conftest import redis_url

__all__ = ["broker", "postgres", "redis_url"]  # fixtures, requested by name
