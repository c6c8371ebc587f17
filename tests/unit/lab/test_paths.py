from pathlib import Path

from operators.lab import paths


def test_an_older_release_has_a_bin_directory_of_its_own(monkeypatch, tmp_path):
    monkeypatch.setenv("DRA_LAB_HOME", str(tmp_path))
    monkeypatch.delenv("DRA_LAB_BIN_DIR", raising=False)
    monkeypatch.delenv("DRA_LAB_KUBERNETES", raising=False)
    assert paths.bin_dir() == tmp_path / "bin"
    assert paths.bin_dir("1.35") == tmp_path / "1.35" / "bin"
    monkeypatch.setenv("DRA_LAB_KUBERNETES", "1.34")  # how make test-versions picks the release
    assert paths.bin_dir() == tmp_path / "1.34" / "bin"
    assert paths.kwok_stages_dir(paths.bin_dir()) == tmp_path / "1.34" / "kwok-stages"
    monkeypatch.setenv("DRA_LAB_BIN_DIR", "/somewhere")  # an explicit directory wins
    assert paths.bin_dir("1.35") == Path("/somewhere")
