"""tests/built.py: a workflow built once per session, copied by the tests that start from it."""

import sqlite3

import pytest

from tests.built import built_once, copy_built


def test_a_changed_template_fails_the_next_copy_naming_the_last_copier(tmp_path_factory, tmp_path):
    calls = []

    def build(folder):
        calls.append(folder)
        (folder / "results").mkdir()
        (folder / "results" / "table.csv").write_text("a,b\n1,2\n")
        with sqlite3.connect(folder / "results" / "mlflow.db") as con:
            con.execute("CREATE TABLE experiments (artifact_location TEXT)")
            con.execute("CREATE TABLE runs (artifact_uri TEXT)")
            uri = (folder / "results" / "mlartifacts").resolve().as_uri()
            con.execute("INSERT INTO experiments VALUES (?)", (uri,))
            con.execute("INSERT INTO runs VALUES (?)", (uri + "/1/abc/artifacts",))

    template = built_once(tmp_path_factory, "test-built", build)
    assert built_once(tmp_path_factory, "test-built", build) == template and len(calls) == 1  # built once
    copy = copy_built(template, tmp_path / "a")
    assert (copy / "results" / "table.csv").stat().st_mtime_ns == (template / "results" / "table.csv").stat().st_mtime_ns
    with sqlite3.connect(copy / "results" / "mlflow.db") as con:  # the copy's runs keep their artifacts in the copy
        assert con.execute("SELECT artifact_location FROM experiments").fetchone()[0] == (
            (copy / "results" / "mlartifacts").resolve().as_uri())
        assert con.execute("SELECT artifact_uri FROM runs").fetchone()[0].startswith(copy.resolve().as_uri() + "/")
    (template / "results" / "table.csv").write_text("changed\n")  # what a path leading out of a copy would do
    with pytest.raises(AssertionError, match="changed after its build .*results/table.csv.*the last test that "
                                             "copied it: tests/test_built.py::test_a_changed_template"):
        copy_built(template, tmp_path / "b")
