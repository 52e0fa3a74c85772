"""Many long polls at once: an append answers the ones waiting on its partition, the
others keep waiting (and are answered by a later append or at their own max_wait), and
connections closed while waiting leave nothing behind."""

import select

from pylog.protocol import ApiKey
from pylog.records import decode_batch, iter_batch_headers
from tests.broker.wire import WireClient, batch, create_body, fetch_body, produce_body

FOREVER_MS = 600_000  # far beyond the sockets' timeout: only an append answers in time


def values(fetched, partition: int) -> list[bytes]:
    (topic,) = fetched["responses"]
    (answer,) = [p for p in topic["partitions"] if p["partition_index"] == partition]
    assert answer["error_code"] == 0, answer
    raw = bytes(answer["records"] or b"")
    return [r.value for pos, _ in iter_batch_headers(raw) for r in decode_batch(raw, pos).records]


def long_polls(broker, topic: str, partition: int, count: int) -> list[WireClient]:
    clients = [WireClient(broker.bootstrap) for _ in range(count)]
    for client in clients:
        client.send(ApiKey.FETCH, 11, fetch_body(topic, {partition: 0}, max_wait_ms=FOREVER_MS))
    return clients


def test_an_append_answers_the_long_polls_on_its_partition_only(broker):
    with WireClient(broker.bootstrap) as admin:
        created = admin.call(ApiKey.CREATE_TOPICS, 4, create_body("many-polls", 2))
        assert created["topics"][0]["error_code"] == 0, created
    on_other = long_polls(broker, "many-polls", 1, 40)
    on_appended = long_polls(broker, "many-polls", 0, 3)
    try:
        with WireClient(broker.bootstrap) as producer:
            producer.call(ApiKey.PRODUCE, 8, produce_body("many-polls", {0: batch([b"first"])}))
            for client in on_appended:
                assert values(client.receive(ApiKey.FETCH, 11)[1], 0) == [b"first"]
            # The polls on partition 1 were not answered by the append to partition 0.
            readable, _, _ = select.select([c.sock for c in on_other], [], [], 0.5)
            assert readable == []
            for client in on_other[:10]:  # gone while waiting
                client.close()
            producer.call(ApiKey.PRODUCE, 8, produce_body("many-polls", {1: batch([b"second"])}))
        for client in on_other[10:]:
            assert values(client.receive(ApiKey.FETCH, 11)[1], 1) == [b"second"]
            # The connection serves its next request as usual.
            metadata = client.call(ApiKey.METADATA, 1, {"topics": [{"name": "many-polls"}]})
            assert metadata["topics"][0]["name"] == "many-polls"
    finally:
        for client in on_other + on_appended:
            client.close()


def test_long_polls_with_different_deadlines_are_each_answered_empty(broker):
    with WireClient(broker.bootstrap) as admin:
        created = admin.call(ApiKey.CREATE_TOPICS, 4, create_body("deadlines", 1))
        assert created["topics"][0]["error_code"] == 0, created
    clients = [WireClient(broker.bootstrap) for _ in range(12)]
    try:
        # Latest deadline first, so the order they are due in is not the order they came.
        for i, client in enumerate(clients):
            client.send(ApiKey.FETCH, 11,
                        fetch_body("deadlines", {0: 0}, max_wait_ms=50 * (len(clients) - i)))
        for client in clients:
            assert values(client.receive(ApiKey.FETCH, 11)[1], 0) == []
    finally:
        for client in clients:
            client.close()
