import re
import subprocess
import sys
from pathlib import Path

PYLOG = str(Path(sys.executable).parent / "pylog")


def pylog(*args: str, input: bytes | None = None, timeout: float = 60) -> subprocess.CompletedProcess:
    """Run the installed ``pylog`` command."""
    return subprocess.run([PYLOG, *args], input=input, capture_output=True, timeout=timeout)


TOPIC_ID = re.compile(r"\tTopicId: ([A-Za-z0-9_-]{22})\t")


def without_topic_id(text: str) -> str:
    """``topics describe`` output with each topic line's TopicId column taken out, after
    checking that every topic line has one (kafka-topics.sh's 22-character form)."""
    for line in text.splitlines():
        if line.startswith("Topic: "):
            assert TOPIC_ID.search(line), line
    return TOPIC_ID.sub("\t", text)
