"""The broker's network layer: one acceptor thread per listener and N processor threads.

Each listener's acceptor accepts connections and hands them round-robin to the shared
processors, with the listener (name, security protocol, TLS context) they came in on;
each connection's ``Session`` carries it. Each processor owns its connections and an
``epoll`` loop: it reads size-prefixed frames, dispatches each request, and writes
the responses in request order. A Fetch response goes out as its header bytes followed
by ``os.sendfile`` from the segment file. A connection with a parked Fetch (long poll) reads nothing more until that
Fetch is answered, which keeps responses in order and input bounded; other
connections are unaffected. A frame larger than ``socket.request.max.bytes``, an
unknown API or a malformed request closes that connection only, with one log line.
Buffered request bytes of all connections share one ``RequestBudget``
(``queued.max.request.bytes``): while it is used up, connections read no new frames.

Processors sleep in ``epoll``; appends wake them through a socketpair, and the
nearest parked-Fetch deadline bounds the sleep. Nothing polls. Each parked request
registers its own wake-up with its partitions, so an append retries only the requests
waiting on that partition, and deadlines sit in a heap: a thousand idle long polls cost
nothing per append to other partitions. One wake-up byte is pending at most.

TLS listeners wrap accepted sockets non-blocking; the processor drives the handshake
from its loop (OpenSSL's want-read/want-write become the connection's interest), so a
slow or stalled handshake holds up no other connection, and a failed one closes its
connection with one line naming the peer and OpenSSL's reason. An SSL socket may hold
decrypted bytes ``epoll`` cannot see (``pending()``): such connections are read again
without waiting. File regions cannot be ``sendfile``d through TLS: they go out as
``os.pread`` chunks of ``TLS_FILE_CHUNK`` bytes, one chunk in memory per connection.
"""

from __future__ import annotations

import collections
import functools
import heapq
import itertools
import logging
import os
import select
import socket
import ssl
import struct
import threading
import time
from dataclasses import dataclass
from typing import Callable

from pylog.broker.budget import RequestBudget, frame_charge
from pylog.broker.dispatch import CloseConnection, Dispatcher, Parked, Reply
from pylog.broker.session import Session
from pylog.protocol import ApiKey
from pylog.security.tls import failure_reason, peer_principal

log = logging.getLogger(__name__)

_SIZE = struct.Struct(">i")
_API_KEY = struct.Struct(">h")
RECV_CHUNK = 256 * 1024
# A frame at least this large is read into a buffer of its own once its size is known:
# one copy from the kernel, none through the connection's buffer. The buffer starts at
# FRAME_BUFFER_START (or the frame's size, if smaller) and doubles as the bytes arrive.
LARGE_FRAME = 64 * 1024
FRAME_BUFFER_START = 2 * 1024 * 1024
MAX_PRODUCE_RUN = 512  # Produce frames of one connection handled together at most
_PRODUCE = int(ApiKey.PRODUCE)
# Stop reading from a client whose responses pile up beyond this (it reads too slowly).
MAX_QUEUED_RESPONSE_BYTES = 16 * 1024 * 1024
# Merge small responses into writes of up to this size (pipelined clients).
COALESCE_BYTES = 256 * 1024
# Bytes of a segment file read at a time to go out through TLS (no sendfile there).
TLS_FILE_CHUNK = 256 * 1024
_BYTES = (bytes, bytearray, memoryview)
_MSG_MORE = getattr(socket, "MSG_MORE", 0)
# Interest and readiness, as epoll has them (an error or hangup counts as both: the read
# or write that follows finds out what happened).
READ = select.EPOLLIN
WRITE = select.EPOLLOUT
_NOT_READ = ~READ
_NOT_WRITE = ~WRITE
MAX_GATHERED_CHUNKS = 512  # byte chunks sent with one sendmsg at most (IOV_MAX is 1024)


@dataclass(frozen=True)
class ListenerSpec:
    """What a listener's connections start with: its name, security protocol and, for
    SSL and SASL_SSL, the TLS context that wraps them."""

    name: str = "PLAINTEXT"
    security_protocol: str = "PLAINTEXT"
    tls: ssl.SSLContext | None = None


PLAINTEXT = ListenerSpec()


class _PeerClosed(Exception):
    """The client closed its end: not an error worth a log line."""


class Connection:
    """One client connection, owned by one processor thread."""

    def __init__(self, sock: socket.socket, address: str, budget: RequestBudget,
                 listener: ListenerSpec = PLAINTEXT) -> None:
        self.sock = sock
        self.address = address
        self.listener = listener
        self.session = Session(address, listener.name, listener.security_protocol,
                               authenticated=not listener.security_protocol.startswith("SASL_"))
        self.tls = isinstance(sock, ssl.SSLSocket)
        self.handshaking = self.tls
        self.handshake_events = READ  # what OpenSSL waits for
        self.file_chunk: memoryview | None = None  # read from a region, not yet sent
        self.budget = budget
        self.inbound = bytearray()
        # A large frame read straight into a buffer of its own (4-byte size prefix
        # included), with no copy through ``inbound``; ``frame_filled`` bytes so far.
        self.frame: bytearray | None = None
        self.frame_filled = 0
        self.frame_size = 0  # the whole frame's: ``frame`` grows to it as bytes arrive
        self.charge = 0  # bytes of ``budget`` this connection holds
        self.missing = 0  # bytes still to come of a frame already charged
        self.outbound: collections.deque = collections.deque()  # bytes/memoryview/regions
        self.head_sent = 0  # bytes of outbound[0] already sent
        self.queued_bytes = 0
        self.parked: Parked | None = None
        self.wake: Callable[[], None] | None = None  # wakes the processor for this one
        self.parked_since = 0.0  # when the parked request arrived (for its latency)
        self.events = 0
        self.closing = False  # close once the queued answers are out (failed SASL)
        self.last_active = 0.0  # clock seconds of the last read or write
        self.on_close: Callable[[], None] | None = None  # the acceptor's count, given back

    def queue(self, reply: Reply) -> None:
        """Queue a response; consecutive byte chunks are merged so one send covers many."""
        out = self.outbound
        for chunk in reply.chunks:
            if not isinstance(chunk, bytes):
                out.append(chunk)
            elif out and type(out[-1]) is bytearray and len(out[-1]) < COALESCE_BYTES:
                out[-1] += chunk
            else:
                out.append(bytearray(chunk))
        self.queued_bytes += reply.size

    def wants_read(self) -> bool:
        return (self.parked is None and not self.closing
                and self.queued_bytes < MAX_QUEUED_RESPONSE_BYTES
                and (self.missing > 0 or not self.budget.exhausted))

    def recharge(self, max_frame: int) -> None:
        """Charge the budget for what the input buffer now holds."""
        if self.frame is not None:  # the whole frame, charged since its size arrived
            charge, self.missing = self.frame_size, self.frame_size - self.frame_filled
            self.budget.adjust(charge - self.charge)
            self.charge = charge
            return
        if not self.inbound:  # the usual case: every frame read was handled
            self.missing = 0
            if self.charge:
                self.budget.adjust(-self.charge)
                self.charge = 0
            return
        charge, self.missing = frame_charge(self.inbound, max_frame)
        self.budget.adjust(charge - self.charge)
        self.charge = charge

    def release(self) -> None:
        """Close the socket and every file region still queued."""
        for chunk in self.outbound:
            if hasattr(chunk, "close"):
                chunk.close()
        self.outbound.clear()
        self.file_chunk = None
        self.parked = None  # an unfinished Fetch attempt holds no open regions
        self.inbound.clear()
        self.frame = None
        self.budget.adjust(-self.charge)
        self.charge = self.missing = 0
        try:
            self.sock.close()
        except OSError:
            pass
        on_close, self.on_close = self.on_close, None
        if on_close is not None:
            on_close()


def _tls_hint(inbound: bytearray, position: int, conn: Connection) -> str:
    """A TLS record header where a frame size should be: say so in the log line."""
    if not conn.tls and inbound[position:position + 2] == b"\x16\x03":
        return f"; it looks like a TLS handshake, but listener {conn.listener.name} is " \
               f"{conn.listener.security_protocol}"
    return ""


class Processor(threading.Thread):
    """Reads, handles and writes for its share of the connections."""

    def __init__(self, index: int, dispatcher: Dispatcher, max_request_bytes: int,
                 add_waiter: Callable, remove_waiter: Callable,
                 clock: Callable[[], float] = time.monotonic,
                 budget: RequestBudget | None = None, max_idle_ms: int | None = None) -> None:
        super().__init__(name=f"pylog-processor-{index}", daemon=True)
        # connections.max.idle.ms: a connection with no traffic for this long (a stalled
        # TLS handshake, a client that went away silently) is closed; -1/None: never.
        self.max_idle_s = max_idle_ms / 1000 if max_idle_ms and max_idle_ms > 0 else None
        self._next_idle_check = 0.0
        self.dispatcher = dispatcher
        self.max_request_bytes = max_request_bytes
        self.budget = budget or RequestBudget(1 << 62)
        self.budget.on_freed(self._budget_freed)
        self._recheck_reads = False
        self.clock = clock
        self._add_waiter = add_waiter
        self._remove_waiter = remove_waiter
        self._epoll = select.epoll()
        self._wake_r, self._wake_w = socket.socketpair()
        self._wake_r.setblocking(False)
        self._wake_w.setblocking(False)
        self._epoll.register(self._wake_r.fileno(), READ)
        # Registered descriptor -> its connection (None: the wake-up socket).
        self._by_fd: dict[int, Connection | None] = {self._wake_r.fileno(): None}
        self._new: collections.deque = collections.deque()
        self._connections: set[Connection] = set()
        self._parked: set[Connection] = set()
        # Parked connections woken by a change to one of their partitions (any thread).
        self._woken: set[Connection] = set()
        self._deadlines: list = []  # heap of (deadline, sequence, conn, parked)
        self._sequence = itertools.count()
        self._wake_pending = False  # a wake-up byte is in the socketpair
        self._tls_pending: set[Connection] = set()  # decrypted bytes select cannot see
        self._stopping = False

    # -- called from other threads --------------------------------------------------------

    def add(self, sock: socket.socket, address: str, listener: ListenerSpec = PLAINTEXT,
            on_close: Callable[[], None] | None = None) -> None:
        """Serve ``sock``; ``on_close()`` runs once when it is closed."""
        self._new.append((sock, address, listener, on_close))
        self.wakeup()

    def wakeup(self) -> None:
        if self._wake_pending:
            return  # the loop wakes anyway, and then sees what this caller changed
        self._wake_pending = True
        try:
            self._wake_w.send(b"\0")
        except (BlockingIOError, OSError):
            pass  # already pending, or shutting down

    def _wake_parked(self, conn: Connection, tp=None) -> None:
        """A change to partition ``tp``, which ``conn``'s parked request waits on (a parked
        Fetch then reads only the partitions that changed)."""
        parked = conn.parked
        changed = getattr(parked.work, "changed", None) if parked is not None else None
        if changed is not None and tp is not None:
            changed.add(tp)
        self._woken.add(conn)
        self.wakeup()

    def stop(self) -> None:
        self._stopping = True
        self.wakeup()

    def _budget_freed(self) -> None:
        self._recheck_reads = True
        self.wakeup()

    # -- the loop -------------------------------------------------------------------------

    def run(self) -> None:
        try:
            by_fd = self._by_fd
            while not self._stopping:
                for fd, mask in self._epoll.poll(self._timeout()):
                    conn = by_fd.get(fd)
                    if conn is not None:
                        self._on_event(conn, mask)
                    elif fd == self._wake_r.fileno():
                        self._drain_wakeups()
                # Each step below is skipped when it has nothing to do: a lone request
                # per wake-up is common, and a thread that slept runs cold.
                if self._new:
                    self._accept_new()
                if self._parked or self._woken:
                    self._retry_parked()
                if self._tls_pending:
                    self._read_tls_pending()
                if self.max_idle_s is not None:
                    self._close_idle()
                if self._recheck_reads:
                    self._recheck_reads = False
                    for conn in list(self._connections):
                        self._update_interest(conn)
        finally:
            for conn in list(self._connections):
                self._close(conn, None)
            self._epoll.close()
            self._wake_r.close()
            self._wake_w.close()

    def _timeout(self) -> float | None:
        """Seconds to sleep at most (None: until an event)."""
        if self._new or self._woken or (
                self._tls_pending and any(conn.wants_read() for conn in self._tls_pending)):
            return 0
        heap = self._deadlines
        while heap and heap[0][2].parked is not heap[0][3]:
            heapq.heappop(heap)  # answered or closed since
        if heap:
            deadline = heap[0][0]
            if self.max_idle_s is not None and self._connections:
                deadline = min(deadline, self._next_idle_check)
        elif self.max_idle_s is not None and self._connections:
            deadline = self._next_idle_check
        else:
            return None
        return max(0.0, deadline - self.clock())

    def _close_idle(self) -> None:
        """Close connections silent for ``connections.max.idle.ms`` (checked about ten
        times per period; a connection with a parked request is waiting, not idle)."""
        if self.max_idle_s is None:
            return
        now = self.clock()
        if now < self._next_idle_check:
            return
        self._next_idle_check = now + min(max(self.max_idle_s / 10, 0.05), 30.0)
        for conn in [c for c in self._connections
                     if c.parked is None and now - c.last_active > self.max_idle_s]:
            log.info("connection from %s on listener %s closed: idle for more than %d ms "
                     "(connections.max.idle.ms)%s", conn.address, conn.listener.name,
                     self.max_idle_s * 1000, " during the TLS handshake"
                     if conn.handshaking else "")
            self._close(conn, None)

    def _drain_wakeups(self) -> None:
        try:
            while self._wake_r.recv(4096):
                pass
        except BlockingIOError:
            pass
        # Cleared after reading: a wake-up sent meanwhile leaves its byte, never a flag
        # set with no byte behind it.
        self._wake_pending = False

    def _accept_new(self) -> None:
        while self._new:
            sock, address, listener, on_close = self._new.popleft()
            sock.setblocking(False)
            if listener.tls is not None:
                try:
                    sock = listener.tls.wrap_socket(sock, server_side=True,
                                                    do_handshake_on_connect=False)
                except (ssl.SSLError, OSError) as error:
                    log.warning("connection from %s on listener %s closed: cannot start "
                                "TLS: %s", address, listener.name, failure_reason(error))
                    sock.close()
                    if on_close is not None:
                        on_close()
                    continue
            conn = Connection(sock, address, self.budget, listener)
            conn.on_close = on_close
            conn.wake = functools.partial(self._wake_parked, conn)
            conn.last_active = self.clock()
            self._connections.add(conn)
            self._update_interest(conn)

    def _handshake(self, conn: Connection) -> bool:
        """Advance the TLS handshake without blocking; True once it is done."""
        try:
            conn.sock.do_handshake()
        except ssl.SSLWantReadError:
            conn.handshake_events = READ
            return False
        except ssl.SSLWantWriteError:
            conn.handshake_events = WRITE
            return False
        except (ssl.SSLError, ssl.CertificateError) as error:
            raise CloseConnection(f"TLS handshake on listener {conn.listener.name} failed: "
                                  f"{failure_reason(error)}") from None
        conn.handshaking = False
        principal = peer_principal(conn.sock)
        if principal is not None:
            conn.session.principal = principal
        log.debug("connection from %s: TLS %s as %s", conn.address, conn.sock.version(),
                  conn.session.principal)
        return True

    def _read_tls_pending(self) -> None:
        """Read connections whose SSL socket holds decrypted bytes (select cannot see
        them) once they may read again."""
        for conn in [c for c in self._tls_pending if c.wants_read()]:
            self._tls_pending.discard(conn)
            self._on_event(conn, READ)

    def _on_event(self, conn: Connection, mask: int) -> None:
        conn.last_active = self.clock()
        try:
            if conn.handshaking:
                if not self._handshake(conn):
                    self._update_interest(conn)
                    return
                mask = READ  # the first request may have come with it
            if mask & _NOT_READ:
                self._write(conn)
            if mask & _NOT_WRITE and conn.wants_read():
                self._read(conn)
                self._process(conn)
            if conn.closing and not conn.outbound:
                self._close(conn, None)  # the refusal was answered and logged
                return
            self._update_interest(conn)
        except _PeerClosed:
            self._close(conn, None)
        except CloseConnection as reason:
            self._close(conn, str(reason))
        except BlockingIOError:
            self._update_interest(conn)
        except ConnectionResetError:
            # Clients commonly reset instead of closing: routine, not a warning.
            log.info("connection from %s reset by the client", conn.address)
            self._close(conn, None)
        except ssl.SSLError as error:
            self._close(conn, f"TLS error on listener {conn.listener.name}: "
                              f"{failure_reason(error)}")
        except OSError as error:
            self._close(conn, f"{type(error).__name__}: {error.strerror or error}")
        except Exception:
            log.exception("connection from %s: unexpected error; closing it", conn.address)
            self._close(conn, None)

    def _read(self, conn: Connection) -> None:
        frame = conn.frame
        if frame is not None:  # the rest of a large frame (charged), into its own buffer
            if conn.frame_filled == conn.frame_size:
                return  # complete: handled by the _process that follows
            if conn.frame_filled == len(frame):
                frame += bytes(min(len(frame), conn.frame_size - len(frame)))
            try:
                with memoryview(frame) as view:
                    received = conn.sock.recv_into(view[conn.frame_filled:])
            except (ssl.SSLWantReadError, ssl.SSLWantWriteError):
                return
            except ssl.SSLZeroReturnError:
                raise _PeerClosed from None
            if not received:
                raise _PeerClosed
            conn.frame_filled += received
            return
        # With the budget used up, read only the rest of the frame already charged.
        limit = min(RECV_CHUNK, conn.missing) if self.budget.exhausted else RECV_CHUNK
        if limit == 0:
            return  # used up by another thread since wants_read()
        try:
            chunk = conn.sock.recv(limit)
        except (ssl.SSLWantReadError, ssl.SSLWantWriteError):
            return  # only part of a TLS record so far
        except ssl.SSLZeroReturnError:
            raise _PeerClosed from None
        if not chunk:
            raise _PeerClosed
        conn.inbound += chunk  # charged by the _process that always follows

    def _process(self, conn: Connection) -> None:
        """Handle every complete frame in the buffer, until a Fetch parks; then write."""
        inbound = conn.inbound
        position = 0
        try:
            frame = conn.frame
            if frame is not None:
                if conn.frame_filled < conn.frame_size:
                    return
                conn.frame = None
                self._handle(conn, memoryview(frame)[4:])
            while conn.parked is None and not conn.closing and len(inbound) - position >= 4:
                size = _SIZE.unpack_from(inbound, position)[0]
                if size < 0 or size > self.max_request_bytes:
                    raise CloseConnection(f"request size {size} is outside 0.."
                                          f"{self.max_request_bytes} (socket.request.max.bytes)"
                                          f"{_tls_hint(inbound, position, conn)}")
                if len(inbound) - position - 4 < size:
                    if size >= LARGE_FRAME:
                        # The rest goes straight into a buffer of its own, which grows
                        # (doubling) to the frame's size only as bytes arrive: a client
                        # that announces a large frame and stops holds little memory.
                        held = len(inbound) - position
                        frame = conn.frame = bytearray(
                            min(4 + size, max(FRAME_BUFFER_START, 2 * held)))
                        frame[:held] = inbound[position:]
                        conn.frame_filled, conn.frame_size = held, 4 + size
                        position = len(inbound)
                    break
                if position == 0 and len(inbound) == 4 + size:
                    # The buffer holds exactly this frame (the usual case for a large
                    # one): the request gets the buffer itself, the connection a new one.
                    payload = memoryview(inbound)[4:]
                    conn.inbound = inbound = bytearray()
                elif size >= 2 and _API_KEY.unpack_from(inbound, position + 4)[0] == _PRODUCE:
                    taken = self._produce_run(conn, inbound, position)
                    if taken:
                        position = taken
                        continue
                    payload = inbound[position + 4:position + 4 + size]
                    position += 4 + size
                else:
                    payload = inbound[position + 4:position + 4 + size]  # one copy
                    position += 4 + size
                self._handle(conn, payload)
        except CloseConnection:
            # The requests before the one that closes the connection were handled: send
            # their answers, as far as the socket takes them now, before it closes.
            try:
                self._write(conn)
            except (OSError, CloseConnection):
                pass
            raise
        finally:
            # One shift of the buffer per batch of frames, not one per frame.
            if position:
                del inbound[:position]
            conn.recharge(self.max_request_bytes)
        self._write(conn)

    def _handle(self, conn: Connection, payload) -> None:
        """Dispatch one request; queue its answer, or park the connection."""
        metrics = self.dispatcher.metrics
        if metrics is None:
            outcome = self.dispatcher.dispatch(payload, conn.session)
        else:
            outcome = self._measured_dispatch(metrics, payload, conn)
        if type(outcome) is Reply:
            conn.queue(outcome)
            conn.closing = outcome.close_after
        elif outcome is not None:
            self._park(conn, outcome)

    def _produce_run(self, conn: Connection, inbound: bytearray, position: int) -> int:
        """Group commit: when a Produce frame at ``position`` is followed by more complete
        Produce frames (a client pipelining), handle them together (one write per
        partition). Returns the position after the frames handled, or 0 if the frame at
        ``position`` is to be dispatched alone."""
        bounds = []
        end = len(inbound)
        while len(bounds) < MAX_PRODUCE_RUN and end - position >= 6:
            size = _SIZE.unpack_from(inbound, position)[0]
            if (size < 2 or size > self.max_request_bytes or end - position - 4 < size
                    or _API_KEY.unpack_from(inbound, position + 4)[0] != _PRODUCE):
                break
            bounds.append((position + 4, position + 4 + size))
            position += 4 + size
        if len(bounds) < 2:
            return 0
        metrics = self.dispatcher.metrics
        started = self.clock() if metrics is not None else 0.0
        try:
            outcomes = self.dispatcher.dispatch_produce_run(
                [inbound[start:stop] for start, stop in bounds], conn.session)
        except CloseConnection:
            if metrics is not None:
                metrics.request_closed(_PRODUCE)
            raise
        if metrics is not None and outcomes:
            each = (self.clock() - started) / len(outcomes)
            for outcome in outcomes:
                if not isinstance(outcome, Parked):
                    metrics.request_done(_PRODUCE, each)
                else:
                    conn.parked_since = started
        for outcome in outcomes:
            if type(outcome) is Reply:
                conn.queue(outcome)
            elif outcome is not None:
                self._park(conn, outcome)  # only the last can park
        return bounds[len(outcomes) - 1][1] if outcomes else 0

    def _measured_dispatch(self, metrics, payload, conn: Connection):
        """Dispatch, counting the request and (unless it parks) its latency."""
        started = self.clock()
        api_key = _API_KEY.unpack_from(payload)[0] if len(payload) >= 2 else -1
        try:
            outcome = self.dispatcher.dispatch(payload, conn.session)
        except CloseConnection:
            metrics.request_closed(api_key)
            raise
        if isinstance(outcome, Parked):
            conn.parked_since = started
        else:
            metrics.request_done(api_key, self.clock() - started)
        return outcome

    def _park(self, conn: Connection, parked) -> None:
        conn.parked = parked
        self._parked.add(conn)
        heapq.heappush(self._deadlines, (parked.deadline, next(self._sequence), conn, parked))
        self._add_waiter(parked.partitions, conn.wake)
        # An append between the first attempt and the line above woke nobody: attempt
        # once more in this loop iteration so it is not missed.
        self._woken.add(conn)

    def _retry_parked(self) -> None:
        """Attempt the parked requests that were woken or whose deadline passed."""
        woken = self._woken
        if not self._parked:
            woken.clear()
            return
        now = self.clock()
        candidates = []
        while woken:
            candidates.append(woken.pop())  # set.pop: safe while other threads add
        heap = self._deadlines
        while heap and (heap[0][0] <= now or heap[0][2].parked is not heap[0][3]):
            _, _, conn, parked = heapq.heappop(heap)
            if conn.parked is parked:
                candidates.append(conn)
        for conn in dict.fromkeys(candidates):
            parked = conn.parked
            if parked is None:
                continue  # answered already or closed
            final = parked.deadline <= now
            try:
                reply = parked.attempt(final)
                if reply is None:
                    if final:  # not answered at its deadline: attempted again soon
                        heapq.heappush(heap, (now, next(self._sequence), conn, parked))
                    continue
                self._unpark(conn)
                conn.last_active = now
                if parked.metrics is not None:
                    parked.metrics.request_done(parked.api_key, now - conn.parked_since)
                conn.queue(reply)
                self._write(conn)
                self._process(conn)  # requests that arrived behind the Fetch
                self._update_interest(conn)
            except CloseConnection as reason:
                self._close(conn, str(reason))
            except ssl.SSLError as error:
                self._close(conn, f"TLS error on listener {conn.listener.name}: "
                                  f"{failure_reason(error)}")
            except OSError as error:
                self._close(conn, f"{type(error).__name__}: {error}")
            except Exception:
                log.exception("connection from %s: unexpected error; closing it", conn.address)
                self._close(conn, None)

    def counts(self) -> tuple[dict[str, int], int]:
        """Open connections by listener name, and parked requests (read by the metrics
        from another thread: a snapshot, not exact)."""
        by_listener: dict[str, int] = {}
        for conn in list(self._connections):
            by_listener[conn.listener.name] = by_listener.get(conn.listener.name, 0) + 1
        return by_listener, len(self._parked)

    def _unpark(self, conn: Connection) -> None:
        parked = conn.parked
        conn.parked = None
        self._parked.discard(conn)
        if parked is not None:
            self._remove_waiter(parked.partitions, conn.wake)

    def _write(self, conn: Connection) -> None:
        """Send as much as the socket takes without blocking."""
        out = conn.outbound
        fd = conn.sock.fileno()
        try:
            while out:
                chunk = out[0]
                if (len(out) > 1 and not conn.tls and conn.head_sent == 0
                        and isinstance(chunk, _BYTES) and isinstance(out[1], _BYTES)):
                    if not self._send_answers(conn):
                        return
                    continue
                if isinstance(chunk, _BYTES):
                    # After a TLS want-write, OpenSSL needs the same bytes again: they are.
                    # Bytes followed by a file region (a Fetch response's header) go out
                    # with MSG_MORE: the kernel sends them in the region's first packet.
                    more = _MSG_MORE if len(out) > 1 and not conn.tls else 0
                    sent = conn.sock.send(memoryview(chunk)[conn.head_sent:], more)
                    total = len(chunk)
                elif conn.tls:
                    sent = self._send_region_tls(conn, chunk)
                    total = chunk.length
                else:
                    sent = os.sendfile(fd, chunk.fd, chunk.position + conn.head_sent,
                                       chunk.length - conn.head_sent)
                    if sent == 0:
                        raise CloseConnection("segment file ended before the response did")
                    total = chunk.length
                conn.head_sent += sent
                conn.queued_bytes -= sent
                if conn.head_sent < total:
                    return
                out.popleft()
                conn.head_sent = 0
                if not isinstance(chunk, _BYTES):
                    chunk.close()
        except (BlockingIOError, ssl.SSLWantWriteError, ssl.SSLWantReadError):
            return

    def _send_answers(self, conn: Connection) -> bool:
        """Send the byte chunks at the head of the queue (several answers, a client having
        pipelined its requests) with one ``sendmsg``; False if the socket took only part."""
        out = conn.outbound
        chunks = list(itertools.takewhile(lambda chunk: isinstance(chunk, _BYTES),
                                          itertools.islice(out, MAX_GATHERED_CHUNKS)))
        more = _MSG_MORE if len(out) > len(chunks) else 0
        sent = conn.sock.sendmsg(chunks, (), more)
        conn.queued_bytes -= sent
        for chunk in chunks:
            if sent < len(chunk):
                conn.head_sent = sent
                return False
            sent -= len(chunk)
            out.popleft()
        return True

    def _send_region_tls(self, conn: Connection, region) -> int:
        """Send the next bytes of a file region through TLS: one bounded chunk is read
        with ``pread`` and kept until OpenSSL has taken all of it."""
        if conn.file_chunk is None:
            want = min(TLS_FILE_CHUNK, region.length - conn.head_sent)
            data = os.pread(region.fd, want, region.position + conn.head_sent)
            if not data:
                raise CloseConnection("segment file ended before the response did")
            conn.file_chunk = memoryview(data)
        sent = conn.sock.send(conn.file_chunk)
        conn.file_chunk = conn.file_chunk[sent:] if sent < len(conn.file_chunk) else None
        return sent

    def _update_interest(self, conn: Connection) -> None:
        if conn.sock.fileno() < 0:
            return
        if conn.handshaking:
            events = conn.handshake_events
        else:
            events = (READ if conn.wants_read() else 0) | (WRITE if conn.outbound else 0)
            if conn.tls and conn.sock.pending():
                self._tls_pending.add(conn)
        if events == conn.events:
            return
        fd = conn.sock.fileno()
        if conn.events == 0:
            self._epoll.register(fd, events)
            self._by_fd[fd] = conn
        elif events == 0:
            self._epoll.unregister(fd)
            del self._by_fd[fd]
        else:
            self._epoll.modify(fd, events)
        conn.events = events

    def _close(self, conn: Connection, reason: str | None) -> None:
        if reason:
            log.warning("connection from %s closed: %s", conn.address, reason)
        self._unpark(conn)
        self._tls_pending.discard(conn)
        if conn.events:
            fd = conn.sock.fileno()
            if self._by_fd.get(fd) is conn:
                del self._by_fd[fd]
                try:
                    self._epoll.unregister(fd)
                except OSError:
                    pass
            conn.events = 0
        self._connections.discard(conn)
        conn.release()


class ConnectionQuotas:
    """``max.connections`` (every listener together) and ``max.connections.per.ip``, as
    Kafka applies them: at the broker-wide limit the acceptors stop accepting (clients
    wait in the listen backlog) until a connection closes; an address at its limit has a
    new connection closed at once. Shared by the acceptors; processors give a connection
    back when it closes."""

    def __init__(self, max_connections: int, per_ip: int,
                 overrides: dict[str, int] | None = None) -> None:
        self.max_connections = max_connections
        self.per_ip = per_ip
        self.overrides = overrides or {}
        self._cond = threading.Condition()
        self._total = 0
        self._by_ip: collections.Counter = collections.Counter()

    def reconfigure(self, max_connections: int, per_ip: int,
                    overrides: dict[str, int] | None = None) -> None:
        """New limits, from the next connection on (open ones stay, as in Kafka)."""
        with self._cond:
            self.max_connections = max_connections
            self.per_ip = per_ip
            self.overrides = overrides or {}
            self._cond.notify_all()

    def wait_for_room(self, stopping: Callable[[], bool]) -> None:
        """Block while the broker-wide limit is reached (or until ``stopping()``)."""
        with self._cond:
            while self._total >= self.max_connections and not stopping():
                self._cond.wait(0.5)

    def admit(self, ip: str) -> bool:
        """Count a new connection from ``ip``; False (not counted) if ``ip`` is at its limit."""
        with self._cond:
            if self._by_ip[ip] >= self.overrides.get(ip, self.per_ip):
                return False
            self._total += 1
            self._by_ip[ip] += 1
            return True

    def release(self, ip: str) -> None:
        with self._cond:
            self._total -= 1
            self._by_ip[ip] -= 1
            if not self._by_ip[ip]:
                del self._by_ip[ip]
            self._cond.notify_all()


class Acceptor(threading.Thread):
    """Accepts connections on one listener's socket and spreads them over processors."""

    def __init__(self, server: socket.socket, processors: list[Processor],
                 send_buffer: int, receive_buffer: int,
                 listener: ListenerSpec = PLAINTEXT,
                 quotas: ConnectionQuotas | None = None) -> None:
        super().__init__(name=f"pylog-acceptor-{listener.name}", daemon=True)
        self.server = server
        self.listener = listener
        self.processors = processors
        self.send_buffer = send_buffer
        self.receive_buffer = receive_buffer
        self.quotas = quotas
        self._stopping = False

    def run(self) -> None:
        turn = itertools.cycle(self.processors)
        quotas = self.quotas
        while not self._stopping:
            if quotas is not None:
                quotas.wait_for_room(lambda: self._stopping)
            try:
                sock, peer = self.server.accept()
            except OSError:
                if self._stopping:
                    return
                log.warning("accept failed", exc_info=True)
                time.sleep(0.1)  # e.g. out of file descriptors: back off, do not spin
                continue
            on_close = None
            if quotas is not None:
                if not quotas.admit(peer[0]):
                    log.info("connection from %s:%s on listener %s closed: %s already has "
                             "its most connections (max.connections.per.ip)", peer[0],
                             peer[1], self.listener.name, peer[0])
                    sock.close()
                    continue
                on_close = functools.partial(quotas.release, peer[0])
            self._configure(sock)
            next(turn).add(sock, f"{peer[0]}:{peer[1]}", self.listener, on_close)

    def _configure(self, sock: socket.socket) -> None:
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        if self.send_buffer > 0:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, self.send_buffer)
        if self.receive_buffer > 0:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, self.receive_buffer)

    def stop(self) -> None:
        self._stopping = True
        try:
            self.server.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        self.server.close()
