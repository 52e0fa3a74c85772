"""queued.max.request.bytes: many slow clients with big frames cannot exhaust memory."""

import contextlib
import socket
import struct
import time

from kafka import KafkaProducer

from pylog.protocol import ApiKey, encode_request
from pylog.testing.broker import broker_fixture
from tests.broker.wire import WireClient

FRAME = 3 << 20
SENT_PER_CLIENT = 5 << 19  # 2.5 MiB of each 3 MiB frame: never complete
CLIENTS = 30

budget_broker = broker_fixture(scope="module", overrides={
    "queued.max.request.bytes": 1 << 20, "socket.request.max.bytes": 4 << 20,
    "socket.receive.buffer.bytes": 65536, "num.network.threads": 2})


def rss_kb(pid: int) -> int:
    with open(f"/proc/{pid}/status") as status:
        return int(next(line.split()[1] for line in status if line.startswith("VmRSS")))


def push_until_stuck(socks: list[socket.socket], total: int) -> None:
    """Send ``total`` bytes on each socket, round robin, until done or nobody progresses."""
    sent = [0] * len(socks)
    chunk = b"\0" * 65536
    idle_rounds = 0
    while idle_rounds < 50 and min(sent) < total:
        progressed = False
        for i, sock in enumerate(socks):
            while sent[i] < total:
                try:
                    n = sock.send(chunk[:total - sent[i]])
                except BlockingIOError:
                    break
                sent[i] += n
                progressed = True
        idle_rounds = 0 if progressed else idle_rounds + 1
        time.sleep(0.02)


@contextlib.contextmanager
def announced_frames(broker, count: int, size: int, first_bytes: int = 0):
    """``count`` connections, each having sent the size prefix of a ``size``-byte frame
    and ``first_bytes`` of it; yields them and a function giving how many MB the broker's
    RSS grew since before they connected. Closes them after."""
    host, port = broker.bootstrap.rsplit(":", 1)
    with WireClient(broker.bootstrap) as warm:
        warm.call(ApiKey.API_VERSIONS, 0, {})
    before = rss_kb(broker.pid)
    socks = []
    try:
        for _ in range(count):
            sock = socket.create_connection((host, int(port)))
            sock.sendall(struct.pack(">i", size) + b"\0" * first_bytes)
            socks.append(sock)
        yield socks, lambda: (rss_kb(broker.pid) - before) / 1024
    finally:
        for sock in socks:
            sock.close()


def test_slow_big_frames_stay_within_the_budget(budget_broker):
    with announced_frames(budget_broker, CLIENTS, FRAME) as (socks, grown_mb):
        for sock in socks:
            sock.setblocking(False)
        push_until_stuck(socks, SENT_PER_CLIENT)
        # Unbounded, the broker would hold CLIENTS * 2.5 MiB = 75 MiB of partial frames.
        assert grown_mb() < 30, grown_mb()
    # The budget comes back when those clients go: ordinary clients are served again.
    with WireClient(budget_broker.bootstrap) as client:
        assert client.call(ApiKey.API_VERSIONS, 0, {})["error_code"] == 0
    producer = KafkaProducer(bootstrap_servers=budget_broker.bootstrap)
    producer.send("after-budget", b"x").get(timeout=30)
    producer.close()
    assert "Traceback" not in budget_broker.log_text()


def test_a_paused_client_resumes_when_a_charged_frame_completes(budget_broker):
    host, port = budget_broker.bootstrap.rsplit(":", 1)
    big = socket.create_connection((host, int(port)))
    try:
        # A frame bigger than the whole budget still gets through once started...
        big.sendall(struct.pack(">i", FRAME) + b"\0" * (FRAME // 2))
        with WireClient(budget_broker.bootstrap) as waiting:
            sent = waiting.send(ApiKey.API_VERSIONS, 0, {})
            # ...and when it completes (a garbage request: that connection closes),
            # the waiting client's request is read and answered.
            big.sendall(b"\0" * (FRAME - FRAME // 2))
            correlation_id, body = waiting.receive(ApiKey.API_VERSIONS, 0)
            assert correlation_id == sent and body["error_code"] == 0
    finally:
        big.close()
    frame = encode_request(ApiKey.API_VERSIONS, 0, 1, "c", {})
    with WireClient(budget_broker.bootstrap) as pipelined:
        pipelined.send_raw(frame * 50)
        for _ in range(50):
            assert pipelined.receive(ApiKey.API_VERSIONS, 0)[1]["error_code"] == 0


def test_a_large_frame_costs_memory_only_as_its_bytes_arrive(broker):
    # A frame of 64 KiB or more is read into a buffer of its own once its size
    # prefix arrives; clients that send a large size and a few bytes, then stop, must
    # not make the broker hold the sizes they announced.
    with announced_frames(broker, 10, 40 << 20, first_bytes=100_000) as (_, grown_mb):
        with WireClient(broker.bootstrap) as client:  # every frame above was read
            assert client.call(ApiKey.API_VERSIONS, 0, {})["error_code"] == 0
        time.sleep(0.5)
        assert grown_mb() < 50, grown_mb()  # 400 MB announced, 1 MB sent
