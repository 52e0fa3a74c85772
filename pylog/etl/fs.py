"""One filesystem interface for the loader: file://, hdfs:// and webhdfs:// URIs.

``file://`` goes through ``pyarrow.fs.LocalFileSystem``; ``hdfs://namenode:8020/dir``
through ``hdfs-native`` (a Rust client of the NameNode's RPC and the DataNodes' transfer
protocol: no JVM, no ``libhdfs.so``); ``webhdfs://host:port/path?user=NAME`` through the
``hdfs`` package's InsecureClient. Everything else in ``pylog.etl`` builds paths with
:meth:`Storage.join` and never joins strings with ``/`` itself.

Writes are atomic for readers: the bytes go to ``.<name>.<random>.tmp`` in the target
directory, then a rename puts them in place. Readers skip names starting with ``.`` or
``_`` (Spark and Hive do too), so a crash leaves at most an ignored temporary file.
Replacing a file is one atomic rename on a local disk and on ``hdfs://`` (the NameNode's
``rename2`` with ``OVERWRITE``). WebHDFS has no such call, so :meth:`Storage.write_atomic`
replaces by delete + rename there: readers may see the name missing for a moment (and for
good after a crash between the two), never a partial file. State that must never go
missing (committed offsets, the pending run, the table lock) is therefore never replaced
on any storage: it is written as new files with :meth:`Storage.create_exclusive` (see
:mod:`pylog.etl.state`).

Directories are never replaced in one call on HDFS (a rename onto an existing directory
is refused, and there is no ``RENAME_EXCHANGE``); the backfill and compaction swaps say
what a reader sees meanwhile (:mod:`pylog.etl.swap`, :mod:`pylog.etl.compact_swap`).
"""

from __future__ import annotations

import contextlib
import os
import posixpath
import socket
import tempfile
import uuid
from abc import ABC, abstractmethod
from typing import Iterator
from urllib.parse import parse_qs, urlparse

import pyarrow.fs as pafs

from pylog.errors import ConfigError, PylogError


class StorageError(PylogError, OSError):
    """The filesystem refused an operation (unreachable, permission, ...): one line saying why."""


class Storage(ABC):
    """A directory tree named by a URI; paths are absolute strings in that filesystem."""

    def __init__(self, uri: str, root: str) -> None:
        self.uri = uri
        self.root = root

    @staticmethod
    def from_uri(uri: str) -> "Storage":
        """The storage for ``file:///dir``, ``hdfs://namenode:8020/dir`` or ``webhdfs://host:9870/dir``.

        Raises ConfigError when the scheme is not supported.
        """
        parsed = urlparse(uri)
        if parsed.scheme == "webhdfs":
            return WebHdfsStorage(uri)
        if parsed.scheme == "hdfs":
            return HdfsStorage(uri)
        if parsed.scheme == "file":
            return ArrowStorage(uri)
        raise ConfigError(uri, f"scheme {parsed.scheme!r} is not one of file, hdfs, webhdfs")

    def join(self, *parts: str) -> str:
        """``root/part/part``: the only place paths are joined."""
        for part in parts:
            if not part or "/" in part or part in (".", ".."):
                raise ValueError(f"invalid path component {part!r}")
        return posixpath.join(self.root, *parts)

    @staticmethod
    def name(path: str) -> str:
        return posixpath.basename(path)

    @staticmethod
    def parent(path: str) -> str:
        return posixpath.dirname(path)

    @staticmethod
    def child(path: str, *parts: str) -> str:
        """``path/part/part`` for a path this storage returned."""
        for part in parts:
            if not part or "/" in part or part in (".", ".."):
                raise ValueError(f"invalid path component {part!r}")
        return posixpath.join(path, *parts)

    def temp_path(self, path: str) -> str:
        return self.child(self.parent(path), f".{self.name(path)}.{uuid.uuid4().hex[:12]}.tmp")

    def write_atomic(self, path: str, data: bytes) -> None:
        """Write ``data`` to a temporary file and rename it to ``path`` (replacing it)."""
        self.makedirs(self.parent(path))
        temp = self.temp_path(path)
        self._write(temp, data)
        try:
            self._replace(temp, path)
        except BaseException:
            self.delete(temp)
            raise

    @contextlib.contextmanager
    def open_atomic(self, path: str) -> Iterator:
        """A binary stream to a temporary file that becomes ``path`` (replacing it) when the
        block ends normally, and is deleted when it raises."""
        self.makedirs(self.parent(path))
        temp = self.temp_path(path)
        try:
            with self._open_output(temp) as stream:
                yield stream
            self._replace(temp, path)
        except BaseException:
            self.delete(temp)
            raise

    def create_exclusive(self, path: str, data: bytes) -> bool:
        """Create ``path`` with ``data`` unless it exists; True when this call created it."""
        self.makedirs(self.parent(path))
        temp = self.temp_path(path)
        self._write(temp, data)
        try:
            return self._rename_no_replace(temp, path)
        finally:
            self.delete(temp)

    def read_text(self, path: str) -> str:
        return self.read_bytes(path).decode()

    def copy(self, src: str, dst: str) -> None:
        """Copy a file to ``dst`` (which must not exist), streaming it."""
        self.makedirs(self.parent(dst))
        self.write_atomic(dst, self.read_bytes(src))

    @abstractmethod
    def read_bytes(self, path: str) -> bytes:
        """Contents of a file; FileNotFoundError if missing."""

    @abstractmethod
    def exists(self, path: str) -> bool: ...

    @abstractmethod
    def list_dir(self, path: str) -> list[str]:
        """Names in a directory (sorted); empty when it does not exist."""

    @abstractmethod
    def makedirs(self, path: str) -> None: ...

    @abstractmethod
    def delete(self, path: str) -> None:
        """Remove a file or a directory tree; nothing if missing."""

    @abstractmethod
    def move(self, src: str, dst: str) -> None:
        """Rename a file or directory; ``dst`` must not exist."""

    @abstractmethod
    def size(self, path: str) -> int: ...

    @abstractmethod
    def _write(self, path: str, data: bytes) -> None: ...

    @abstractmethod
    def _open_output(self, path: str):
        """A context manager giving a binary output stream (``write``, ``tell``) to ``path``."""

    @abstractmethod
    def _replace(self, src: str, dst: str) -> None: ...

    @abstractmethod
    def _rename_no_replace(self, src: str, dst: str) -> bool: ...


class ArrowStorage(Storage):
    """A ``pyarrow.fs`` filesystem: file:// (and hdfs:// through :class:`HdfsStorage`).

    ``atomic_replace`` says whether a rename may replace an existing file (local disks);
    when False replacing deletes the target first.
    """

    def __init__(self, uri: str, atomic_replace: bool | None = None,
                 filesystem: tuple[pafs.FileSystem, str] | None = None) -> None:
        if filesystem is None:
            try:
                filesystem = pafs.FileSystem.from_uri(uri)
            except Exception as exc:  # pyarrow raises ArrowInvalid, OSError ... for bad URIs
                raise ConfigError(uri, f"cannot open filesystem: {exc}") from None
        fs, root = filesystem
        super().__init__(uri, root.rstrip("/") or "/")
        self.fs = fs
        self.local = isinstance(fs, pafs.LocalFileSystem)
        self.atomic_replace = self.local if atomic_replace is None else atomic_replace

    def read_bytes(self, path: str) -> bytes:
        info = self.fs.get_file_info(path)
        if info.type != pafs.FileType.File:
            raise FileNotFoundError(path)
        with self.fs.open_input_stream(path) as stream:
            return stream.read()

    def exists(self, path: str) -> bool:
        return self.fs.get_file_info(path).type != pafs.FileType.NotFound

    def list_dir(self, path: str) -> list[str]:
        if self.fs.get_file_info(path).type != pafs.FileType.Directory:
            return []
        infos = self.fs.get_file_info(pafs.FileSelector(path, allow_not_found=True))
        return sorted(info.base_name for info in infos)

    def makedirs(self, path: str) -> None:
        self.fs.create_dir(path, recursive=True)

    def delete(self, path: str) -> None:
        info = self.fs.get_file_info(path)
        if info.type == pafs.FileType.Directory:
            self.fs.delete_dir(path)
        elif info.type != pafs.FileType.NotFound:
            self.fs.delete_file(path)

    def move(self, src: str, dst: str) -> None:
        self.makedirs(self.parent(dst))
        self.fs.move(src, dst)

    def size(self, path: str) -> int:
        return self.fs.get_file_info(path).size

    def copy(self, src: str, dst: str) -> None:
        self.makedirs(self.parent(dst))
        if self.local:
            os.link(src, dst)  # files are never rewritten in place, so a link is a copy
            return
        with self.open_atomic(dst) as out, self.fs.open_input_stream(src) as source:
            while chunk := source.read(1 << 22):
                out.write(chunk)

    def _write(self, path: str, data: bytes) -> None:
        with self.fs.open_output_stream(path) as stream:
            stream.write(data)

    def _open_output(self, path: str):
        return self.fs.open_output_stream(path)

    def _replace(self, src: str, dst: str) -> None:
        if not self.atomic_replace and self.exists(dst):
            self.fs.delete_file(dst)
        self._rename(src, dst)

    def _rename(self, src: str, dst: str) -> None:
        self.fs.move(src, dst)

    def _rename_no_replace(self, src: str, dst: str) -> bool:
        if self.local:
            try:
                os.link(src, dst)  # atomic: fails when dst exists
                return True
            except FileExistsError:
                return False
        if self.exists(dst):
            return False
        try:
            self._rename(src, dst)  # HDFS rename refuses an existing destination
            return True
        except OSError:
            return False


class HdfsStorage(ArrowStorage):
    """hdfs://namenode:port/path through hdfs-native.

    Its fsspec filesystem, wrapped as a ``pyarrow.fs.PyFileSystem``, serves reads, listings
    and Parquet streams (so queries and footers read only what they need); renames go to
    the client itself: ``_replace`` is one ``rename2`` with ``OVERWRITE`` (atomic: readers
    see the old file or the new one), ``_rename_no_replace`` one ``rename2`` without it
    (the NameNode refuses an existing target, so no exists-then-rename race).

    A NameNode that does not accept connections is reported at once (hdfs-native itself
    would retry for as long as the process lives); a name service of an HA pair
    (``hdfs://nameservice/...``) is resolved from ``$HADOOP_CONF_DIR`` by hdfs-native.
    The user is ``$HADOOP_USER_NAME``, else the login user, as with Hadoop's own client.
    """

    CONNECT_TIMEOUT_S = 10.0

    def __init__(self, uri: str) -> None:
        from hdfs_native import Client
        from hdfs_native.fsspec import HdfsFileSystem

        parsed = urlparse(uri)
        if not parsed.hostname:
            raise ConfigError(uri, "an hdfs:// URI names its NameNode: hdfs://host:8020/path")
        if parsed.port is not None:
            _check_reachable(uri, parsed.hostname, parsed.port, self.CONNECT_TIMEOUT_S)
        self.client = Client(f"hdfs://{parsed.netloc}")
        # Not in fsspec's instance cache: fsspec clears that cache in a forked child, and
        # dropping the last reference to an hdfs-native client there (its runtime's threads
        # did not survive the fork) hangs the child before it can exec -- as pyspark's
        # gateway launch does, right after a task looked at its tables.
        fsspec_fs = HdfsFileSystem(host=parsed.hostname, port=parsed.port, skip_instance_cache=True)
        fs = pafs.PyFileSystem(pafs.FSSpecHandler(fsspec_fs))
        super().__init__(uri, atomic_replace=True, filesystem=(fs, parsed.path or "/"))
        self.local = False

    def read_bytes(self, path: str) -> bytes:
        with _hdfs_errors(path):
            with self.client.read(path) as reader:
                return reader.read()

    def exists(self, path: str) -> bool:
        with _hdfs_errors(path):
            try:
                self.client.get_file_info(path)
                return True
            except FileNotFoundError:
                return False

    def list_dir(self, path: str) -> list[str]:
        with _hdfs_errors(path):
            try:
                status = self.client.get_file_info(path)
            except FileNotFoundError:
                return []
            if not status.isdir:
                return []
            return sorted(posixpath.basename(s.path) for s in self.client.list_status(path, False))

    def makedirs(self, path: str) -> None:
        with _hdfs_errors(path):
            self.client.mkdirs(path, 0o755, True)

    def delete(self, path: str) -> None:
        with _hdfs_errors(path):
            self.client.delete(path, True)

    def move(self, src: str, dst: str) -> None:
        self.makedirs(self.parent(dst))
        with _hdfs_errors(src):
            self.client.rename(src, dst, False)

    def size(self, path: str) -> int:
        with _hdfs_errors(path):
            return self.client.get_file_info(path).length

    def _write(self, path: str, data: bytes) -> None:
        with _hdfs_errors(path):
            with self.client.create(path) as writer:
                writer.write(data)

    def _open_output(self, path: str):
        return _guarded_output(self.fs, path)

    def _replace(self, src: str, dst: str) -> None:
        with _hdfs_errors(dst):
            self.client.rename(src, dst, True)

    def _rename_no_replace(self, src: str, dst: str) -> bool:
        try:
            self.client.rename(src, dst, False)
            return True
        except FileExistsError:
            return False


def _check_reachable(uri: str, host: str, port: int, timeout: float) -> None:
    try:
        with socket.create_connection((host, port), timeout=timeout):
            return
    except OSError as exc:
        raise StorageError(f"{uri}: cannot reach the NameNode at {host}:{port} "
                           f"({exc.strerror or exc})") from None


@contextlib.contextmanager
def _guarded_output(fs: pafs.FileSystem, path: str):
    with _hdfs_errors(path):
        with fs.open_output_stream(path) as stream:
            yield stream


@contextlib.contextmanager
def _hdfs_errors(path: str):
    """hdfs-native's errors as one line: the NameNode's exception without its Java stack."""
    try:
        yield
    except FileNotFoundError:
        raise FileNotFoundError(f"HDFS {path}: no such file or directory") from None
    except FileExistsError:
        raise FileExistsError(f"HDFS {path}: already exists") from None
    except StorageError:
        raise
    except (RuntimeError, OSError) as exc:
        raise _one_line_error(path, str(exc)) from None


def _one_line_error(path: str, text: str) -> StorageError:
    # hdfs-native renders a remote failure as RPCError("<java class>", "<message>\n\tat ...")
    # with the newlines escaped; keep the class's short name and the message's first line.
    kind, _, message = text.partition('", "')
    if kind.startswith('RPCError("') and message:
        text = f"{kind.rsplit('.', 1)[-1]}: {message}"
    first = text.split("\\n")[0].splitlines()[0].replace('\\"', '"').strip()
    error_class = _HdfsPermissionError if "AccessControlException" in text else StorageError
    return error_class(f"HDFS {path}: {first}")


class _HdfsPermissionError(StorageError, PermissionError):
    pass


class WebHdfsStorage(Storage):
    """webhdfs://host:port/path?user=NAME through the ``hdfs`` package."""

    def __init__(self, uri: str) -> None:
        import hdfs  # only needed for webhdfs

        parsed = urlparse(uri)
        user = parse_qs(parsed.query).get("user", [None])[0]
        super().__init__(uri, parsed.path.rstrip("/") or "/")
        self.client = hdfs.InsecureClient(f"http://{parsed.netloc}", user=user)
        self._error = hdfs.HdfsError

    def read_bytes(self, path: str) -> bytes:
        if self.client.status(path, strict=False) is None:
            raise FileNotFoundError(path)
        with self.client.read(path) as reader:
            return reader.read()

    def exists(self, path: str) -> bool:
        return self.client.status(path, strict=False) is not None

    def list_dir(self, path: str) -> list[str]:
        status = self.client.status(path, strict=False)
        if status is None or status["type"] != "DIRECTORY":
            return []
        return sorted(self.client.list(path))

    def makedirs(self, path: str) -> None:
        self.client.makedirs(path)

    def delete(self, path: str) -> None:
        self.client.delete(path, recursive=True)

    def move(self, src: str, dst: str) -> None:
        self.makedirs(self.parent(dst))
        self.client.rename(src, dst)

    def size(self, path: str) -> int:
        return self.client.status(path)["length"]

    def _write(self, path: str, data: bytes) -> None:
        self.client.write(path, data, overwrite=True)

    @contextlib.contextmanager
    def _open_output(self, path: str):
        # WebHDFS takes a whole body per request: spool to a local file, then upload it.
        with tempfile.TemporaryFile(prefix="pylog-upload-") as spool:
            yield spool
            spool.seek(0)
            self.client.write(path, spool, overwrite=True)

    def _replace(self, src: str, dst: str) -> None:
        self.client.delete(dst)
        self.client.rename(src, dst)

    def _rename_no_replace(self, src: str, dst: str) -> bool:
        if self.exists(dst):
            return False
        try:
            self.client.rename(src, dst)
            return True
        except self._error:
            return False
