from pylog.testing.broker import broker_fixture

# One broker for the whole area's read/write tests; tests use their own topics.
broker = broker_fixture(scope="package", overrides={"num.partitions": 1,
                                                    "message.max.bytes": 200000})
