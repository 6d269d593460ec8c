"""The suite's compile flags follow the installed jaxlib (tests/compile_flags.py): a flag XLA
does not know is dropped and named, not left to abort every worker."""
import json
import os
import tempfile

import pytest

import compile_flags

KNOWN = "--xla_backend_optimization_level=1"
UNKNOWN = "--xla_jaxsel_no_such_flag=true"


@pytest.mark.parametrize("text, expected", [("0.10.2", (0, 10, 2)), ("0.12.0.1", (0, 12, 0, 1)),
                                            ("0.11.0rc1", (0, 11, 0)), ("0.13.0.dev20260101", (0, 13, 0))])
def test_release_reads_the_numbers_only(text, expected):
    assert compile_flags.release(text) == expected


def test_each_jaxlib_takes_the_newest_entry_not_newer_than_itself():
    old, new = (flags for _, flags in compile_flags.FAST_COMPILE)
    assert compile_flags.wanted("0.10.2") == old
    assert compile_flags.wanted("0.11.0") == compile_flags.wanted("0.12.0.1") == compile_flags.wanted("1.0") == new
    assert "--xla_cpu_use_fusion_emitters=false" in old and not any("fusion_emitters" in f for f in new)


def test_an_unknown_flag_is_dropped_with_xla_s_reason_and_the_verdict_is_cached(monkeypatch, tmp_path):
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    got = compile_flags.verdict("test", [KNOWN, UNKNOWN])
    assert got["flags"] == [KNOWN] and list(got["dropped"]) == [UNKNOWN]
    assert "Unknown flag in XLA_FLAGS: " + UNKNOWN in got["dropped"][UNKNOWN]
    [cache] = tmp_path.glob("jaxsel-suite-xla-flags-test-*.json")
    assert json.loads(cache.read_text()) == got
    monkeypatch.setattr(compile_flags, "probe", lambda flags: pytest.fail("probed again"))
    assert compile_flags.verdict("test", [KNOWN, UNKNOWN]) == got


def test_a_timed_out_probe_drops_the_flag_for_this_session_only(monkeypatch, tmp_path):
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    monkeypatch.setattr(compile_flags, "probe", lambda flags: compile_flags.TOO_SLOW)
    assert compile_flags.verdict("test", [KNOWN]) == {"flags": [], "dropped": {KNOWN: compile_flags.TOO_SLOW}}
    assert not list(tmp_path.glob("jaxsel-suite-xla-flags-*"))


def test_the_suite_runs_under_the_flags_it_decided():
    decided = compile_flags.decide()
    assert decided["jaxlib"] == compile_flags.jaxlib_version()
    assert set(compile_flags.wanted(decided["jaxlib"])) == {*decided["flags"], *decided["dropped"]}
    assert set(decided["flags"]) <= set(os.environ["XLA_FLAGS"].split())
