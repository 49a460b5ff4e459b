"""CounterFiles on plain files: what is kept open, the bound, and what reads as absent
(the real cgroup files, removal included, are tests/system/test_cgroup_runtime.py's)."""

from __future__ import annotations

from pathlib import Path

from tcluster.agent.runtime.counterfiles import CHUNK, CounterFiles


def test_reads_fresh_text_through_kept_files_and_closes_them_on_forget(tmp_path: Path) -> None:
    a, b = tmp_path / "a", tmp_path / "b"
    a.write_text("1\n")
    b.write_text("x " * CHUNK)          # longer than one pread
    files = CounterFiles(most_open=10)
    paths = [("a", str(a)), ("b", str(b)), ("gone", str(tmp_path / "gone"))]
    assert files.read("k", paths) == {"a": "1\n", "b": "x " * CHUNK}
    assert files.open_count() == 2
    with open(a, "r+") as f:            # rewritten in place: the kept descriptor sees it
        f.write("2\n")
    assert files.read("k", paths)["a"] == "2\n"
    assert files.open_count() == 2
    files.forget("k")
    assert files.open_count() == 0


def test_past_the_bound_a_read_opens_and_closes(tmp_path: Path) -> None:
    paths = []
    for i in range(3):
        (tmp_path / str(i)).write_text(str(i))
        paths.append((str(i), str(tmp_path / str(i))))
    files = CounterFiles(most_open=2)
    assert files.read("k", paths) == {"0": "0", "1": "1", "2": "2"}
    assert files.open_count() == 2
    files.close()
    assert files.open_count() == 0


# ---- flat_values: parse_flat_keyed restricted to some keys ----

from hypothesis import given, strategies as st  # noqa: E402

from tcluster.agent.runtime.cgfs import flat_values, parse_flat_keyed  # noqa: E402

_WORDS = st.sampled_from(["rss", "total_rss", "cache", "file", "inactive_file", "total_inactive_file", "max",
                          "oom_kill", "user", "system", "x"])


@given(st.dictionaries(_WORDS, st.one_of(st.integers(-5, 10**12), st.sampled_from(["max", "", "1 2"]))),
       st.lists(_WORDS, unique=True, max_size=4), st.booleans())
def test_flat_values_agree_with_parsing_every_line(lines: dict[str, object], keys: list[str], last_newline: bool) -> None:
    text = "\n".join(f"{k} {v}" for k, v in lines.items()) + ("\n" if last_newline else "")
    whole = parse_flat_keyed(text)
    assert flat_values(text, tuple(keys)) == {k: whole[k] for k in keys if k in whole}


def test_flat_values_name_whole_words() -> None:
    assert flat_values("total_rss 9\nrss 4\ncache 1", ("rss", "cache", "swap")) == {"rss": 4, "cache": 1}
