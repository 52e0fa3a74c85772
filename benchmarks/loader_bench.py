"""Loader throughput: JSON events from a pylog broker into a Parquet table, end to end.

    python benchmarks/loader_bench.py [--records 2000000] [--partitions 4] [--master local[2]]
                                      [--decoder vectorised|reference] [--hdfs] [--spark-kafka]

One run, all in this process tree:

* **loader** -- ``pylog.etl.job.run_load`` on a local SparkSession (``--master``): plan,
  map tasks (fetch by offset, bulk decode, Parquet zstd), commit. ``--decoder`` picks the
  records decoder of the tasks (``PYLOG_RECORDS_DECODER``; see ``pylog.records.columns``).
* **bound** -- pyarrow alone in one process: the same values newline-joined, parsed by
  ``pyarrow.json.read_json`` with the schema, written as one zstd Parquet file. No
  network, no record batches: the most the decode+write part can do.
* **naive** -- a kafka-python consumer reading every partition, ``json.loads`` per record,
  then ``pyarrow.Table.from_pylist`` and a Parquet write.
* **loader-hdfs** (``--hdfs``) -- the same load with its table and state on a real HDFS
  (a NameNode and a DataNode started here, ``pylog.testing.hdfs``), as a second run id.
* **spark-kafka** (``--spark-kafka``) -- Spark's own Kafka batch source on the same topic,
  master and cores: ``spark.read.format("kafka")``, ``from_json`` with the same schema,
  the same metadata columns, a zstd Parquet write.

Prints records/s and MB/s (payload bytes) for each, and the loader's ratio to both
(goals: at least 0.8 of the bound, at least 10x the naive loader).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import sys
import tempfile
import time
from pathlib import Path

import pyarrow as pa
import pyarrow.json as pajson
import pyarrow.parquet as pq

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

SCHEMA = {"user_id": "int64", "url": "string", "referrer": "string", "duration_ms": "int32",
          "ts": "timestamp", "session": "string"}


def make_events(count: int) -> list[bytes]:
    rng = random.Random(7)
    base = 1763622000000
    out = []
    for i in range(count):
        ms = base + i * 7
        out.append(json.dumps({
            "user_id": rng.randrange(10_000_000), "url": f"https://shop.example.com/p/{rng.randrange(99999)}",
            "referrer": f"https://search.example.org/q?{rng.randrange(10**8)}",
            "duration_ms": rng.randrange(60000),
            "ts": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(ms // 1000)) + f".{ms % 1000:03d}Z",
            "session": f"{rng.getrandbits(96):024x}"}, separators=(",", ":")).encode())
    return out


def produce(bootstrap: str, topic: str, values: list[bytes], partitions: int) -> None:
    import confluent_kafka

    producer = confluent_kafka.Producer({
        "bootstrap.servers": bootstrap, "linger.ms": 20, "batch.size": 1_000_000,
        "queue.buffering.max.messages": 500_000, "compression.type": "none", "acks": 1})
    for i, value in enumerate(values):
        while True:
            try:
                producer.produce(topic, value=value, partition=i % partitions)
                break
            except BufferError:
                producer.poll(0.05)
    assert producer.flush(300) == 0


def spark_session(master: str, spark_kafka: bool):
    from pyspark.sql import SparkSession

    builder = (SparkSession.builder.master(master).appName("loader-bench")
               .config("spark.ui.enabled", "false").config("spark.driver.host", "127.0.0.1"))
    if spark_kafka:
        from pylog.testing.maven import classpath

        # Spark and Hadoop come with pyspark; the source adds itself and Kafka's client.
        wanted = ("spark-sql-kafka", "spark-token-provider-kafka", "kafka-clients", "commons-pool2")
        jars = [jar for jar in classpath("spark-kafka").split(":") if Path(jar).name.startswith(wanted)]
        builder = builder.config("spark.jars", ",".join(jars))
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    spark.sparkContext.parallelize([0, 1], 2).count()  # start the Python workers first
    return spark


def run_loader(spark, bootstrap: str, topic: str, warehouse: str, state: str, per_task: int,
               label: str = "loader") -> float:
    from pylog.etl.config import parse_config
    from pylog.etl.job import LoadRequest, run_load

    config = parse_config({
        "source": {"bootstrap_servers": bootstrap, "fetch_max_bytes": 16 << 20},
        "warehouse": warehouse, "state": state,
        "topics": {topic: {"format": "json", "schema": SCHEMA, "event_time": "field:ts",
                           "max_records_per_task": per_task}}})
    started = time.perf_counter()
    audits = run_load(config, spark, LoadRequest(run_id="bench"))
    elapsed = time.perf_counter() - started
    audit = audits[0]
    assert audit.rows_written == audit.records_fetched, audit
    print(f"{label}: {len(audit.ranges)} tasks, {audit.task_seconds:.1f} task-seconds, "
          f"{audit.bytes_written / 1e6:.0f} MB of Parquet to {warehouse.split(':')[0]}://", flush=True)
    return elapsed


def run_spark_kafka(spark, bootstrap: str, topic: str, total: int, work: Path) -> float:
    """Spark's own Kafka source, JSON parsed by from_json, written as zstd Parquet."""
    from pyspark.sql import functions as F
    from pyspark.sql import types as T

    spark_types = {"int64": T.LongType(), "int32": T.IntegerType(), "string": T.StringType(),
                   "timestamp": T.TimestampType()}
    schema = T.StructType([T.StructField(name, spark_types[kind]) for name, kind in SCHEMA.items()])
    frame = (spark.read.format("kafka").option("kafka.bootstrap.servers", bootstrap)
             .option("subscribe", topic).option("startingOffsets", "earliest")
             .option("endingOffsets", "latest").load())
    # Untimed: load the source's and Kafka's client classes and warm the JIT, as the loader's
    # run starts with its Python workers up (cold, the first read costs it 2-3x).
    frame.limit(1000).count()
    started = time.perf_counter()
    rows = frame.select(F.from_json(F.col("value").cast("string"), schema).alias("v"),
                        F.col("topic").alias("_topic"), F.col("partition").alias("_partition"),
                        F.col("offset").alias("_offset"), F.col("timestamp").alias("_timestamp"),
                        F.col("key").alias("_key")).select("v.*", "_topic", "_partition", "_offset",
                                                           "_timestamp", "_key")
    target = work / "spark-kafka"
    rows.write.option("compression", "zstd").parquet(str(target))
    elapsed = time.perf_counter() - started
    written = spark.read.parquet(str(target)).count()
    assert written == total, (written, total)
    return elapsed


def run_bound(values: list[bytes], work: Path) -> float:
    from pylog.etl.config import parse_config
    from pylog.etl.decode import payload_schema

    topic = parse_config({"source": {"bootstrap_servers": "h:1"}, "warehouse": "file:///w", "state": "file:///s",
                          "topics": {"t": {"format": "json", "schema": SCHEMA}}}).topics[0]
    started = time.perf_counter()
    table = pajson.read_json(pa.py_buffer(b"\n".join(values)),
                             parse_options=pajson.ParseOptions(explicit_schema=payload_schema(topic)))
    pq.write_table(table, work / "bound.parquet", compression="zstd")
    return time.perf_counter() - started


def run_naive(bootstrap: str, topic: str, partitions: int, total: int, work: Path) -> float:
    from kafka import KafkaConsumer, TopicPartition

    started = time.perf_counter()
    consumer = KafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False, group_id=None,
                             max_partition_fetch_bytes=8 << 20, fetch_max_bytes=32 << 20)
    assigned = [TopicPartition(topic, p) for p in range(partitions)]
    consumer.assign(assigned)
    consumer.seek_to_beginning(*assigned)
    rows = []
    while len(rows) < total:
        for records in consumer.poll(timeout_ms=1000).values():
            for record in records:
                event = json.loads(record.value)
                event.update(_topic=record.topic, _partition=record.partition, _offset=record.offset,
                             _timestamp=record.timestamp, _key=record.key)
                rows.append(event)
    consumer.close()
    pq.write_table(pa.Table.from_pylist(rows), work / "naive.parquet", compression="zstd")
    return time.perf_counter() - started


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=2_000_000)
    parser.add_argument("--partitions", type=int, default=4)
    parser.add_argument("--master", default="local[2]")
    parser.add_argument("--per-task", type=int, default=125_000, help="max_records_per_task")
    parser.add_argument("--decoder", choices=["vectorised", "reference"], default="vectorised",
                        help="records decoder of the loader's tasks")
    parser.add_argument("--hdfs", action="store_true", help="also load into a real HDFS (loader-hdfs)")
    parser.add_argument("--spark-kafka", action="store_true", help="also run Spark's own Kafka source")
    args, _ = parser.parse_known_args(argv)
    os.environ["PYLOG_RECORDS_DECODER"] = args.decoder  # inherited by the Spark workers
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)

    from pylog.testing.broker import BrokerProcess

    values = make_events(args.records)
    megabytes = sum(map(len, values)) / 1e6
    print(f"{args.records} events, {megabytes:.0f} MB of JSON ({megabytes * 1e6 / args.records:.0f} B each), "
          f"{args.partitions} partitions, {args.master}, {args.decoder} decoder", flush=True)
    with tempfile.TemporaryDirectory(prefix="pylog-loader-bench-") as scratch:
        work = Path(scratch)
        with BrokerProcess(work / "broker", {"num.partitions": args.partitions,
                                             "log.segment.bytes": 256 << 20}) as broker:
            started = time.perf_counter()
            produce(broker.bootstrap, "events", values, args.partitions)
            print(f"produced in {time.perf_counter() - started:.1f}s", flush=True)
            spark = spark_session(args.master, args.spark_kafka)
            results = {"loader": run_loader(spark, broker.bootstrap, "events", (work / "warehouse").as_uri(),
                                            (work / "state").as_uri(), args.per_task)}
            if args.hdfs:
                from pylog.testing.hdfs import running_hdfs

                with running_hdfs(work) as hdfs:
                    results["loader-hdfs"] = run_loader(
                        spark, broker.bootstrap, "events", hdfs.uri("/bench/warehouse"),
                        hdfs.uri("/bench/state"), args.per_task, label="loader-hdfs")
            if args.spark_kafka:
                results["spark-kafka"] = run_spark_kafka(spark, broker.bootstrap, "events", args.records, work)
            spark.stop()
            results["bound"] = run_bound(values, work)
            results["naive"] = run_naive(broker.bootstrap, "events", args.partitions, args.records, work)
    for name, seconds in results.items():
        print(f"{name:7s} {seconds:8.2f}s  {args.records / seconds:12,.0f} records/s  "
              f"{megabytes / seconds:8.1f} MB/s")
    print(f"loader / bound: {results['bound'] / results['loader']:.2f} of the bound's speed (goal >= 0.8)")
    print(f"loader / naive: {results['naive'] / results['loader']:.2f}x the naive baseline (goal >= 10)")
    if "loader-hdfs" in results:
        print(f"loader on hdfs:// / on file://: {results['loader'] / results['loader-hdfs']:.2f} of the speed")
    if "spark-kafka" in results:
        print(f"loader / Spark's Kafka source: {results['spark-kafka'] / results['loader']:.2f}x its speed "
              "(goal > 1)")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
