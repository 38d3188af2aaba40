"""``benchmarks/repeat.py``'s aggregation: numeric leaves only, keys every run has, median
and relative spread."""

from __future__ import annotations

from benchmarks.repeat import flatten, summarise


def test_flatten_keeps_numbers_and_nests_paths() -> None:
    got = flatten({"a": 1, "b": {"c": 2.5, "d": "x", "e": True}, "f": [1]})
    assert got == {"a": 1.0, "b.c": 2.5}


def test_summary_over_runs() -> None:
    runs = [{"ratio": 1.0, "only": 3}, {"ratio": 1.2}, {"ratio": 0.8}]
    (key,) = summarise(runs)
    assert key == "ratio"
    assert summarise(runs)["ratio"] == {"median": 1.0, "min": 0.8, "max": 1.2, "spread": 0.4}
