"""Records and exit files are written whole or not at all (clusters/backends/supervisor.py)."""

from __future__ import annotations

from clusters.backends.supervisor import write_atomically


def test_a_file_is_replaced_whole_and_no_temporary_file_is_left(tmp_path):
    path = tmp_path / "record.json"
    path.write_text("old")
    write_atomically(path, "new")
    assert path.read_text() == "new"
    assert [p.name for p in tmp_path.iterdir()] == ["record.json"]


def test_a_file_that_is_not_there_yet_is_created(tmp_path):
    write_atomically(tmp_path / "exit", "0\n")
    assert (tmp_path / "exit").read_text() == "0\n"
