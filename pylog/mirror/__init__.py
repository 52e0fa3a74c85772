"""``pylog mirror``: copy topics from a source cluster to a target cluster, exactly once.

The pieces:

- :mod:`pylog.mirror.config`: the mirror's settings (flags and a YAML file), checked at start.
- :mod:`pylog.mirror.topics`: which source topics are mirrored, their target names, and the
  target topics created (and grown) to match the source's partitions and topic configs.
- :mod:`pylog.mirror.task`: one source partition's transactional producer: its records, the
  source position and the offset syncs committed together in one target transaction.
- :mod:`pylog.mirror.offset_syncs`: the mapping of source offsets to target offsets.
- :mod:`pylog.mirror.checkpoints`: source consumer groups' offsets translated for the target.
- :mod:`pylog.mirror.runner`: the consumer loop, rebalances, and a clean stop.
- :mod:`pylog.mirror.progress`: records/s, bytes/s and lag per topic on the console.

confluent-kafka (librdkafka) does the network work; it is the ``mirror`` extra.
"""

MISSING_CLIENT = ("pylog mirror needs confluent-kafka: pip install 'pylog[mirror]'")


def require_client():
    """Import confluent_kafka, or raise PylogError with the install command."""
    try:
        import confluent_kafka
    except ImportError:
        from pylog.errors import PylogError
        raise PylogError(MISSING_CLIENT) from None
    return confluent_kafka
