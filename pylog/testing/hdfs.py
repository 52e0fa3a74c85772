"""A real HDFS -- a NameNode and DataNodes, Hadoop's own daemons -- as child processes.

The daemons come from Maven Central (``pylog/testing/maven/hdfs``): each runs as its own
JVM (``org.apache.hadoop.hdfs.server.namenode.NameNode``, ``...datanode.DataNode``) with a
generated ``core-site.xml``/``hdfs-site.xml`` on the classpath, loopback only, small heaps,
and heartbeats short enough that a killed DataNode is declared dead in seconds. The
NameNode serves RPC (``hdfs://``) and WebHDFS (``webhdfs://``); both keep their data dirs
across ``kill``/``start``, so a restart is a restart, not a new filesystem::

    from pylog.testing.hdfs import hdfs_fixture
    hdfs = hdfs_fixture(datanodes=2)     # one HDFS per test module

    def test_x(hdfs):
        uri = hdfs.uri("/pylog/warehouse")   # hdfs://127.0.0.1:PORT/pylog/warehouse
        hdfs.restart_namenode()
        hdfs.kill_datanode(1)
"""

from __future__ import annotations

import json
import time
import urllib.request
from pathlib import Path
from xml.sax.saxutils import escape

from pylog.testing.maven import classpath
from pylog.testing.process import (
    ServerProcess, free_port, running_in_temp_dir, server_fixture, wait_for_port)

HOST = "127.0.0.1"
NAMENODE = "org.apache.hadoop.hdfs.server.namenode.NameNode"
DATANODE = "org.apache.hadoop.hdfs.server.datanode.DataNode"
JVM_OPTIONS = ["-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1", "-Djava.net.preferIPv4Stack=true"]
LOG4J = """\
log4j.rootLogger=INFO,console
log4j.appender.console=org.apache.log4j.ConsoleAppender
log4j.appender.console.layout=org.apache.log4j.PatternLayout
log4j.appender.console.layout.ConversionPattern=%d %p %c{1}: %m%n
log4j.logger.org.apache.hadoop.util.NativeCodeLoader=ERROR
"""


def _site(properties: dict[str, object]) -> str:
    rows = "".join(f"  <property><name>{escape(k)}</name><value>{escape(str(v))}</value></property>\n"
                   for k, v in properties.items())
    return f"<?xml version=\"1.0\"?>\n<configuration>\n{rows}</configuration>\n"


class HdfsCluster:
    """One NameNode and ``datanodes`` DataNodes under ``work_dir``.

    ``replication`` is the default replication of new files (at most ``datanodes``).
    """

    def __init__(self, work_dir: Path, datanodes: int = 1, replication: int | None = None) -> None:
        self.work_dir = Path(work_dir)
        self.datanodes = datanodes
        self.replication = replication or min(datanodes, 3)
        self.rpc_port = free_port()
        self.http_port = free_port()
        self.namenode: ServerProcess | None = None
        self.datanode_processes: list[ServerProcess | None] = [None] * datanodes
        self._datanode_ports = [[free_port() for _ in range(3)] for _ in range(datanodes)]
        self._classpath = classpath("hdfs")

    @property
    def address(self) -> str:
        return f"{HOST}:{self.rpc_port}"

    def uri(self, path: str = "/") -> str:
        """``hdfs://127.0.0.1:PORT/path``."""
        return f"hdfs://{self.address}/{path.lstrip('/')}"

    def webhdfs_uri(self, path: str = "/", user: str = "root") -> str:
        return f"webhdfs://{HOST}:{self.http_port}/{path.lstrip('/')}?user={user}"

    def _conf_dir(self, name: str, extra: dict[str, object]) -> Path:
        conf = self.work_dir / "conf" / name
        conf.mkdir(parents=True, exist_ok=True)
        (conf / "core-site.xml").write_text(_site({
            "fs.defaultFS": f"hdfs://{self.address}",
            "hadoop.tmp.dir": self.work_dir / "tmp" / name,
            "ipc.client.connect.max.retries": 2,
            "ipc.client.connect.retry.interval": 200,
        }))
        (conf / "hdfs-site.xml").write_text(_site({
            "dfs.namenode.name.dir": self.work_dir / "name",
            "dfs.namenode.rpc-address": self.address,
            "dfs.namenode.rpc-bind-host": HOST,
            "dfs.namenode.http-address": f"{HOST}:{self.http_port}",
            "dfs.namenode.http-bind-host": HOST,
            "dfs.namenode.secondary.http-address": f"{HOST}:0",
            "dfs.replication": self.replication,
            "dfs.namenode.replication.min": 1,
            "dfs.namenode.safemode.extension": 0,
            "dfs.namenode.safemode.min.datanodes": 1,
            "dfs.permissions.enabled": "true",
            "dfs.webhdfs.enabled": "true",
            # A killed DataNode is dead after 2 * recheck + 10 * heartbeat = 12 s.
            "dfs.heartbeat.interval": 1,
            "dfs.namenode.heartbeat.recheck-interval": 1000,
            "dfs.namenode.handler.count": 4,
            "dfs.datanode.handler.count": 3,
            "dfs.client.block.write.replace-datanode-on-failure.enable": "false",
            **extra,
        }))
        (conf / "log4j.properties").write_text(LOG4J)
        return conf

    def _java(self, name: str, main: str, heap_mb: int, extra: dict[str, object],
              args: list[str] = ()) -> list[str]:
        conf = self._conf_dir(name, extra)
        return ["java", f"-Xmx{heap_mb}m", *JVM_OPTIONS, f"-Dhadoop.log.dir={self.work_dir / 'logs'}",
                "-cp", f"{conf}:{self._classpath}", main, *args]

    def format(self) -> None:
        argv = self._java("format", NAMENODE, 256, {}, ["-format", "-nonInteractive", "-force"])
        formatter = ServerProcess(argv, self.work_dir / "format.log").start()
        if formatter.process.wait(120) != 0:
            raise RuntimeError("formatting the NameNode failed:\n" + formatter.log_text()[-3000:])

    def start(self, timeout: float = 120.0) -> "HdfsCluster":
        """Format (first time only), start every daemon, wait until files can be written."""
        if not (self.work_dir / "name" / "current").exists():
            self.format()
        self.start_namenode(timeout)
        for index in range(self.datanodes):
            self.start_datanode(index, wait=False)
        self.wait_ready(timeout)
        return self

    def start_namenode(self, timeout: float = 120.0) -> None:
        self.namenode = ServerProcess(self._java("namenode", NAMENODE, 384, {}),
                                      self.work_dir / "namenode.log").start()
        wait_for_port(HOST, self.rpc_port, timeout, self.namenode.process, self.namenode.log_path)
        wait_for_port(HOST, self.http_port, timeout, self.namenode.process, self.namenode.log_path)

    def start_datanode(self, index: int, wait: bool = True, timeout: float = 120.0) -> None:
        data_port, http_port, ipc_port = self._datanode_ports[index]
        extra = {"dfs.datanode.data.dir": self.work_dir / f"data{index}",
                 "dfs.datanode.address": f"{HOST}:{data_port}",
                 "dfs.datanode.http.address": f"{HOST}:{http_port}",
                 "dfs.datanode.ipc.address": f"{HOST}:{ipc_port}",
                 "dfs.datanode.hostname": HOST}
        process = ServerProcess(self._java(f"datanode{index}", DATANODE, 256, extra),
                                self.work_dir / f"datanode{index}.log").start()
        self.datanode_processes[index] = process
        if wait:
            self.wait_ready(timeout)

    def live_datanodes(self) -> int:
        return int(self._namesystem_state().get("NumLiveDataNodes", 0))

    def wait_ready(self, timeout: float = 120.0, datanodes: int | None = None) -> None:
        """Until the NameNode left safe mode and ``datanodes`` (default: every running one) are live."""
        wanted = sum(p is not None and p.alive() for p in self.datanode_processes) if datanodes is None else datanodes
        deadline = time.monotonic() + timeout
        while True:
            if self.namenode is None or not self.namenode.alive():
                raise RuntimeError("the NameNode exited:\n" + self._tail())
            state = self._namesystem_state()
            if (state.get("FSState") == "Operational" and int(state.get("NumLiveDataNodes", 0)) >= wanted
                    and not self._in_safe_mode()):
                return
            if time.monotonic() > deadline:
                raise RuntimeError(f"HDFS not ready after {timeout:.0f}s ({state}):\n" + self._tail())
            time.sleep(0.2)

    def _jmx(self, query: str) -> dict:
        try:
            with urllib.request.urlopen(f"http://{HOST}:{self.http_port}/jmx?qry={query}", timeout=5) as r:
                beans = json.load(r).get("beans", [])
        except OSError:
            return {}
        return beans[0] if beans else {}

    def _namesystem_state(self) -> dict:
        return self._jmx("Hadoop:service=NameNode,name=FSNamesystemState")

    def _in_safe_mode(self) -> bool:
        return bool(self._jmx("Hadoop:service=NameNode,name=NameNodeInfo").get("Safemode", "x"))

    def _tail(self) -> str:
        return self.namenode.log_text()[-3000:] if self.namenode else ""

    def kill_namenode(self) -> None:
        """SIGKILL the NameNode (its edits log is on disk; a restart replays it)."""
        if self.namenode is not None:
            self.namenode.kill()

    def restart_namenode(self, timeout: float = 120.0) -> None:
        self.kill_namenode()
        self.start_namenode(timeout)
        self.wait_ready(timeout)

    def kill_datanode(self, index: int) -> None:
        process = self.datanode_processes[index]
        if process is not None:
            process.kill()

    def stop(self) -> None:
        for process in self.datanode_processes:
            if process is not None:
                process.stop()
        if self.namenode is not None:
            self.namenode.stop()


def running_hdfs(base_dir: Path | None = None, **options):
    """A started HDFS for the duration of a ``with`` block; its files are removed after."""
    return running_in_temp_dir(lambda work_dir: HdfsCluster(work_dir, **options), "pylog-hdfs-", base_dir)


def hdfs_fixture(scope: str = "module", **options):
    """A pytest fixture yielding a running HdfsCluster, one per ``scope``."""
    return server_fixture(running_hdfs, "hdfs", scope, **options)
