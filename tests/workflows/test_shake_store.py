"""shake's disk bound on real dumps: what is kept, what a view rebuilds, distinct results."""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from lar_prec.dumps.binary import read_binary_dump, write_binary_dump
from lar_prec.dumps.folder import DumpFolder
from lar_prec.workflows.shake.store import PRUNED_JSON, RunStore, var_digest

pytestmark = pytest.mark.megengine


def _run(src: Path, dest: Path, bump: dict) -> Path:
    """A copy of a real dump folder as a run folder's dump, some vars' values changed."""
    dump = dest / "dump"
    shutil.copytree(src, dump)
    folder = DumpFolder(dump)
    for vid, delta in bump.items():
        d = read_binary_dump(folder.files()[vid])
        arr = np.array(d.array(), dtype=np.float32)
        arr.flat[0] += delta
        write_binary_dump(folder.files()[vid], arr, d.title, dtype=d.dtype.code)
    return dump


def test_later_runs_keep_what_differs_once_and_views_rebuild_them(lar_dump, tmp_path):
    src = lar_dump("cnn", "default")
    folder = DumpFolder(src)
    floats = [v for v in folder.ids if folder[v].dtype.name == "Float32" and folder[v].size > 1]
    a, b = floats[-3], floats[-1]
    store = RunStore(tmp_path, keep_all=False)
    store.set_base("r1", _run(src, tmp_path / "r1", {}))
    r2 = store.add("r2", _run(src, tmp_path / "r2", {a: 1.0}))
    r3 = store.add("r3", _run(src, tmp_path / "r3", {a: 1.0, b: 2.0}))
    r4 = store.add("r4", _run(src, tmp_path / "r4", {}))
    # r2 keeps var a; r3 shares a's result with r2 (not kept twice) and keeps b; r4 keeps nothing
    assert set(DumpFolder(r2.dump).files()) == {a}
    assert set(DumpFolder(r3.dump).files()) == {b} and set(r3.same_as) == {a}
    assert DumpFolder(r4.dump).files() == {}
    rec = json.loads((tmp_path / "r3" / PRUNED_JSON).read_text())
    assert rec["kept"] == [b] and rec["same_as"] == {str(a): str(DumpFolder(r2.dump).files()[a])}
    assert len(rec["digests"]) == len(folder.files())
    assert store.differing("r3") == tuple(sorted({a, b})) and store.differing("r4") == ()
    # a view holds every var, with the run's own bytes
    for lbl, bump in (("r2", {a: 1.0}), ("r3", {a: 1.0, b: 2.0}), ("r4", {})):
        view = DumpFolder(store.view(lbl))
        assert set(view.files()) == set(folder.files())
        for vid in view.files():
            want = np.array(folder[vid].array(), dtype=folder[vid].array().dtype)
            if vid in bump:
                want.flat[0] += bump[vid]
            assert np.array_equal(np.asarray(view[vid].array()), want), (lbl, vid)
    groups = store.distinct(["r1", "r2", "r3", "r4"])
    assert groups[a] == [["r1", "r4"], ["r2", "r3"]] and groups[b] == [["r1", "r2", "r4"], ["r3"]]
    assert all(len(g) == 1 for v, g in groups.items() if v not in (a, b))
    store.drop_views()
    assert not (tmp_path / ".views").exists()
    s = store.summary()
    assert s["pruned_runs"] == 3 and s["vars_removed"] == 3 * len(folder.files()) - 2


def test_keep_all_keeps_every_file_and_the_digest_ignores_the_title(lar_dump, tmp_path):
    src = lar_dump("cnn", "default")
    store = RunStore(tmp_path, keep_all=True)
    store.set_base("r1", _run(src, tmp_path / "r1", {}))
    r2 = store.add("r2", _run(src, tmp_path / "r2", {}))
    assert len(DumpFolder(r2.dump).files()) == len(DumpFolder(src).files()) and not r2.removed
    assert not (tmp_path / "r2" / PRUNED_JSON).exists()
    # the same values under another title (another comp node in a thread-count run) are equal
    f = next(iter(DumpFolder(src).files().values()))
    d = read_binary_dump(f)
    write_binary_dump(tmp_path / "retitled", np.asarray(d.array()), d.title.replace("cpu0:0", "multithread4:0"),
                      dtype=d.dtype.code)
    assert var_digest(tmp_path / "retitled") == var_digest(Path(f))
