"""What the GPU benchmark scripts share."""
import os
import subprocess
from pathlib import Path


def commit():
    """The commit whose tree is being measured: $FLASHATTN_COMMIT when set (the device machine's copy
    of .git can be stale, so scripts/gpu_run.sh callers pass the hash they pushed), else git."""
    if os.environ.get("FLASHATTN_COMMIT"):
        return os.environ["FLASHATTN_COMMIT"]
    try:
        return subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                              cwd=Path(__file__).parent).stdout.strip() or "unknown"
    except OSError:
        return "unknown"
