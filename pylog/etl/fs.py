"""One filesystem interface for the loader: file://, hdfs:// and webhdfs:// URIs.

``file://`` and ``hdfs://`` go through ``pyarrow.fs`` (LocalFileSystem, HadoopFileSystem);
``webhdfs://host:port/path?user=NAME`` goes through the ``hdfs`` package's InsecureClient.
Everything else in ``pylog.etl`` builds paths with :meth:`Storage.join` and never joins
strings with ``/`` itself.

Writes are atomic for readers: the bytes go to ``.<name>.<random>.tmp`` in the target
directory, then a rename puts them in place. Readers skip names starting with ``.`` or
``_`` (Spark and Hive do too), so a crash leaves at most an ignored temporary file.
On HDFS a rename does not replace an existing file, so :meth:`Storage.write_atomic`
replaces by delete + rename there: readers may see the name missing for a moment (and
for good after a crash between the two), never a partial file. State that must never
go missing (committed offsets, the pending run, the table lock) is therefore never
replaced: it is written as new files with :meth:`Storage.create_exclusive` (see
:mod:`pylog.etl.state`).
"""

from __future__ import annotations

import contextlib
import os
import posixpath
import tempfile
import uuid
from abc import ABC, abstractmethod
from typing import Iterator
from urllib.parse import parse_qs, urlparse

import pyarrow.fs as pafs

from pylog.errors import ConfigError


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
        if parsed.scheme in ("file", "hdfs"):
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
    """file:// and hdfs:// through pyarrow.fs.

    ``atomic_replace`` says whether a rename may replace an existing file (local disks);
    when False (HDFS, the default there) replacing deletes the target first.
    """

    def __init__(self, uri: str, atomic_replace: bool | None = None) -> None:
        try:
            fs, root = pafs.FileSystem.from_uri(uri)
        except Exception as exc:  # pyarrow raises ArrowInvalid, OSError ... for bad URIs
            raise ConfigError(uri, f"cannot open filesystem: {exc}") from None
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
