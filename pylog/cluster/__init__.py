"""Cluster state: which brokers are alive, which topics exist, who leads each partition.

``ClusterMetadata`` (in ``metadata.py``) is the seam the broker uses. A single broker
with no ZooKeeper uses ``StandaloneMetadata``; with ``zookeeper.connect`` set, the broker
uses ``zk.ZkClusterMetadata``, built from:

- ``layout``: the ZooKeeper paths and JSON nodes (Kafka's 0.8-era layout);
- ``session``: the kazoo client for ``zookeeper.connect`` (chroot created on first use);
- ``registry``: the broker's ephemeral registration;
- ``placement``: the seeds' replica placement and topic-name rules (pure);
- ``controller``: election through ``/controller`` and the partition states it writes;
- ``view``: the in-memory, watch-driven view Metadata requests are answered from;
- ``lease``: the time-bounded belief that the broker's session is alive;
- ``worker``: the one thread that does the ZooKeeper work watches ask for;
- ``consumer_group``: the seeds' consumer-group nodes and range assignment;
- ``group_member``: one consumer's membership, rebalances and ownership (used by
  ``pylog.client.zk_consumer``).
"""
