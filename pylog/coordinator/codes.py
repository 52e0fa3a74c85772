"""The error codes the group coordinator answers with, taken from pylog's one error tree
(``pylog.errors``) rather than written out as numbers in each module."""

from __future__ import annotations

from pylog import errors

NONE = 0
UNKNOWN_TOPIC_OR_PARTITION = errors.UnknownTopicOrPartitionError.errno
OFFSET_METADATA_TOO_LARGE = errors.OffsetMetadataTooLargeError.errno
COORDINATOR_LOAD_IN_PROGRESS = errors.CoordinatorLoadInProgressError.errno
COORDINATOR_NOT_AVAILABLE = errors.CoordinatorNotAvailableError.errno
NOT_COORDINATOR = errors.NotCoordinatorError.errno
ILLEGAL_GENERATION = errors.IllegalGenerationError.errno
INCONSISTENT_GROUP_PROTOCOL = errors.InconsistentGroupProtocolError.errno
INVALID_GROUP_ID = errors.InvalidGroupIdError.errno
UNKNOWN_MEMBER_ID = errors.UnknownMemberIdError.errno
INVALID_SESSION_TIMEOUT = errors.InvalidSessionTimeoutError.errno
REBALANCE_IN_PROGRESS = errors.RebalanceInProgressError.errno
NON_EMPTY_GROUP = errors.NonEmptyGroupError.errno
GROUP_ID_NOT_FOUND = errors.GroupIdNotFoundError.errno
MEMBER_ID_REQUIRED = errors.MemberIdRequiredError.errno
GROUP_MAX_SIZE_REACHED = errors.GroupMaxSizeReachedError.errno
FENCED_INSTANCE_ID = errors.FencedInstanceIdError.errno
GROUP_SUBSCRIBED_TO_TOPIC = errors.GroupSubscribedToTopicError.errno
UNSTABLE_OFFSET_COMMIT = errors.UnstableOffsetCommitError.errno
