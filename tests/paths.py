"""Where the tests find the repository's files."""

from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
