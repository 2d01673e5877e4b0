"""Tiny workflows built once per test session and copied by every test file that starts from them.

:func:`built_once` builds a workflow folder the first time a test asks for it, whichever
pytest-xdist worker asks first (a lock in the session's shared folder; the other worker waits
for it, and the build itself keeps both cores busy). :func:`copy_built` gives a test its own
copy: the files with their modification times (so Snakemake finds every output up to date), its
Snakemake metadata, and its MLflow store pointed at the copy's own artifacts. A template's config
names its data by paths relative to the folder, so a copy's jobs have the same params.

A prepared data folder records its source by absolute path (``resources/*/manifest.json``, the
PLM's record): a copy's records name the copy's own data, with their times kept, so a test may
change its copy's data as a user would change theirs.

:func:`prepared_project` is the template most workflow files start from: the synthetic data and
the tiny BERT of :func:`tests.helpers.make_workflow_data`, prepared by the real rules
(``prepare_corpus``, ``prepare_senteval``, ``resolve_plm``). A file that copies it writes its own
``test.yaml`` with :data:`PREPARED_DATA` as its data and PLM, and its first invocation runs
only its own jobs (the preparation's MLflow runs are in experiment ``cselab-prepared``).

Nobody changes a template. :func:`copy_built` checks it file by file against what the build
left: a changed template fails the test that asks for a copy, naming the test that copied it
last (the one that changed it, through a path that led out of its copy).
"""

from __future__ import annotations

import json
import os
import shutil
import sqlite3
from pathlib import Path
from typing import Callable

from filelock import FileLock

BUILT = ".built.json"  # the template's files (size and modification time) as its build left them
USERS = ".copied-by"  # the tests that copied the template, one per line


def shared_folder(tmp_path_factory) -> Path:
    """The folder every worker of this session sees (the workers' base folders' parent)."""
    base = tmp_path_factory.getbasetemp()
    return base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base


def built_once(tmp_path_factory, name: str, build: Callable[[Path], None]) -> Path:
    """The template folder ``name``, built by ``build(folder)`` once per test session."""
    shared = shared_folder(tmp_path_factory)
    folder = shared / f"built-{name}"
    with FileLock(str(shared / f"built-{name}.lock")):
        if not (folder / BUILT).is_file():
            shutil.rmtree(folder, ignore_errors=True)  # a build that failed half-way
            folder.mkdir(parents=True)
            build(folder)
            (folder / BUILT).write_text(json.dumps(_files(folder)))
    return folder


def copy_built(template: Path, dest: Path) -> Path:
    """A copy of ``template`` at ``dest`` (absent or empty) that a test may change at will."""
    changed = _changed(template)
    users = (template / USERS).read_text().splitlines() if (template / USERS).is_file() else []
    if changed:
        raise AssertionError(f"the built workflow {template.name} changed after its build ({', '.join(changed[:5])}); "
                             f"the last test that copied it: {users[-1] if users else 'none'}")
    with open(template / USERS, "a") as fh:
        fh.write(os.environ.get("PYTEST_CURRENT_TEST", "?").split(" (")[0] + "\n")
    shutil.copytree(template, dest, symlinks=True, ignore=shutil.ignore_patterns(BUILT, USERS), dirs_exist_ok=True)
    _point_mlflow_at(dest, template)
    _point_records_at(dest, template)
    return dest


#: the data and PLM of :func:`prepared_project`, named relative to the project's folder (the corpus
#: capped below its length, so the cap is exercised)
PREPARED_DATA = {"data": {"corpus": {"path": "data/corpus.txt", "max_lines": 200},
                          "senteval": {"path": "data/senteval", "strict_counts": False},
                          "beir": {"path": "data/beir"}},
                 "plms": {"tiny": {"model": "./tiny-bert"}}}
PREPARED_TARGETS = ["resources/corpus/manifest.json", "resources/senteval/manifest.json", "resources/plms/tiny.json",
                    "resources/senteval/reads/sts.json", "resources/senteval/reads/stsb-dev.json"]


def make_prepared_data(folder: Path) -> None:
    """The raw data and tiny BERT that :data:`PREPARED_DATA` names (a BEIR dataset ``toy`` among
    them), under ``folder``."""
    from tests.helpers import make_beir, make_workflow_data

    make_workflow_data(folder, 300)
    make_beir(folder / "data" / "beir" / "toy")


def build_prepared(folder: Path) -> None:
    """:func:`make_prepared_data`, prepared by the real rules in one invocation (the BEIR
    dataset is not prepared)."""
    import yaml

    from tests.test_workflow import snakemake

    make_prepared_data(folder)
    (folder / "test.yaml").write_text(yaml.safe_dump({**PREPARED_DATA, "mlflow": {"experiment_name": "cselab-prepared"}}))
    snakemake(folder, "--cores", "2", "--", *PREPARED_TARGETS)


def prepared_project(tmp_path_factory, dest: Path) -> Path:
    """A copy of the prepared project at ``dest`` (built once per session)."""
    return copy_built(built_once(tmp_path_factory, "prepared", build_prepared), dest)


def _files(folder: Path) -> dict[str, list[int]]:
    return {str(p.relative_to(folder)): [p.stat().st_size, p.stat().st_mtime_ns]
            for p in sorted(folder.rglob("*")) if p.is_file() and p.name not in (BUILT, USERS)}


def _changed(template: Path) -> list[str]:
    before, now = json.loads((template / BUILT).read_text()), _files(template)
    return sorted(k for k in before.keys() | now.keys() if before.get(k) != now.get(k))


def _point_records_at(copy: Path, template: Path) -> None:
    """The copy's prepared-data records (JSON under ``resources/``) name the copy's files, their
    modification times unchanged (Snakemake sees nothing new)."""
    old, new = f"{template.resolve()}/", f"{copy.resolve()}/"
    for path in (copy / "resources").rglob("*.json") if (copy / "resources").is_dir() else ():
        text = path.read_text()
        if old in text:
            st = path.stat()
            path.write_text(text.replace(old, new))
            os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))


def _point_mlflow_at(copy: Path, template: Path) -> None:
    """The copy's MLflow store writes its runs' artifacts under the copy, not the template."""
    db = copy / "results" / "mlflow.db"
    if not db.is_file():
        return
    old, new = template.resolve().as_uri() + "/", copy.resolve().as_uri() + "/"
    with sqlite3.connect(db) as con:
        con.execute("UPDATE experiments SET artifact_location = replace(artifact_location, ?, ?)", (old, new))
        con.execute("UPDATE runs SET artifact_uri = replace(artifact_uri, ?, ?)", (old, new))
