"""A long job's compilation cache loads only the entries this user sealed (issue 60 item 7):
the seal is an HMAC of each entry's name and bytes under this user's key, so a swapped, an
edited or a planted entry (beside a copied seal) is removed, not loaded; a key file that
others may read, or of another owner, is not used (analysis/job.py)."""
import os

import pytest

from jaxsel.analysis.job import CACHE_SEAL, seal_cache, trusted_cache


@pytest.fixture
def folder(tmp_path, monkeypatch):
    monkeypatch.setenv("JAXSEL_CACHE_DIR", str(tmp_path / "home-cache"))
    cache = tmp_path / "job" / ".xla-cache"
    cache.mkdir(parents=True)
    (cache / "aaa-cache").write_bytes(b"program a")
    (cache / "bbb-cache").write_bytes(b"program b")
    (cache / "aaa-atime").write_bytes(b"12345")   # JAX's access time: no code, not sealed
    seal_cache(cache)
    return cache


def names(folder):
    return sorted(p.name for p in folder.iterdir() if p.name != CACHE_SEAL)


def test_sealed_entries_are_kept_and_a_swapped_pair_is_removed(folder, capsys):
    trusted_cache(folder)
    assert names(folder) == ["aaa-atime", "aaa-cache", "bbb-cache"] and capsys.readouterr().err == ""
    (folder / "aaa-atime").write_bytes(b"67890")   # a read rewrites it
    a, b = (folder / "aaa-cache").read_bytes(), (folder / "bbb-cache").read_bytes()
    (folder / "aaa-cache").write_bytes(b)
    (folder / "bbb-cache").write_bytes(a)
    trusted_cache(folder)
    assert names(folder) == ["aaa-atime"]
    assert "2 compiled program(s)" in capsys.readouterr().err


def test_a_planted_entry_beside_a_copied_seal_is_removed(folder, tmp_path, capsys):
    crafted = tmp_path / "crafted" / ".xla-cache"
    crafted.mkdir(parents=True)
    (crafted / CACHE_SEAL).write_bytes((folder / CACHE_SEAL).read_bytes())
    (crafted / "aaa-cache").write_bytes(b"planted code")
    (crafted / "ccc-cache").write_bytes(b"planted code")
    trusted_cache(crafted)
    assert names(crafted) == [] and "2 compiled program(s)" in capsys.readouterr().err


def test_a_key_that_others_may_read_is_not_used(folder, tmp_path, capsys):
    key = tmp_path / "home-cache" / "compilation-seal.key"
    assert key.stat().st_mode & 0o777 == 0o600
    os.chmod(key, 0o644)
    trusted_cache(folder)
    err = capsys.readouterr().err
    assert names(folder) == ["aaa-atime"] and "0o644" in err and "chmod 600" in err
    assert len([line for line in err.splitlines() if "seal key" in line]) == 1
