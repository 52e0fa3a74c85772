"""pylog's Kafka-protocol client: SimpleConsumer (fetch by offset), Producer, Admin.

Works against pylog brokers and any Kafka-protocol server: each connection negotiates
API versions with ApiVersions first.

    from pylog.client import SimpleConsumer, Producer, Admin
"""

from pylog.client.admin import Admin
from pylog.client.consumer import SimpleConsumer
from pylog.client.partitioner import (
    DefaultPartitioner,
    Partitioner,
    RoundRobinPartitioner,
    murmur2,
    murmur2_partition,
)
from pylog.client.producer import (
    ConsumerGroupMetadata,
    Producer,
    ProducerFencedError,
    TransactionAbortableError,
    TransactionAbortedError,
    TransactionStateError,
)
from pylog.client.results import (
    FetchResult,
    OffsetOutOfRange,
    PartitionDescription,
    RawFetchResult,
    RecordMetadata,
    TopicDescription,
)
from pylog.records import Record
from pylog.types import BrokerEndpoint, TopicPartition

__all__ = [
    "Admin", "SimpleConsumer", "Producer", "FetchResult", "RawFetchResult", "RecordMetadata",
    "TopicDescription", "PartitionDescription", "OffsetOutOfRange", "Record", "BrokerEndpoint",
    "TopicPartition", "DefaultPartitioner", "RoundRobinPartitioner", "Partitioner", "murmur2",
    "murmur2_partition", "ConsumerGroupMetadata", "ProducerFencedError",
    "TransactionAbortableError", "TransactionAbortedError", "TransactionStateError",
]
