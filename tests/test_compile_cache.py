"""The suite's kept compilation cache (tests/compile_cache.py): one folder per machine and
jaxlib, never shared between CPUs that XLA compiles differently for, pruned oldest first."""
from __future__ import annotations

import os

import pytest

import compile_cache


def test_the_kept_folder_is_one_per_cpu_and_jaxlib(monkeypatch, tmp_path):
    monkeypatch.delenv("XDG_CACHE_HOME", raising=False)
    monkeypatch.setattr(compile_cache, "cpu_identity", lambda: "model name: X\nflags: sse avx2 fma")
    avx2 = compile_cache.kept_folder(home=tmp_path)
    monkeypatch.setattr(compile_cache, "cpu_identity", lambda: "model name: X\nflags: sse avx2 fma avx512f")
    avx512 = compile_cache.kept_folder(home=tmp_path)
    assert avx2 != avx512 and avx2.parent == avx512.parent == tmp_path / ".cache" / "jaxsel-tests"
    assert compile_cache.version("jaxlib") in avx2.name
    monkeypatch.setattr(compile_cache, "cpu_identity", lambda: "model name: X\nflags: sse avx2 fma")
    assert compile_cache.kept_folder(home=tmp_path) == avx2   # the same machine finds its folder again


def test_fresh_gives_a_temporary_folder_and_a_bad_choice_is_one_line(monkeypatch):
    monkeypatch.setenv(compile_cache.CHOICE, "fresh")
    path, fresh = compile_cache.folder()
    assert fresh and path.is_dir() and not any(path.iterdir())
    path.rmdir()
    monkeypatch.setenv(compile_cache.CHOICE, "always")
    with pytest.raises(SystemExit, match="JAXSEL_TEST_XLA_CACHE='always': expected 'kept' .* or 'fresh'"):
        compile_cache.folder()


def test_prune_removes_the_oldest_programs_down_to_half_only_past_the_cap(tmp_path):
    for i in range(10):   # program i is 100 bytes, written at time i
        path = tmp_path / f"p{i}"
        path.write_bytes(b"x" * 100)
        os.utime(path, (i, i))
    assert compile_cache.prune(tmp_path, max_bytes=1000) == 0 and len(list(tmp_path.iterdir())) == 10
    assert compile_cache.prune(tmp_path, max_bytes=900) == 6   # 1000 > 900: down to 450
    assert sorted(p.name for p in tmp_path.iterdir()) == ["p6", "p7", "p8", "p9"]
