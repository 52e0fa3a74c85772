"""Fixtures that start real servers (brokers, ZooKeeper, Spark) for tests and demos."""
