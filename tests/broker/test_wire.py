"""The broker at the wire level: versions, errors per partition, ordering, long poll."""

import struct
import threading
import uuid

import pytest

from pylog.protocol import ApiKey, decode_response, encode_request
from pylog.records import decode_batch, iter_batch_headers
from tests.broker.wire import WireClient, batch, create_body, fetch_body, produce_body

CORRUPT_MESSAGE, UNKNOWN_TOPIC, OFFSET_OUT_OF_RANGE, MESSAGE_TOO_LARGE = 2, 3, 1, 10
INVALID_TOPIC, UNSUPPORTED_VERSION, TOPIC_EXISTS, INVALID_CONFIG = 17, 35, 36, 40
UNKNOWN_TOPIC_ID, MISMATCHED_ENDPOINT_TYPE, UNSUPPORTED_ENDPOINT_TYPE = 100, 114, 115
INVALID_REQUEST = 42


@pytest.fixture
def wire(broker):
    with WireClient(broker.bootstrap) as client:
        yield client


def create(wire, name, partitions=1, configs=None):
    result = wire.call(ApiKey.CREATE_TOPICS, 4, create_body(name, partitions, configs))
    assert result["topics"][0]["error_code"] == 0, result
    return result


def records_of(fetch_response, partition=0):
    for topic in fetch_response["responses"]:
        for p in topic["partitions"]:
            if p["partition_index"] == partition:
                return p
    raise AssertionError(f"no partition {partition} in {fetch_response}")


def values(raw) -> list[bytes]:
    raw = bytes(raw)
    return [r.value for pos, _ in iter_batch_headers(raw) for r in decode_batch(raw, pos).records]


@pytest.mark.parametrize("version", [0, 1, 2, 3])
def test_api_versions_lists_served_ranges(wire, version):
    body = wire.call(ApiKey.API_VERSIONS, version, {"client_software_name": "t",
                                                     "client_software_version": "1"})
    ranges = {k["api_key"]: (k["min_version"], k["max_version"]) for k in body["api_keys"]}
    assert body["error_code"] == 0
    assert ranges[ApiKey.PRODUCE] == (0, 9)
    assert ranges[ApiKey.FETCH][0] <= 4 and ranges[ApiKey.FETCH][1] >= 11
    assert ranges[ApiKey.METADATA][1] >= 8


def test_unsupported_api_versions_gets_error_35_in_v0_format(wire):
    # A v9 request: the broker cannot parse its body, but answers in v0 anyway.
    frame = bytearray(encode_request(ApiKey.API_VERSIONS, 3, 5, "t", {}))
    frame[6:8] = struct.pack(">h", 9)
    wire.send_raw(bytes(frame))
    correlation_id, body = decode_response(ApiKey.API_VERSIONS, 0, wire.read_frame())
    assert correlation_id == 5 and body["error_code"] == UNSUPPORTED_VERSION
    assert any(k["api_key"] == ApiKey.FETCH for k in body["api_keys"])


def test_produce_v2_is_refused_with_unsupported_version(wire):
    create(wire, "old-produce")
    body = wire.call(ApiKey.PRODUCE, 2, produce_body("old-produce", {0: batch([b"x"])}))
    assert body["responses"][0]["partition_responses"][0]["error_code"] == UNSUPPORTED_VERSION


@pytest.mark.parametrize("version", [3, 5, 7, 8, 9])
def test_produce_then_fetch_every_version(wire, version):
    topic = f"pf-{version}"
    create(wire, topic)
    result = wire.call(ApiKey.PRODUCE, version, produce_body(topic, {0: batch([b"a", b"b"])}))
    assert result["responses"][0]["partition_responses"][0]["error_code"] == 0
    for fetch_version in (4, 7, 11, 12):
        fetched = records_of(wire.call(ApiKey.FETCH, fetch_version, fetch_body(topic, {0: 0})))
        assert fetched["error_code"] == 0 and fetched["high_watermark"] == 2
        assert values(fetched["records"]) == [b"a", b"b"]


def test_one_bad_partition_costs_only_itself(wire):
    create(wire, "mixed", partitions=3)
    corrupt = bytearray(batch([b"good"]))
    corrupt[-1] ^= 0xFF  # breaks the CRC
    body = produce_body("mixed", {0: batch([b"ok"]), 1: bytes(corrupt), 2: batch([b"y" * 300000])})
    answers = {p["index"]: p for p in wire.call(ApiKey.PRODUCE, 8, body)
               ["responses"][0]["partition_responses"]}
    assert answers[0]["error_code"] == 0
    assert answers[1]["error_code"] == CORRUPT_MESSAGE
    assert answers[2]["error_code"] == MESSAGE_TOO_LARGE
    fetched = wire.call(ApiKey.FETCH, 11, fetch_body("mixed", {0: 0, 1: 0, 2: 0}))
    assert values(records_of(fetched, 0)["records"]) == [b"ok"]
    assert records_of(fetched, 1)["high_watermark"] == 0   # nothing of the bad batch written
    assert records_of(fetched, 2)["high_watermark"] == 0


def test_unknown_and_invalid_topics(wire):
    body = produce_body("no-such-topic", {0: batch([b"x"])})
    code = wire.call(ApiKey.PRODUCE, 8, body)["responses"][0]["partition_responses"][0]
    assert code["error_code"] == UNKNOWN_TOPIC
    body = produce_body("bad/name", {0: batch([b"x"])})
    code = wire.call(ApiKey.PRODUCE, 8, body)["responses"][0]["partition_responses"][0]
    assert code["error_code"] == INVALID_TOPIC
    create(wire, "one-partition")
    body = produce_body("one-partition", {7: batch([b"x"])})
    code = wire.call(ApiKey.PRODUCE, 8, body)["responses"][0]["partition_responses"][0]
    assert code["error_code"] == UNKNOWN_TOPIC
    meta = wire.call(ApiKey.METADATA, 8, {"topics": [{"name": "bad/name"}],
                                          "allow_auto_topic_creation": True})
    assert meta["topics"][0]["error_code"] == INVALID_TOPIC


@pytest.mark.parametrize("version", [10, 11, 12])
def test_metadata_names_topic_ids_and_finds_topics_by_id(wire, version):
    name = f"by-name-v{version}"
    created = wire.call(ApiKey.CREATE_TOPICS, 7, create_body(name, 2))["topics"][0]
    assert created["error_code"] == 0
    topic_id = created["topic_id"]
    assert topic_id not in (None, uuid.UUID(int=0))
    unknown = uuid.UUID("0123456789abcdef0123456789abcdef")
    meta = wire.call(ApiKey.METADATA, version, {
        "topics": [{"topic_id": unknown, "name": None}, {"name": name},
                   {"topic_id": topic_id, "name": None}],
        "allow_auto_topic_creation": False})
    missing, by_name, by_id = meta["topics"]
    assert missing["error_code"] == UNKNOWN_TOPIC_ID and missing["topic_id"] == unknown
    assert missing["name"] == (None if version >= 12 else "") and missing["partitions"] == []
    assert by_name["error_code"] == 0 and by_name["name"] == name
    assert by_name["topic_id"] == topic_id
    assert by_id["error_code"] == 0 and by_id["name"] == name
    assert by_id["topic_id"] == topic_id and len(by_id["partitions"]) == 2
    # A topic deleted and created again under its name is another topic.
    assert wire.call(ApiKey.DELETE_TOPICS, 4, {"topic_names": [name], "timeout_ms": 10000})[
        "responses"][0]["error_code"] == 0
    again = wire.call(ApiKey.CREATE_TOPICS, 7, create_body(name, 1))["topics"][0]
    assert again["error_code"] == 0 and again["topic_id"] not in (topic_id, uuid.UUID(int=0))
    meta = wire.call(ApiKey.METADATA, version, {
        "topics": [{"topic_id": topic_id, "name": None}], "allow_auto_topic_creation": False})
    assert meta["topics"][0]["error_code"] == UNKNOWN_TOPIC_ID


@pytest.mark.parametrize("version", [0, 1, 2])
def test_describe_cluster_describes_brokers_only(broker, wire, version):
    body = {"include_cluster_authorized_operations": False, "endpoint_type": 1,
            "include_fenced_brokers": True}
    answer = wire.call(ApiKey.DESCRIBE_CLUSTER, version, body)
    assert answer["error_code"] == 0 and answer["cluster_id"]
    assert [(b["broker_id"], b["port"]) for b in answer["brokers"]] == [
        (answer["controller_id"], broker.port)]
    if version >= 1:
        assert answer["endpoint_type"] == 1
        # KIP-919: controllers are described by controllers, of which ZooKeeper mode has none.
        for asked, error in ((2, MISMATCHED_ENDPOINT_TYPE), (7, UNSUPPORTED_ENDPOINT_TYPE)):
            refused = wire.call(ApiKey.DESCRIBE_CLUSTER, version, dict(body, endpoint_type=asked))
            assert (refused["error_code"], refused["brokers"]) == (error, [])
    if version >= 2:
        assert answer["brokers"][0]["is_fenced"] is False


def test_describe_topic_partitions_refuses_a_cursor_outside_the_topics_asked_for(wire):
    create(wire, "dtp-wire", partitions=2)
    answer = wire.call(ApiKey.DESCRIBE_TOPIC_PARTITIONS, 0, {
        "topics": [{"name": "dtp-wire"}], "response_partition_limit": 10,
        "cursor": {"topic_name": "dtp-elsewhere", "partition_index": 0}})
    assert [(t["name"], t["error_code"]) for t in answer["topics"]] == [
        ("dtp-wire", INVALID_REQUEST)]
    assert answer["next_cursor"] is None
    negative = wire.call(ApiKey.DESCRIBE_TOPIC_PARTITIONS, 0, {
        "topics": [{"name": "dtp-wire"}], "response_partition_limit": 10,
        "cursor": {"topic_name": "dtp-wire", "partition_index": -1}})
    assert [(t["name"], t["error_code"]) for t in negative["topics"]] == [
        ("dtp-wire", INVALID_REQUEST)]
    # A cursor past a topic's last partition: the topic with none, then the next page.
    answer = wire.call(ApiKey.DESCRIBE_TOPIC_PARTITIONS, 0, {
        "topics": [{"name": "dtp-wire"}], "response_partition_limit": 10,
        "cursor": {"topic_name": "dtp-wire", "partition_index": 1}})
    assert [p["partition_index"] for p in answer["topics"][0]["partitions"]] == [1]


def test_fetch_out_of_range(wire):
    create(wire, "range")
    wire.call(ApiKey.PRODUCE, 8, produce_body("range", {0: batch([b"x"])}))
    fetched = records_of(wire.call(ApiKey.FETCH, 11, fetch_body("range", {0: 5})))
    assert fetched["error_code"] == OFFSET_OUT_OF_RANGE
    at_end = records_of(wire.call(ApiKey.FETCH, 11, fetch_body("range", {0: 1})))
    assert at_end["error_code"] == 0 and bytes(at_end["records"]) == b""


def test_acks_zero_has_no_response_and_order_is_kept(wire):
    create(wire, "pipeline")
    # Pipelined: acks=0 produce, produces with acks=1, a metadata request, all at once.
    first = wire.send(ApiKey.PRODUCE, 8, produce_body("pipeline", {0: batch([b"a0"])}, acks=0))
    sent = [wire.send(ApiKey.PRODUCE, 8, produce_body("pipeline", {0: batch([b"a%d" % i])}))
            for i in range(1, 20)]
    sent.append(wire.send(ApiKey.METADATA, 1, {"topics": None}))
    received = [wire.receive(ApiKey.PRODUCE, 8)[0] for _ in range(19)]
    received.append(wire.receive(ApiKey.METADATA, 1)[0])
    assert received == sent and first not in received
    fetched = records_of(wire.call(ApiKey.FETCH, 11, fetch_body("pipeline", {0: 0})))
    assert values(fetched["records"]) == [b"a%d" % i for i in range(20)]


def test_long_poll_is_woken_by_an_append(broker, wire):
    create(wire, "longpoll")
    # max_wait far beyond the socket timeout: only an append can answer in time.
    wire.sock.settimeout(30)
    wire.send(ApiKey.FETCH, 11, fetch_body("longpoll", {0: 0}, max_wait_ms=600000))
    with WireClient(broker.bootstrap) as producer:
        # Other connections are served while this Fetch waits.
        producer.call(ApiKey.METADATA, 1, {"topics": None})
        producer.call(ApiKey.PRODUCE, 8, produce_body("longpoll", {0: batch([b"wake"])}))
    _, fetched = wire.receive(ApiKey.FETCH, 11)
    assert values(records_of(fetched)["records"]) == [b"wake"]


def test_fetch_min_bytes_returns_after_max_wait_with_what_there_is(wire):
    create(wire, "minbytes")
    wire.call(ApiKey.PRODUCE, 8, produce_body("minbytes", {0: batch([b"small"])}))
    fetched = wire.call(ApiKey.FETCH, 11, fetch_body("minbytes", {0: 0}, max_wait_ms=200,
                                                     min_bytes=10 << 20))
    assert values(records_of(fetched)["records"]) == [b"small"]


def test_fetch_returns_first_batch_whole_and_respects_max_bytes(wire):
    create(wire, "sizes")
    for i in range(5):
        wire.call(ApiKey.PRODUCE, 8, produce_body("sizes", {0: batch([b"%d" % i * 2000])}))
    one = records_of(wire.call(ApiKey.FETCH, 11, fetch_body("sizes", {0: 0},
                                                            partition_max_bytes=10)))
    assert len(values(one["records"])) == 1
    some = records_of(wire.call(ApiKey.FETCH, 11, fetch_body("sizes", {0: 0},
                                                             partition_max_bytes=4500)))
    assert 1 <= len(values(some["records"])) <= 2


def test_list_offsets_latest_earliest_and_timestamps(wire):
    create(wire, "times")
    base = 1_700_000_000_000
    for i in range(4):
        wire.call(ApiKey.PRODUCE, 8, produce_body("times", {0: batch([b"t%d" % i],
                                                                     timestamp=base + i * 1000)}))

    def lookup(ts, version=5):
        body = {"replica_id": -1, "isolation_level": 0, "topics": [
            {"name": "times", "partitions": [{"partition_index": 0, "timestamp": ts,
                                              "current_leader_epoch": -1}]}]}
        return wire.call(ApiKey.LIST_OFFSETS, version, body)["topics"][0]["partitions"][0]

    assert lookup(-1)["offset"] == 4
    assert lookup(-2)["offset"] == 0
    assert lookup(base + 1500)["offset"] == 2 and lookup(base + 1500)["timestamp"] == base + 2000
    assert lookup(base)["offset"] == 0
    assert lookup(base + 10_000)["offset"] == -1
    assert lookup(-1, version=1)["offset"] == 4
    # A partition named twice: neither answer could say which timestamp it is for.
    twice = wire.call(ApiKey.LIST_OFFSETS, 5, {"replica_id": -1, "isolation_level": 0, "topics": [
        {"name": "times", "partitions": [
            {"partition_index": 0, "timestamp": ts, "current_leader_epoch": -1}
            for ts in (base, base + 3000)]},
        {"name": "nope", "partitions": [
            {"partition_index": 0, "timestamp": -1, "current_leader_epoch": -1}]}]})
    assert [[p["error_code"] for p in t["partitions"]] for t in twice["topics"]] == [
        [INVALID_REQUEST, INVALID_REQUEST], [UNKNOWN_TOPIC]]


def test_create_and_delete_topics(wire):
    create(wire, "admin-a", partitions=3, configs={"retention.ms": "3600000"})
    again = wire.call(ApiKey.CREATE_TOPICS, 4, create_body("admin-a", 3))
    assert again["topics"][0]["error_code"] == TOPIC_EXISTS
    bad = wire.call(ApiKey.CREATE_TOPICS, 4, create_body("admin-b", 1, {"retention.ms": "x"}))
    assert bad["topics"][0]["error_code"] == INVALID_CONFIG
    bad = wire.call(ApiKey.CREATE_TOPICS, 4, create_body("bad name", 1))
    assert bad["topics"][0]["error_code"] == INVALID_TOPIC
    meta = wire.call(ApiKey.METADATA, 8, {"topics": [{"name": "admin-a"}],
                                          "allow_auto_topic_creation": False})
    assert len(meta["topics"][0]["partitions"]) == 3
    wire.call(ApiKey.PRODUCE, 8, produce_body("admin-a", {0: batch([b"x"])}))
    deleted = wire.call(ApiKey.DELETE_TOPICS, 3, {"topic_names": ["admin-a", "nope"],
                                                  "timeout_ms": 1000})
    codes = {r["name"]: r["error_code"] for r in deleted["responses"]}
    assert codes == {"admin-a": 0, "nope": UNKNOWN_TOPIC}
    meta = wire.call(ApiKey.METADATA, 8, {"topics": [{"name": "admin-a"}],
                                          "allow_auto_topic_creation": False})
    assert meta["topics"][0]["error_code"] == UNKNOWN_TOPIC


def partition_dirs(broker, topic):
    return sorted(d.name for d in broker.log_dir.iterdir() if d.name.startswith(f"{topic}-"))


def test_created_partitions_have_their_logs_before_the_answer(broker, wire):
    # As in Kafka, a new topic's logs exist once CreateTopics (and CreatePartitions)
    # answer: the first produce to each partition does not create them.
    create(wire, "eager", partitions=3)
    assert partition_dirs(broker, "eager") == ["eager-0", "eager-1", "eager-2"]
    grown = wire.call(ApiKey.CREATE_PARTITIONS, 1, {
        "topics": [{"name": "eager", "count": 5, "assignments": None}],
        "timeout_ms": 5000, "validate_only": False})
    assert grown["results"][0]["error_code"] == 0, grown
    assert partition_dirs(broker, "eager") == [f"eager-{p}" for p in range(5)]
    assert (broker.log_dir / "eager-4" / "00000000000000000000.log").exists()
    wire.call(ApiKey.DELETE_TOPICS, 3, {"topic_names": ["eager"], "timeout_ms": 1000})
    assert partition_dirs(broker, "eager") == []


def test_topics_deleted_while_they_are_created_and_written_leave_no_logs(broker, wire):
    # CreateTopics (which creates the logs), DeleteTopics and produces to the same names
    # race on three connections; once the topics are gone, so are all their logs.
    names = [f"churn-{i}" for i in range(4)]
    stop = threading.Event()
    done = {"create": 0, "delete": 0, "produce": 0}
    errors = []

    def churn(api):
        try:
            with WireClient(broker.bootstrap) as client:
                while not stop.is_set():
                    for name in names:
                        done[api] += churn_once(client, api, name).count(0)
        except Exception as error:
            errors.append(error)

    def churn_once(client, api, name) -> list[int]:
        """One request; its error codes."""
        if api == "create":
            body = client.call(ApiKey.CREATE_TOPICS, 4, create_body(name, 8))
            return [body["topics"][0]["error_code"]]
        if api == "delete":
            body = client.call(ApiKey.DELETE_TOPICS, 3, {"topic_names": [name],
                                                         "timeout_ms": 1000})
            return [body["responses"][0]["error_code"]]
        body = client.call(ApiKey.PRODUCE, 8, produce_body(
            name, {p: batch([b"x"]) for p in range(8)}))
        return [p["error_code"] for p in body["responses"][0]["partition_responses"]]

    threads = [threading.Thread(target=churn, args=(api,))
               for api in ("create", "delete", "produce")]
    for thread in threads:
        thread.start()
    threading.Event().wait(3)
    stop.set()
    for thread in threads:
        thread.join()
    assert errors == []
    assert min(done.values()) > 0, done  # each side had its way some of the time
    wire.call(ApiKey.DELETE_TOPICS, 3, {"topic_names": names, "timeout_ms": 1000})
    assert [d for name in names for d in partition_dirs(broker, name)] == []


def test_a_standalone_broker_coordinates_every_group_and_transaction(broker, wire):
    for key_type in (0, 1):  # a group, a transactional id
        body = wire.call(ApiKey.FIND_COORDINATOR, 2, {"key": "g", "key_type": key_type})
        assert body["error_code"] == 0
        assert (body["host"], body["port"]) == (broker.host, broker.port)
    body = wire.call(ApiKey.FIND_COORDINATOR, 2, {"key": "s", "key_type": 2})
    assert body["error_code"] == 15 and body["node_id"] == -1


def test_init_producer_id_hands_out_distinct_ids(wire):
    first = wire.call(ApiKey.INIT_PRODUCER_ID, 1, {"transactional_id": None,
                                                   "transaction_timeout_ms": 1000})
    second = wire.call(ApiKey.INIT_PRODUCER_ID, 1, {"transactional_id": None,
                                                    "transaction_timeout_ms": 1000})
    assert first["error_code"] == 0 and first["producer_id"] != second["producer_id"]


def test_concurrent_producers_lose_nothing(broker, wire):
    create(wire, "concurrent")

    def produce(worker):
        with WireClient(broker.bootstrap) as client:
            for i in range(50):
                client.call(ApiKey.PRODUCE, 8, produce_body(
                    "concurrent", {0: batch([b"%d-%d" % (worker, i)])}))

    threads = [threading.Thread(target=produce, args=(w,)) for w in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    got = values(records_of(wire.call(ApiKey.FETCH, 11, fetch_body("concurrent", {0: 0})))
                 ["records"])
    assert sorted(got) == sorted(b"%d-%d" % (w, i) for w in range(4) for i in range(50))
    for w in range(4):  # in order per producer
        mine = [v for v in got if v.startswith(b"%d-" % w)]
        assert mine == [b"%d-%d" % (w, i) for i in range(50)]
