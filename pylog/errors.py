"""The one error tree of pylog.

``PylogError`` is the root. Below it:

* ``KafkaError`` -- one subclass per Kafka protocol error code, generated from the
  table below, each with ``errno`` and ``retriable``. ``KafkaError.for_code(code)``
  finds the class; ``raise_for_code(code)`` raises it unless the code is 0.
* ``CorruptRecordError`` and its children -- bytes that are not a valid record batch.
  They are ``CorruptMessageError`` (Kafka code 2) so the broker answers CORRUPT_MESSAGE.
* ``ConfigError`` -- a bad configuration key or value; the message names the key.
* ``RetriableError`` -- a marker mixin: a retry of the same operation may succeed.

Class names are the Kafka names in CamelCase with ``Error`` appended, for example
``OFFSET_OUT_OF_RANGE`` -> ``OffsetOutOfRangeError``.
"""

from __future__ import annotations


class PylogError(Exception):
    """Root of every error raised by pylog on purpose."""


class RetriableError(PylogError):
    """Marker: retrying the same operation (maybe after a metadata refresh) can succeed."""


class ConfigError(PylogError):
    """A configuration key is unknown or its value is invalid. The message names the key."""

    def __init__(self, key: str, problem: str) -> None:
        super().__init__(f"{key}: {problem}")
        self.key = key
        self.problem = problem


class KafkaError(PylogError):
    """An error that has a Kafka protocol error code (``errno``)."""

    errno: int = -1
    name: str = "UNKNOWN_SERVER_ERROR"
    retriable: bool = False
    description: str = ""

    _by_code: dict[int, type["KafkaError"]] = {}

    def __init__(self, message: str | None = None) -> None:
        super().__init__(message or self.description or self.name)

    @classmethod
    def for_code(cls, code: int) -> type["KafkaError"]:
        """Return the error class for a Kafka error code (UnknownServerError if unknown)."""
        return cls._by_code.get(code, UnknownServerError)


# (code, name, retriable, description) from the Kafka protocol's error table.
_ERROR_TABLE = [
    (-1, "UNKNOWN_SERVER_ERROR", False, "The server experienced an unexpected error when processing the request."),
    (1, "OFFSET_OUT_OF_RANGE", False, "The requested offset is not within the range of offsets maintained by the server."),
    (2, "CORRUPT_MESSAGE", False, "This message has failed its CRC checksum, exceeds the valid size, has a null key for a compacted topic, or is otherwise corrupt."),
    (3, "UNKNOWN_TOPIC_OR_PARTITION", True, "This server does not host this topic-partition."),
    (4, "INVALID_FETCH_SIZE", False, "The requested fetch size is invalid."),
    (5, "LEADER_NOT_AVAILABLE", True, "There is no leader for this topic-partition as we are in the middle of a leadership election."),
    (6, "NOT_LEADER_OR_FOLLOWER", True, "For requests intended only for the leader, this error indicates that the broker is not the current leader."),
    (7, "REQUEST_TIMED_OUT", True, "The request timed out."),
    (8, "BROKER_NOT_AVAILABLE", False, "The broker is not available."),
    (9, "REPLICA_NOT_AVAILABLE", True, "The replica is not available for the requested topic-partition. Produce/Fetch requests and other requests"),
    (10, "MESSAGE_TOO_LARGE", False, "The request included a message larger than the max message size the server will accept."),
    (11, "STALE_CONTROLLER_EPOCH", False, "The controller moved to another broker."),
    (12, "OFFSET_METADATA_TOO_LARGE", False, "The metadata field of the offset request was too large."),
    (13, "NETWORK_EXCEPTION", True, "The server disconnected before a response was received."),
    (14, "COORDINATOR_LOAD_IN_PROGRESS", True, "The coordinator is loading and hence can't process requests."),
    (15, "COORDINATOR_NOT_AVAILABLE", True, "The coordinator is not available."),
    (16, "NOT_COORDINATOR", True, "This is not the correct coordinator."),
    (17, "INVALID_TOPIC_EXCEPTION", False, "The request attempted to perform an operation on an invalid topic."),
    (18, "RECORD_LIST_TOO_LARGE", False, "The request included message batch larger than the configured segment size on the server."),
    (19, "NOT_ENOUGH_REPLICAS", True, "Messages are rejected since there are fewer in-sync replicas than required."),
    (20, "NOT_ENOUGH_REPLICAS_AFTER_APPEND", True, "Messages are written to the log, but to fewer in-sync replicas than required."),
    (21, "INVALID_REQUIRED_ACKS", False, "Produce request specified an invalid value for required acks."),
    (22, "ILLEGAL_GENERATION", False, "Specified group generation id is not valid."),
    (23, "INCONSISTENT_GROUP_PROTOCOL", False, ""),
    (24, "INVALID_GROUP_ID", False, "The configured groupId is invalid."),
    (25, "UNKNOWN_MEMBER_ID", False, "The coordinator is not aware of this member."),
    (26, "INVALID_SESSION_TIMEOUT", False, ""),
    (27, "REBALANCE_IN_PROGRESS", False, "The group is rebalancing, so a rejoin is needed."),
    (28, "INVALID_COMMIT_OFFSET_SIZE", False, "The committing offset data size is not valid."),
    (29, "TOPIC_AUTHORIZATION_FAILED", False, "Topic authorization failed."),
    (30, "GROUP_AUTHORIZATION_FAILED", False, "Group authorization failed."),
    (31, "CLUSTER_AUTHORIZATION_FAILED", False, "Cluster authorization failed."),
    (32, "INVALID_TIMESTAMP", False, "The timestamp of the message is out of acceptable range."),
    (33, "UNSUPPORTED_SASL_MECHANISM", False, "The broker does not support the requested SASL mechanism."),
    (34, "ILLEGAL_SASL_STATE", False, "Request is not valid given the current SASL state."),
    (35, "UNSUPPORTED_VERSION", False, "The version of API is not supported."),
    (36, "TOPIC_ALREADY_EXISTS", False, "Topic with this name already exists."),
    (37, "INVALID_PARTITIONS", False, "Number of partitions is below 1."),
    (38, "INVALID_REPLICATION_FACTOR", False, "Replication factor is below 1 or larger than the number of available brokers."),
    (39, "INVALID_REPLICA_ASSIGNMENT", False, "Replica assignment is invalid."),
    (40, "INVALID_CONFIG", False, "Configuration is invalid."),
    (41, "NOT_CONTROLLER", False, "This is not the correct controller for this cluster."),
    (42, "INVALID_REQUEST", False, "This most likely occurs because of a request being malformed by the"),
    (43, "UNSUPPORTED_FOR_MESSAGE_FORMAT", False, "The message format version on the broker does not support the request."),
    (44, "POLICY_VIOLATION", False, "Request parameters do not satisfy the configured policy."),
    (45, "OUT_OF_ORDER_SEQUENCE_NUMBER", False, "The broker received an out of order sequence number."),
    (46, "DUPLICATE_SEQUENCE_NUMBER", False, "The broker received a duplicate sequence number."),
    (47, "INVALID_PRODUCER_EPOCH", False, "Producer attempted to produce with an old epoch."),
    (48, "INVALID_TXN_STATE", False, "The producer attempted a transactional operation in an invalid state."),
    (49, "INVALID_PRODUCER_ID_MAPPING", False, "The producer attempted to use a producer id which is not currently assigned to"),
    (50, "INVALID_TRANSACTION_TIMEOUT", False, "The transaction timeout is larger than the maximum value allowed by"),
    (51, "CONCURRENT_TRANSACTIONS", False, "The producer attempted to update a transaction"),
    (52, "TRANSACTION_COORDINATOR_FENCED", False, "Indicates that the transaction coordinator sending a WriteTxnMarker"),
    (53, "TRANSACTIONAL_ID_AUTHORIZATION_FAILED", False, "Transactional Id authorization failed."),
    (54, "SECURITY_DISABLED", False, "Security features are disabled."),
    (55, "OPERATION_NOT_ATTEMPTED", False, "The broker did not attempt to execute this operation. This may happen for"),
    (56, "KAFKA_STORAGE_ERROR", True, "Disk error when trying to access log file on the disk."),
    (57, "LOG_DIR_NOT_FOUND", False, "The user-specified log directory is not found in the broker config."),
    (58, "SASL_AUTHENTICATION_FAILED", False, "SASL Authentication failed."),
    (59, "UNKNOWN_PRODUCER_ID", False, "This exception is raised by the broker if it could not locate the producer metadata"),
    (60, "REASSIGNMENT_IN_PROGRESS", False, "A partition reassignment is in progress."),
    (61, "DELEGATION_TOKEN_AUTH_DISABLED", False, "Delegation Token feature is not enabled."),
    (62, "DELEGATION_TOKEN_NOT_FOUND", False, "Delegation Token is not found on server."),
    (63, "DELEGATION_TOKEN_OWNER_MISMATCH", False, "Specified Principal is not valid Owner/Renewer."),
    (64, "DELEGATION_TOKEN_REQUEST_NOT_ALLOWED", False, "Delegation Token requests are not allowed on PLAINTEXT/1-way SSL"),
    (65, "DELEGATION_TOKEN_AUTHORIZATION_FAILED", False, "Delegation Token authorization failed."),
    (66, "DELEGATION_TOKEN_EXPIRED", False, "Delegation Token is expired."),
    (67, "INVALID_PRINCIPAL_TYPE", False, "Supplied principalType is not supported."),
    (68, "NON_EMPTY_GROUP", False, "The group is not empty."),
    (69, "GROUP_ID_NOT_FOUND", False, "The group id does not exist."),
    (70, "FETCH_SESSION_ID_NOT_FOUND", True, "The fetch session ID was not found."),
    (71, "INVALID_FETCH_SESSION_EPOCH", True, "The fetch session epoch is invalid."),
    (72, "LISTENER_NOT_FOUND", False, "There is no listener on the leader broker that matches the listener on which"),
    (73, "TOPIC_DELETION_DISABLED", False, "Topic deletion is disabled."),
    (74, "FENCED_LEADER_EPOCH", True, "The leader epoch in the request is older than the epoch on the broker."),
    (75, "UNKNOWN_LEADER_EPOCH", True, "The leader epoch in the request is newer than the epoch on the broker."),
    (76, "UNSUPPORTED_COMPRESSION_TYPE", False, "The requesting client does not support the compression type of given partition."),
    (77, "STALE_BROKER_EPOCH", False, "Broker epoch has changed."),
    (78, "OFFSET_NOT_AVAILABLE", True, "The leader high watermark has not caught up from a recent leader"),
    (79, "MEMBER_ID_REQUIRED", False, "The group member needs to have a valid member id before actually entering a consumer group."),
    (80, "PREFERRED_LEADER_NOT_AVAILABLE", False, "The preferred leader was not available."),
    (81, "GROUP_MAX_SIZE_REACHED", False, "The consumer group has reached its max size."),
    (82, "FENCED_INSTANCE_ID", False, "The broker rejected this static consumer since"),
    (83, "ELIGIBLE_LEADERS_NOT_AVAILABLE", False, "Eligible topic partition leaders are not available."),
    (84, "ELECTION_NOT_NEEDED", False, "Leader election not needed for topic partition."),
    (85, "NO_REASSIGNMENT_IN_PROGRESS", False, "No partition reassignment is in progress."),
    (86, "GROUP_SUBSCRIBED_TO_TOPIC", False, "Deleting offsets of a topic is forbidden while the consumer group is actively subscribed to it."),
    (87, "INVALID_RECORD", False, "This record has failed the validation on broker and hence will be rejected."),
    (88, "UNSTABLE_OFFSET_COMMIT", False, "There are unstable offsets that need to be cleared."),
    (89, "THROTTLING_QUOTA_EXCEEDED", True, "The throttling quota has been exceeded."),
    (90, "PRODUCER_FENCED", False, "There is a newer producer with the same transactionalId"),
    (91, "RESOURCE_NOT_FOUND", False, "A request illegally referred to a resource that does not exist."),
    (92, "DUPLICATE_RESOURCE", False, "A request illegally referred to the same resource twice."),
    (93, "UNACCEPTABLE_CREDENTIAL", False, "Requested credential would not meet criteria for acceptability."),
    (94, "INCONSISTENT_VOTER_SET", False, "Indicates that the either the sender or recipient of a"),
    (95, "INVALID_UPDATE_VERSION", False, "The given update version was invalid."),
    (96, "FEATURE_UPDATE_FAILED", False, "Unable to update finalized features due to an unexpected server error."),
    (97, "PRINCIPAL_DESERIALIZATION_FAILURE", False, "Request principal deserialization failed during forwarding."),
    (98, "SNAPSHOT_NOT_FOUND", False, "Requested snapshot was not found."),
    (100, "UNKNOWN_TOPIC_ID", True, "This server does not host this topic ID."),
    (101, "DUPLICATE_BROKER_REGISTRATION", False, "This broker ID is already in use."),
    (102, "BROKER_ID_NOT_REGISTERED", False, "The given broker ID was not registered."),
    (103, "INCONSISTENT_TOPIC_ID", True, "The log's topic ID did not match the topic ID in the request."),
    (104, "INCONSISTENT_CLUSTER_ID", False, "The clusterId in the request does not match that found on the server."),
    (105, "TRANSACTIONAL_ID_NOT_FOUND", False, "The transactionalId could not be found."),
    (106, "FETCH_SESSION_TOPIC_ID_ERROR", True, "The fetch session encountered inconsistent topic ID usage."),
    (107, "INELIGIBLE_REPLICA", False, "The new ISR contains at least one ineligible replica."),
    (108, "NEW_LEADER_ELECTED", True, "The AlterPartition request successfully updated the partition state but the leader has changed."),
    (109, "OFFSET_MOVED_TO_TIERED_STORAGE", False, "The requested offset is moved to tiered storage."),
    (110, "FENCED_MEMBER_EPOCH", False, "The member epoch is fenced by the group coordinator. The member must abandon all its partitions and rejoin."),
    (111, "UNRELEASED_INSTANCE_ID", False, "The instance ID is still used by another member in the consumer group. That member must leave first."),
    (112, "UNSUPPORTED_ASSIGNOR", False, "The assignor or its version range is not supported by the consumer group."),
    (113, "STALE_MEMBER_EPOCH", False, "The member epoch is stale. The member must retry after receiving its updated member epoch via the ConsumerGroupHeartbeat API."),
    (114, "MISMATCHED_ENDPOINT_TYPE", False, "The request was sent to an endpoint of the wrong type."),
    (115, "UNSUPPORTED_ENDPOINT_TYPE", False, "This endpoint type is not supported yet."),
    (116, "UNKNOWN_CONTROLLER_ID", False, "This controller ID is not known."),
    (117, "UNKNOWN_SUBSCRIPTION_ID", False, "Client sent a push telemetry request with an invalid or outdated subscription ID."),
    (118, "TELEMETRY_TOO_LARGE", False, "Client sent a push telemetry request larger than the maximum size the broker will accept."),
    (119, "INVALID_REGISTRATION", False, "The controller has considered the broker registration to be invalid."),
    (120, "TRANSACTION_ABORTABLE", False, "The server encountered an error with the transaction. The client can abort the transaction to continue using this transactional ID."),
    (121, "INVALID_RECORD_STATE", False, "The record state is invalid. The acknowledgement of delivery could not be completed."),
    (122, "SHARE_SESSION_NOT_FOUND", False, "The share session was not found."),
    (123, "INVALID_SHARE_SESSION_EPOCH", False, "The share session epoch is invalid."),
    (124, "FENCED_STATE_EPOCH", False, "The share coordinator rejected the request because the share-group state epoch did not match."),
    (125, "INVALID_VOTER_KEY", False, "The voter key doesn't match the receiving replica's key."),
    (126, "DUPLICATE_VOTER", False, "The voter is already part of the set of voters."),
    (127, "VOTER_NOT_FOUND", False, "The voter is not part of the set of voters."),
    (128, "INVALID_REGULAR_EXPRESSION", False, "The regular expression is not valid."),]


def _class_name(kafka_name: str) -> str:
    camel = "".join(part.capitalize() for part in kafka_name.split("_"))
    return camel if camel.endswith(("Error", "Exception")) else camel + "Error"


def _build_error_classes() -> None:
    for code, name, retriable, description in _ERROR_TABLE:
        bases = (KafkaError, RetriableError) if retriable else (KafkaError,)
        cls = type(
            _class_name(name),
            bases,
            {"errno": code, "name": name, "retriable": retriable,
             "description": description, "__module__": __name__,
             "__doc__": f"Kafka error {code} {name}: {description}"},
        )
        KafkaError._by_code[code] = cls
        globals()[cls.__name__] = cls


_build_error_classes()

# Names used across the code base, spelled out so linters and readers can find them.
UnknownServerError: type[KafkaError] = globals()["UnknownServerError"]
OffsetOutOfRangeError: type[KafkaError] = globals()["OffsetOutOfRangeError"]
CorruptMessageError: type[KafkaError] = globals()["CorruptMessageError"]
UnknownTopicOrPartitionError: type[KafkaError] = globals()["UnknownTopicOrPartitionError"]
LeaderNotAvailableError: type[KafkaError] = globals()["LeaderNotAvailableError"]
NotLeaderOrFollowerError: type[KafkaError] = globals()["NotLeaderOrFollowerError"]
RequestTimedOutError: type[KafkaError] = globals()["RequestTimedOutError"]
MessageTooLargeError: type[KafkaError] = globals()["MessageTooLargeError"]
NetworkExceptionError: type[KafkaError] = globals()["NetworkException"]
InvalidTopicError: type[KafkaError] = globals()["InvalidTopicException"]
RecordListTooLargeError: type[KafkaError] = globals()["RecordListTooLargeError"]
InvalidRequiredAcksError: type[KafkaError] = globals()["InvalidRequiredAcksError"]
UnsupportedVersionError: type[KafkaError] = globals()["UnsupportedVersionError"]
TopicAlreadyExistsError: type[KafkaError] = globals()["TopicAlreadyExistsError"]
InvalidPartitionsError: type[KafkaError] = globals()["InvalidPartitionsError"]
InvalidReplicationFactorError: type[KafkaError] = globals()["InvalidReplicationFactorError"]
InvalidConfigError: type[KafkaError] = globals()["InvalidConfigError"]
InvalidRequestError: type[KafkaError] = globals()["InvalidRequestError"]
UnsupportedCompressionTypeError: type[KafkaError] = globals()["UnsupportedCompressionTypeError"]
KafkaStorageError: type[KafkaError] = globals()["KafkaStorageError"]
InvalidRecordError: type[KafkaError] = globals()["InvalidRecordError"]
InvalidTimestampError: type[KafkaError] = globals()["InvalidTimestampError"]
CoordinatorNotAvailableError: type[KafkaError] = globals()["CoordinatorNotAvailableError"]
UnknownTopicIdError: type[KafkaError] = globals()["UnknownTopicIdError"]
InvalidTxnStateError: type[KafkaError] = globals()["InvalidTxnStateError"]
OffsetNotAvailableError: type[KafkaError] = globals()["OffsetNotAvailableError"]


def raise_for_code(code: int, message: str | None = None) -> None:
    """Raise the KafkaError subclass for ``code`` unless it is 0 (NONE)."""
    if code != 0:
        raise KafkaError.for_code(code)(message)


class CorruptRecordError(CorruptMessageError):
    """Bytes that are not a valid v2 record batch (the broker answers CORRUPT_MESSAGE)."""


class TruncatedBatchError(CorruptRecordError):
    """The buffer ends before the batch (or its header) does."""


class BatchCrcError(CorruptRecordError):
    """The CRC-32C stored in the batch does not match its contents."""


class UnsupportedMagicError(CorruptRecordError):
    """The batch's magic byte is not 2 (only the v2 record format is supported). Produced,
    it is answered INVALID_RECORD, as Kafka 4 answers a v0/v1 message set."""

    errno = 87
    name = "INVALID_RECORD"


class BatchLengthError(CorruptRecordError):
    """The batch length field is smaller than a header or larger than allowed."""


class RecordDecodeError(CorruptRecordError):
    """A record inside a batch (varints, key, value, headers) is malformed."""


class CompressionError(CorruptRecordError):
    """The batch's compressed payload could not be decompressed, or the codec is unknown."""
