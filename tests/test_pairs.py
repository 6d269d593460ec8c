"""The one KEY=VALUE grammar (issue 59 item 5): `--opt`, `--partition-opt`, `--dataset-opt`,
`--project` and a strategy's entry read their pairs by one function, so the same mistake
reads the same wherever it is typed."""
import pytest

from jaxsel.cli import main as cli_main
from jaxsel.core.options import OptionError
from jaxsel.core.pairs import read_entry, read_pairs


def test_pairs_are_split_at_the_first_equals_and_their_values_typed():
    assert read_pairs(["a=1", "b=0.5", "c=true", "d=x=y", " e = text "]) == \
        {"a": 1, "b": 0.5, "c": True, "d": "x=y", "e": "text"}
    assert read_pairs(None) == {}
    assert read_entry("selsync:delta=0.2:aggregator=trimmed:2") == ("selsync", {"delta": 0.2, "aggregator": "trimmed:2"})
    assert read_entry(" bsp ") == ("bsp", {})


@pytest.mark.parametrize("call, message", [
    (lambda: read_pairs(["window"], "--opt"), "--opt expects key=value, got 'window'"),
    (lambda: read_pairs(["=3"], "--project"), "--project expects key=value, got '=3'"),
    (lambda: read_pairs(["a=1", "a=2"], "--dataset-opt"), "--dataset-opt a is given twice (a=1 and 'a=2'); give it once"),
    (lambda: read_entry("selsync:delta", "--strategy"), "--strategy 'selsync:delta': expected NAME:KEY=VALUE after 'selsync'"),
    (lambda: read_entry("selsync:delta=1:delta=2", "--strategy"),
     "--strategy 'selsync:delta=1:delta=2': delta is given twice (delta=1 and 'delta=2'); give it once"),
])
def test_each_mistake_is_one_line_naming_where_it_was_typed(call, message):
    with pytest.raises(OptionError) as err:
        call()
    assert str(err.value) == message or str(err.value).startswith(message), str(err.value)


@pytest.mark.parametrize("flags, where", [
    (["--opt", "window=2", "--opt", "window=3"], "--opt window is given twice"),
    (["--partition-opt", "alpha=1", "--partition-opt", "alpha=2", "--partition", "dirichlet"],
     "--partition-opt alpha is given twice"),
    (["--dataset-opt", "seed=1", "--dataset-opt", "seed=2", "--dataset", "mnist1d"], "--dataset-opt seed is given twice"),
    (["--project", "network=1gbe", "--project", "network=nvlink"], "--project network is given twice"),
    (["--strategy", "selsync:window=2:window=3"], "--strategy 'selsync:window=2:window=3': window is given twice"),
])
def test_every_key_value_flag_refuses_a_key_given_twice_alike(flags, where, tmp_path, capsys):
    assert cli_main(["train", *flags, "--out", str(tmp_path / "out")]) == 2
    err = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert len(err) == 1 and where in err[0] and "give it once" in err[0], err
    assert not (tmp_path / "out").exists()
