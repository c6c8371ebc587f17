"""Files that survive a crash or a power loss as either the old or the new content, never torn
and never lost after the call returned: write a temporary file in the same directory, fsync it,
rename it over the target, fsync the directory (a rename lives in the directory's data; without
that fsync a power loss may bring the old file back, or none)."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path


def sync_directory(directory: Path) -> None:
    fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_text(path: Path, text: str, *, mode: int = 0o600, prefix: str = "tmp-", suffix: str = ".tmp") -> None:
    """``suffix``: a temporary name readers of the directory ignore (CDI reads only .json and .yaml)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=prefix, suffix=suffix, dir=path.parent)
    try:
        with os.fdopen(fd, "w") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, mode)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    sync_directory(path.parent)


def remove(path: Path) -> bool:
    """Unlink ``path`` (gone already is fine) and make that durable; whether it was there."""
    try:
        path.unlink()
    except FileNotFoundError:
        return False
    sync_directory(path.parent)
    return True
