"""``meta.properties``: the broker id and cluster id each log dir belongs to.

Layout (Kafka's own file, properties format)::

    version=0
    broker.id=1
    cluster.id=5Yw2u7lBSy6MT4N3s0Vf2g

The first start writes it (temporary file, then rename) into every log dir; later
starts read the cluster id back, so it stays the same across restarts. A log dir that
belongs to another broker id is refused.
"""

from __future__ import annotations

import uuid
from pathlib import Path

from pylog.broker.config import parse_properties
from pylog.protocol.primitives import uuid_text
from pylog.errors import ConfigError
from pylog.log.checkpoint import write_text_atomically

META_FILE = "meta.properties"


def new_cluster_id() -> str:
    """A random id in Kafka's spelling: 22 characters of URL-safe base64."""
    return uuid_text(uuid.uuid4())


def read_meta(log_dir: Path) -> dict[str, str] | None:
    try:
        return parse_properties((log_dir / META_FILE).read_text())
    except FileNotFoundError:
        return None


def write_meta(log_dir: Path, broker_id: int, cluster_id: str) -> None:
    log_dir.mkdir(parents=True, exist_ok=True)
    write_text_atomically(log_dir / META_FILE, f"version=0\nbroker.id={broker_id}\ncluster.id={cluster_id}\n")


def ensure_meta(log_dirs: list[Path], broker_id: int, cluster_id: str | None = None) -> str:
    """Return the cluster id of these log dirs, creating ``meta.properties`` where missing.

    ``cluster_id`` (from ZooKeeper in cluster mode) wins over a stored one; without it
    the stored id is kept, or a new one made. Raises ConfigError("log.dirs", ...) if a
    dir belongs to another broker id.
    """
    stored = [(d, read_meta(d)) for d in log_dirs]
    for log_dir, meta in stored:
        if meta is not None and meta.get("broker.id") not in (None, str(broker_id)):
            raise ConfigError("log.dirs", f"{log_dir} belongs to broker {meta['broker.id']}, "
                                          f"not broker.id={broker_id}")
    if cluster_id is None:
        cluster_id = next((m["cluster.id"] for _, m in stored if m and m.get("cluster.id")),
                          None) or new_cluster_id()
    for log_dir, meta in stored:
        if meta is None or meta.get("cluster.id") != cluster_id:
            write_meta(log_dir, broker_id, cluster_id)
    return cluster_id
