"""Authorization of the transaction APIs (see :mod:`pylog.broker.authorization`).

* AddPartitionsToTxn -- TransactionalId Write, then Topic Write per topic: one refused
  topic fails the request (TOPIC_AUTHORIZATION_FAILED, the others
  OPERATION_NOT_ATTEMPTED), as in Kafka. Version 4 and later (brokers verifying
  transactions, KIP-890): Cluster ClusterAction, else CLUSTER_AUTHORIZATION_FAILED.
* AddOffsetsToTxn -- TransactionalId Write, then Group Read.
* EndTxn -- TransactionalId Write.
* TxnOffsetCommit -- TransactionalId Write, then Group Read (either refused fails every
  partition), then Topic Read per topic (a refused topic's partitions get
  TOPIC_AUTHORIZATION_FAILED, the others are committed), as in Kafka.
* DescribeTransactions -- TransactionalId Describe per id.
* ListTransactions -- only the ids the principal may describe are listed.

InitProducerId's check (TransactionalId Write) is with the others in
:mod:`pylog.broker.authorization`.
"""

from __future__ import annotations

from pylog.broker.authorization import (
    CLUSTER_AUTHORIZATION_FAILED, TOPIC_AUTHORIZATION_FAILED, TRANSACTIONAL_ID_AUTHORIZATION_FAILED, Access, Verdict, pruned)
from pylog.errors import GroupAuthorizationFailedError
from pylog.protocol import ApiKey
from pylog.security.acls import AclOperation as Op, ResourceType
from pylog.transactions.codes import OPERATION_NOT_ATTEMPTED
from pylog.transactions.handlers import add_partitions_answer

GROUP_AUTHORIZATION_FAILED = GroupAuthorizationFailedError.errno


def _may_write(access: Access, transactional_id: str) -> bool:
    return access(Op.WRITE, ResourceType.TRANSACTIONAL_ID, transactional_id)


def _add_partitions(body: dict, version: int, access: Access) -> Verdict:
    if version >= 4:  # from brokers only (KIP-890): ClusterAction
        if access.cluster(Op.CLUSTER_ACTION):
            return Verdict(body)
        return Verdict(response={"throttle_time_ms": 0,
                                 "error_code": CLUSTER_AUTHORIZATION_FAILED,
                                 "results_by_transaction": []})
    topics = body["v3_and_below_topics"]
    if not _may_write(access, body["v3_and_below_transactional_id"]):
        refused = {t["name"] for t in topics}
        code = TRANSACTIONAL_ID_AUTHORIZATION_FAILED
    else:
        refused = {t["name"] for t in topics if not access.topic(Op.WRITE, t["name"])}
        code = TOPIC_AUTHORIZATION_FAILED
    if not refused:
        return Verdict(body)
    return Verdict(response=add_partitions_answer(
        topics, lambda tp: code if tp.topic in refused else OPERATION_NOT_ATTEMPTED))


def _add_offsets(body: dict, version: int, access: Access) -> Verdict:
    if not _may_write(access, body["transactional_id"]):
        code = TRANSACTIONAL_ID_AUTHORIZATION_FAILED
    elif not access.group(Op.READ, body["group_id"]):
        code = GROUP_AUTHORIZATION_FAILED
    else:
        return Verdict(body)
    return Verdict(response={"throttle_time_ms": 0, "error_code": code})


def _end_txn(body: dict, version: int, access: Access) -> Verdict:
    if _may_write(access, body["transactional_id"]):
        return Verdict(body)
    return Verdict(response={"throttle_time_ms": 0,
                             "error_code": TRANSACTIONAL_ID_AUTHORIZATION_FAILED})


def _txn_offset_commit(body: dict, version: int, access: Access) -> Verdict:
    def failed(topics, code: int) -> list[dict]:
        return [{"name": t["name"], "partitions": [
            {"partition_index": p["partition_index"], "error_code": code}
            for p in t["partitions"]]} for t in topics]

    topics = body["topics"]
    if not _may_write(access, body["transactional_id"]):
        code = TRANSACTIONAL_ID_AUTHORIZATION_FAILED
    elif not access.group(Op.READ, body["group_id"]):
        code = GROUP_AUTHORIZATION_FAILED
    else:
        readable = {t["name"]: access.topic(Op.READ, t["name"]) for t in topics}
        kept = [t for t in topics if readable[t["name"]]]
        refused = failed([t for t in topics if not readable[t["name"]]],
                         TOPIC_AUTHORIZATION_FAILED)
        if not refused:
            return Verdict(body)
        if not kept:
            return Verdict(response={"throttle_time_ms": 0, "topics": refused})
        return Verdict(dict(body, topics=kept),
                       lambda response: dict(response, topics=list(response["topics"]) + refused))
    return Verdict(response={"throttle_time_ms": 0, "topics": failed(topics, code)})


def _describe(body: dict, version: int, access: Access) -> Verdict:
    def allowed(transactional_id: str) -> bool:
        return access(Op.DESCRIBE, ResourceType.TRANSACTIONAL_ID, transactional_id)

    ids = body["transactional_ids"]
    errors = [{"error_code": TRANSACTIONAL_ID_AUTHORIZATION_FAILED, "transactional_id": t,
               "transaction_state": "", "transaction_timeout_ms": 0,
               "transaction_start_time_ms": -1, "producer_id": -1, "producer_epoch": -1,
               "topics": []} for t in ids if not allowed(t)]
    return pruned(body, "transactional_ids", [t for t in ids if allowed(t)],
                  "transaction_states", errors)


def _list(body: dict, version: int, access: Access) -> Verdict:
    def visible(response: dict) -> dict:
        return dict(response, transaction_states=[
            t for t in response["transaction_states"]
            if access(Op.DESCRIBE, ResourceType.TRANSACTIONAL_ID, t["transactional_id"])])

    return Verdict(body, visible)


TRANSACTION_CHECKS = {
    ApiKey.ADD_PARTITIONS_TO_TXN: _add_partitions,
    ApiKey.ADD_OFFSETS_TO_TXN: _add_offsets,
    ApiKey.END_TXN: _end_txn,
    ApiKey.TXN_OFFSET_COMMIT: _txn_offset_commit,
    ApiKey.DESCRIBE_TRANSACTIONS: _describe,
    ApiKey.LIST_TRANSACTIONS: _list,
}
