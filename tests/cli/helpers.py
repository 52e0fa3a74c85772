import subprocess
import sys
from pathlib import Path

PYLOG = str(Path(sys.executable).parent / "pylog")


def pylog(*args: str, input: bytes | None = None, timeout: float = 60) -> subprocess.CompletedProcess:
    """Run the installed ``pylog`` command."""
    return subprocess.run([PYLOG, *args], input=input, capture_output=True, timeout=timeout)
