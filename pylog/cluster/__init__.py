"""Cluster state: which brokers are alive, which topics exist, who leads each partition.

``ClusterMetadata`` (in ``metadata.py``) is the seam the broker uses. A single broker
with no ZooKeeper uses ``StandaloneMetadata``; with ``zookeeper.connect`` set, the broker
uses the ZooKeeper-backed implementation.
"""
