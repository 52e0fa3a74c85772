"""Handlers of the transaction APIs: request bodies in, the coordinator's answers out.

InitProducerId (v0-4, idempotent and transactional), AddPartitionsToTxn (v0-3 from
producers; v4-5, several transactions per request, from brokers verifying transactions:
KIP-890 part 1), AddOffsetsToTxn (v0-4), EndTxn (v0-4), DescribeTransactions (v0) and
ListTransactions (v0-1), registered with ``Dispatcher.serve``. An answer that waits for a write to
``__transaction_state`` comes back as a ``GroupWork`` parked on that partition.
Clients before PRODUCER_FENCED (InitProducerId < v4, the others < v2) get
INVALID_PRODUCER_EPOCH instead, as Kafka answers them.
"""

from __future__ import annotations

from typing import Callable

from pylog.broker.groups import GroupWork
from pylog.coordinator.group import Pending
from pylog.coordinator.store import OFFSETS_TOPIC
from pylog.protocol import ApiKey
from pylog.transactions.codes import (
    COORDINATOR_NOT_AVAILABLE, INVALID_REQUEST, INVALID_TXN_STATE, OPERATION_NOT_ATTEMPTED,
    TRANSACTION_ABORTABLE, UNKNOWN_TOPIC_OR_PARTITION, fenced_for)
from pylog.transactions.coordinator import TransactionCoordinator
from pylog.transactions.store import APPEND_TIMEOUT_S, txn_tp
from pylog.types import TopicPartition

SERVED = {
    ApiKey.INIT_PRODUCER_ID: (0, 4),
    ApiKey.ADD_PARTITIONS_TO_TXN: (0, 5),
    ApiKey.ADD_OFFSETS_TO_TXN: (0, 4),
    ApiKey.END_TXN: (0, 4),
    ApiKey.DESCRIBE_TRANSACTIONS: (0, 0),
    ApiKey.LIST_TRANSACTIONS: (0, 1),
}


class TransactionHandlers:
    """Transaction API handlers over one ``TransactionCoordinator``.

    ``offsets_partition_of(group_id)``: the group's ``__consumer_offsets`` partition
    (what AddOffsetsToTxn adds to the transaction).
    """

    def __init__(self, coordinator: TransactionCoordinator,
                 offsets_partition_of: Callable[[str], int],
                 clock: Callable[[], float]) -> None:
        self.coordinator = coordinator
        self.offsets_partition_of = offsets_partition_of
        self.clock = clock

    def services(self) -> list[tuple[int, tuple[int, int], Callable]]:
        """(api key, versions, handler) for ``Dispatcher.serve``."""
        handlers = {
            ApiKey.INIT_PRODUCER_ID: self.init_producer_id,
            ApiKey.ADD_PARTITIONS_TO_TXN: self.add_partitions_to_txn,
            ApiKey.ADD_OFFSETS_TO_TXN: self.add_offsets_to_txn,
            ApiKey.END_TXN: self.end_txn,
            ApiKey.DESCRIBE_TRANSACTIONS: self.describe_transactions,
            ApiKey.LIST_TRANSACTIONS: self.list_transactions,
        }
        return [(key, SERVED[key], handler) for key, handler in handlers.items()]

    def _wait(self, transactional_id: str, answer, render: Callable[[dict], dict],
              on_timeout: dict):
        """``render(body)`` now, or a parked ``GroupWork`` if ``answer`` is Pending."""
        if not isinstance(answer, Pending):
            return render(answer)
        partition = self.coordinator.state.partition_of(transactional_id)
        work = GroupWork([answer], lambda bodies: render(bodies[0]), on_timeout,
                         self.clock() + APPEND_TIMEOUT_S + 1, self.coordinator.state.appends.poll,
                         [txn_tp(partition)])
        return work.attempt(final=False) or work

    # -- InitProducerId ---------------------------------------------------------------------

    def init_producer_id(self, version: int, body: dict, session) -> dict | GroupWork:
        producer_id = body.get("producer_id", -1)
        producer_epoch = body.get("producer_epoch", -1)
        expected = None
        if producer_id != -1 or producer_epoch != -1:
            if producer_id == -1 or producer_epoch == -1:
                return _init_answer({"error_code": INVALID_REQUEST, "producer_id": -1,
                                     "producer_epoch": -1}, version)
            expected = (producer_id, producer_epoch)
        answer = self.coordinator.init_producer_id(
            body["transactional_id"], body["transaction_timeout_ms"], expected)
        return self._wait(body["transactional_id"] or "", answer,
                          lambda b: _init_answer(b, version),
                          {"error_code": COORDINATOR_NOT_AVAILABLE, "producer_id": -1,
                           "producer_epoch": -1})

    # -- AddPartitionsToTxn / AddOffsetsToTxn -----------------------------------------------

    def add_partitions_to_txn(self, version: int, body: dict, session) -> dict | GroupWork:
        if version >= 4:
            return self._broker_add_partitions(version, body)
        topics = body["v3_and_below_topics"]
        wanted = [TopicPartition(t["name"], p) for t in topics for p in t["partitions"]]
        missing = {tp for tp in wanted if not self._exists(tp)}
        if missing:
            # One unknown partition fails the whole request; the others were not tried.
            errors = {tp: UNKNOWN_TOPIC_OR_PARTITION if tp in missing else OPERATION_NOT_ATTEMPTED
                      for tp in wanted}
            return add_partitions_answer(topics, errors.get)
        answer = self.coordinator.add_partitions(
            body["v3_and_below_transactional_id"], body["v3_and_below_producer_id"],
            body["v3_and_below_producer_epoch"], set(wanted))

        def render(result: dict | int) -> dict:
            code = fenced_for(version, 2, result if isinstance(result, int)
                              else result["error_code"])
            return add_partitions_answer(topics, lambda tp: code)

        return self._wait(body["v3_and_below_transactional_id"], answer, render,
                          {"error_code": COORDINATOR_NOT_AVAILABLE})

    def _broker_add_partitions(self, version: int, body: dict) -> dict | GroupWork:
        """AddPartitionsToTxn v4-5 from a broker: each transaction verified (``verify_only``,
        what partition leaders ask) or its partitions added (answered once written).
        Before v5 a partition not in its transaction is INVALID_TXN_STATE rather than
        TRANSACTION_ABORTABLE, as Kafka answers."""
        results, waits = [], []
        for txn in body["transactions"]:
            topics = txn["topics"]
            wanted = {TopicPartition(t["name"], p) for t in topics for p in t["partitions"]}
            if txn["verify_only"]:
                errors = self.coordinator.verify_partitions(
                    txn["transactional_id"], txn["producer_id"], txn["producer_epoch"], wanted)
                if version < 5:
                    errors = {tp: INVALID_TXN_STATE if code == TRANSACTION_ABORTABLE else code
                              for tp, code in errors.items()}
                answer = errors
            else:
                answer = self.coordinator.add_partitions(
                    txn["transactional_id"], txn["producer_id"], txn["producer_epoch"], wanted)
            result = {"transactional_id": txn["transactional_id"], "topic_results": topics}
            results.append((result, answer))
            if isinstance(answer, Pending):
                waits.append(answer)

        def render(bodies: list[dict]) -> dict:
            written = iter(bodies)  # the Pending answers' bodies, in request order
            out = []
            for result, answer in results:
                if isinstance(answer, Pending):
                    answer = next(written)
                if isinstance(answer, int) or "error_code" in answer:
                    code = answer if isinstance(answer, int) else answer["error_code"]
                    error_of = (lambda tp, code=code: code)
                else:
                    error_of = answer.get
                out.append({"transactional_id": result["transactional_id"],
                            "topic_results": add_partitions_answer(
                                result["topic_results"], error_of)[
                                    "results_by_topic_v3_and_below"]})
            return {"throttle_time_ms": 0, "error_code": 0, "results_by_transaction": out}

        if not waits:
            return render([])
        partitions = sorted({txn_tp(self.coordinator.state.partition_of(txn["transactional_id"]))
                             for txn in body["transactions"]})
        work = GroupWork(waits, render, {"error_code": COORDINATOR_NOT_AVAILABLE},
                         self.clock() + APPEND_TIMEOUT_S + 1,
                         self.coordinator.state.appends.poll, partitions)
        return work.attempt(final=False) or work

    def _exists(self, tp: TopicPartition) -> bool:
        topic = self.coordinator.metadata.topic(tp.topic)
        return topic is not None and tp.partition in topic.partitions

    def add_offsets_to_txn(self, version: int, body: dict, session) -> dict | GroupWork:
        tp = TopicPartition(OFFSETS_TOPIC, self.offsets_partition_of(body["group_id"]))
        answer = self.coordinator.add_partitions(
            body["transactional_id"], body["producer_id"], body["producer_epoch"], {tp})
        return self._wait(body["transactional_id"], answer, lambda r: _error_answer(r, version),
                          {"error_code": COORDINATOR_NOT_AVAILABLE})

    # -- EndTxn -----------------------------------------------------------------------------

    def end_txn(self, version: int, body: dict, session) -> dict | GroupWork:
        answer = self.coordinator.end_txn(body["transactional_id"], body["producer_id"],
                                          body["producer_epoch"], body["committed"])
        return self._wait(body["transactional_id"], answer, lambda r: _error_answer(r, version),
                          {"error_code": COORDINATOR_NOT_AVAILABLE})

    # -- DescribeTransactions / ListTransactions ------------------------------------------

    def describe_transactions(self, version: int, body: dict, session) -> dict:
        return {"throttle_time_ms": 0, "transaction_states": [
            self.coordinator.describe(t) for t in body["transactional_ids"]]}

    def list_transactions(self, version: int, body: dict, session) -> dict:
        answer = self.coordinator.list_transactions(
            list(body["state_filters"]), list(body["producer_id_filters"]),
            body.get("duration_filter", -1))
        return dict(answer, throttle_time_ms=0)


def _init_answer(result: dict, version: int) -> dict:
    return {"throttle_time_ms": 0, "error_code": fenced_for(version, 4, result["error_code"]),
            "producer_id": result["producer_id"], "producer_epoch": result["producer_epoch"]}


def _error_answer(result: dict | int, version: int) -> dict:
    code = result if isinstance(result, int) else result["error_code"]
    return {"throttle_time_ms": 0, "error_code": fenced_for(version, 2, code)}


def add_partitions_answer(topics: list[dict], error_of: Callable[[TopicPartition], int]
                          ) -> dict:
    """An AddPartitionsToTxn (v0-3) response for the request's ``topics``, each
    partition's error from ``error_of``."""
    return {"throttle_time_ms": 0, "results_by_topic_v3_and_below": [
        {"name": t["name"], "results_by_partition": [
            {"partition_index": p,
             "partition_error_code": error_of(TopicPartition(t["name"], p))}
            for p in t["partitions"]]} for t in topics]}
