"""``pylog mirror`` mistakes end as one readable line: a bad config key (exit 2, the key
named, never its value), an unreachable cluster or a missing confluent-kafka (exit 1)."""

from __future__ import annotations

import subprocess
import sys

import pytest

ARGS = ["--source-bootstrap-server", "127.0.0.1:1", "--target-bootstrap-server", "127.0.0.1:2",
        "--topics", "orders", "--source-alias", "dc1"]


def mirror(*args: str, prelude: str = "") -> subprocess.CompletedProcess:
    code = f"{prelude}import sys; from pylog.cli.main import main; sys.exit(main(sys.argv[1:]))"
    return subprocess.run([sys.executable, "-c", code, "mirror", *args],
                          capture_output=True, text=True, timeout=120)


def one_line(result: subprocess.CompletedProcess) -> str:
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("pylog mirror: error: ")
    return lines[0]


@pytest.mark.parametrize("yaml_text, key", [
    ("source:\n  client:\n    fetch.wait.max: 100\n", "source.client.fetch.wait.max"),
    ("target:\n  client:\n    linger.ms: soon\n", "target.client.linger.ms"),
    ("target:\n  client:\n    transactional.id: mine\n", "target.client.transactional.id"),
    ("topicz: orders\n", "topicz"),
    ("transaction_interval_ms: -5\n", "transaction_interval_ms"),
    ("target_topic: '{cluster}.{topic}'\n", "target_topic"),
    ("source: [1, 2]\n", "source"),
])
def test_a_bad_config_key_is_named_in_one_line(tmp_path, yaml_text, key):
    config = tmp_path / "mirror.yaml"
    config.write_text(yaml_text)
    result = mirror(*ARGS, "--config", str(config))
    assert result.returncode == 2
    assert f"error: {key}:" in one_line(result)
    assert "soon" not in result.stderr and "mine" not in result.stderr


def test_missing_flags_name_the_key():
    result = mirror("--source-bootstrap-server", "127.0.0.1:1", "--topics", "x",
                    "--source-alias", "dc1")
    assert result.returncode == 2
    assert "target.bootstrap_servers: missing (or give --target-bootstrap-server" in one_line(result)


def test_the_example_config_is_valid():
    from pylog.mirror.config import build_config, check_client_properties, load_yaml

    config = build_config(load_yaml("conf/mirror.yaml"))
    check_client_properties(config)
    assert config.target_topic_name("orders") == "dc1.orders"
    assert config.topics.fullmatch("payments.eu") and not config.topics.fullmatch("ordersx")


def test_an_unreachable_cluster_is_one_line(tmp_path):
    config = tmp_path / "mirror.yaml"
    config.write_text("startup_timeout_ms: 3000\n")
    result = mirror(*ARGS, "--config", str(config))
    assert result.returncode == 1
    assert "cannot reach the source cluster at 127.0.0.1:1" in one_line(result)


def test_missing_confluent_kafka_says_how_to_install_it():
    result = mirror(*ARGS, prelude="import sys; sys.modules['confluent_kafka'] = None; ")
    assert result.returncode == 1
    assert "pip install 'pylog[mirror]'" in one_line(result)
