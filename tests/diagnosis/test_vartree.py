"""Tests of lar_prec.vartree: roots on hand-built graphs, queries, JSON, faults injected
into real dumps, and compatibility with MegEngine's accuracy_shake_var_tree."""
from __future__ import annotations

import dataclasses
import json
import math
import re
import subprocess
import sys
from pathlib import Path

import networkx as nx
import numpy as np
import pytest
from click.testing import CliRunner

from compare_helpers import FLOAT32_CASES, GraphDump, computed_float_vars, downstream, inject_fault, pick_spread
from lar_prec.cli import cli as main_cli
from lar_prec.compare.records import VarDiff
from lar_prec.dumps.folder import DumpFolder
from lar_prec.report.terminal import render_csv, render_table
from lar_prec.report.model import from_tree
from lar_prec.diagnosis.tree import Root, VarTree
from lar_prec.report.records import ReportRoot, root_from_tree
from lar_prec.diagnosis.megcompat import parse, read_megengine_diff, tree_from_megengine_diff, varNode

PY = sys.executable


def vd(i: int, status: str = "ok", inputs=(), max_err=None, opr=None, opr_type: str = "Elemwise") -> VarDiff:
    if max_err is None:
        max_err = {"ok": 1e-7, "divergent": 1e-3}.get(status)
    return VarDiff(id=i, name=f"v{i}", opr=opr if opr is not None else f"opr{i}[{i - 1}]", opr_type=opr_type,
                   dtype="Float32", shape=(2,), inputs=tuple(inputs), status=status, max_err=max_err)


def roots(*diffs: VarDiff) -> list:
    return [r.id for r in VarTree(list(diffs)).roots()]


# ============================================================================ hand-built graphs


def test_chain():
    t = VarTree([vd(1, opr_type="Host2DeviceCopy", max_err=0.0), vd(2, inputs=[1], max_err=2e-7),
                 vd(3, "divergent", [2], 1e-3), vd(4, "divergent", [3], 2e-3)])
    (r,) = t.roots()
    assert r.id == 3 and r.input_max_err == 2e-7 and r.worst_input == 2
    assert r.amplification == pytest.approx(1e-3 / 2e-7)
    assert t.diverged


def test_diamond():
    base = [vd(1, max_err=0.0), vd(2, "divergent", [1]), vd(3, inputs=[1]), vd(4, "divergent", [2, 3])]
    assert roots(*base) == [2]
    both = [vd(1), vd(2, "divergent", [1]), vd(3, "divergent", [1]), vd(4, "divergent", [2, 3])]
    assert roots(*both) == [2, 3]
    top = [vd(1, "divergent"), vd(2, "divergent", [1]), vd(3, "divergent", [1]), vd(4, "divergent", [2, 3])]
    assert roots(*top) == [1]  # a var without inputs can be a root


def test_fan_in():
    t = VarTree([vd(1, max_err=1e-7), vd(2, max_err=3e-7), vd(3, max_err=0.0), vd(4, "divergent", [1, 2, 3], 6e-4)])
    (r,) = t.roots()
    assert (r.id, r.input_max_err, r.worst_input) == (4, 3e-7, 2)


def test_two_independent_roots_in_execution_order():
    diffs = [vd(1), vd(5, inputs=[1]), vd(2, "divergent", [5]), vd(3, inputs=[1]), vd(4, "divergent", [3]), vd(6, "divergent", [2, 4])]
    assert roots(*diffs) == [2, 4]
    # a consumer with a smaller id than its producer changes nothing
    assert roots(vd(9), vd(3, "divergent", [9]), vd(2, "divergent", [3])) == [3]


def test_outputs_of_one_operator_rank_by_amplification():
    op = "layer_norm(x)[20]"
    diffs = [vd(1, max_err=1e-6), vd(21, "divergent", [1], 2e-3, opr=op), vd(22, "divergent", [1], 5e-3, opr=op),
             vd(23, "divergent", [1], 1e-4, opr=op)]
    t = VarTree(diffs)
    assert [r.id for r in t.roots()] == [22, 21, 23]
    assert {r.order for r in t.roots()} == {1}


def test_equal_inputs_give_infinite_amplification():
    (r,) = VarTree([vd(1, max_err=0.0), vd(2, "divergent", [1], 1e-2)]).roots()
    assert math.isinf(r.amplification)
    (r,) = VarTree([vd(2, "divergent", [], 1e-2)]).roots()
    assert r.amplification is None and r.input_max_err is None


def test_missing_inputs_do_not_block_and_rank_last():
    diffs = [vd(1), vd(2, "missing", [1], max_err=None), vd(3, "divergent", [2]), vd(4, "ok", [3])]
    t = VarTree(diffs)
    assert [r.id for r in t.roots()] == [3, 2]
    assert t.roots()[1].status == "missing"
    # a var known only as an input (never dumped) is unknown, not blocking
    t2 = VarTree([vd(5, "divergent", [77])])
    assert [r.id for r in t2.roots()] == [5]
    n = t2.node(77)
    assert n.status == "missing" and "known only as an input" in n.note
    assert not t2.is_compared(77)


def test_structural_statuses_are_roots():
    diffs = [vd(1), vd(2, "shape_mismatch", [1], max_err=None), vd(3, "divergent", [2]), vd(4, "dtype_mismatch", [1], max_err=0.0)]
    assert roots(*diffs) == [2, 4]


def test_no_roots_when_everything_agrees():
    t = VarTree([vd(1), vd(2, inputs=[1])])
    assert t.roots() == () and not t.diverged


def test_an_input_listed_twice_or_itself_roots_as_once():
    # an operator reading one var twice (x * x), and a record naming itself among its inputs:
    # rooting reads the records' inputs and must agree with the adjacency the queries use
    diffs = [vd(1, max_err=2e-7), vd(2, "divergent", [1, 1], 4e-3), vd(3, "divergent", [3, 2]), vd(4, "divergent", [4])]
    lazy = VarTree(diffs).roots()
    built = VarTree(diffs)
    assert built.inputs(2) == (1,) and built.inputs(3) == (2,) and built.inputs(4) == ()
    assert built.roots() == lazy
    assert [(r.id, r.input_max_err, r.worst_input) for r in lazy] == [(2, 2e-7, 1), (4, None, None)]
    assert lazy[0].amplification == pytest.approx(4e-3 / 2e-7)


def test_roots_are_the_records_their_classes_make():
    # Root and ReportRoot are made without their __init__ (frozen_record): every field there
    t = VarTree([vd(1, max_err=0.0), vd(2, "divergent", [1]), vd(3, "nonfinite", [2]), vd(4, "divergent")])
    for r in t.roots():
        assert set(r.__dict__) == {f.name for f in dataclasses.fields(Root)}
        assert r == Root(**r.__dict__)
        rr = root_from_tree(r, (1, r.id))
        assert set(rr.__dict__) == {f.name for f in dataclasses.fields(ReportRoot)}
        assert rr == ReportRoot(**rr.__dict__)


def test_queries():
    diffs = [vd(1, opr_type="Host2DeviceCopy"), vd(2, opr_type="ImmutableTensor"), vd(3, inputs=[1, 2]),
             vd(4, inputs=[3]), vd(5, inputs=[3, 2]), vd(6, "divergent", [4, 5])]
    t = VarTree(diffs)
    assert t.inputs(5) == (3, 2)  # input order, not id order
    assert t.consumers(3) == (4, 5)
    assert t.ancestors(6) == (1, 2, 3, 4, 5)
    assert t.descendants(2) == (3, 4, 5, 6)
    assert t.path(6) == [1, 3, 4, 6]  # starts at the model input, not the constant
    assert t.path(6, source=2) == [2, 5, 6]
    with pytest.raises(KeyError, match="does not depend"):
        t.path(1, source=6)
    sub = t.subgraph(6, radius=1)
    assert set(sub.nodes) == {4, 5, 6} and isinstance(sub, nx.DiGraph)
    assert set(t.subgraph(6, radius=2).nodes) == {2, 3, 4, 5, 6}
    assert t.node(4).id == 4
    with pytest.raises(KeyError, match="nearest ids"):
        t.node(99)
    assert t.path(1) == [1]


def test_the_path_to_a_root_10000_vars_deep_is_the_whole_chain():
    """Issue 41 #9: the path to each root was found in time quadratic in its depth (every
    ancestor's whole path kept: 13 s and hundreds of MB for a 10,000-var chain in compare);
    one search from the model inputs now serves every root's path, whatever the depth."""
    n = 10_000
    t = VarTree([vd(1, opr_type="Host2DeviceCopy")] + [vd(v, "divergent" if v == n else "ok", [v - 1])
                                                        for v in range(2, n + 1)])
    assert t.root_ids() == (n,)
    assert t.path(n) == list(range(1, n + 1))
    assert t.path(n // 2) == list(range(1, n // 2 + 1))
    assert t.path(n, source=n // 2) == list(range(n // 2, n + 1))
    assert from_tree(t).roots[0].path == tuple(range(1, n + 1))


def test_a_path_starts_at_the_nearest_model_input_the_first_in_execution_order_of_equals():
    diffs = [vd(1, opr_type="Host2DeviceCopy"), vd(2, opr_type="Host2DeviceCopy"), vd(3, inputs=[1]),
             vd(4, inputs=[3, 2]), vd(5, inputs=[2]), vd(6, inputs=[5, 3]), vd(7, opr_type="ImmutableTensor"),
             vd(8, inputs=[7]), vd(9, inputs=[8])]
    t = VarTree(diffs)
    assert t.path(4) == [2, 4]  # the nearer input, though the later one
    assert t.path(6) == [1, 3, 6]  # equally near: the first in execution order
    assert t.path(9) == [7, 8, 9]  # no model input above it: the nearest constant
    assert t.path(2) == [2] and t.path(7) == [7]


def test_nan_born_from_finite_inputs(tmp_path):
    ga, gb = GraphDump(tmp_path / "a"), GraphDump(tmp_path / "b")
    x = np.array([1.0, -1.0, 4.0], np.float32)
    for g in (ga, gb):
        g.add(3, x, opr_type="Host2DeviceCopy")
    same_nan = np.array([np.nan, 2.0, 3.0], np.float32)
    ga.add(5, same_nan, inputs=[3])  # NaN at the same place on both sides: not a difference
    gb.add(5, same_nan, inputs=[3])
    ga.add(7, np.log(np.abs(x)), inputs=[5])
    born = np.log(np.abs(x))
    born[1] = np.nan  # NaN appears in B from inputs that agree
    gb.add(7, born, inputs=[5])
    ga.add(9, np.ones(3, np.float32), inputs=[7])
    gb.add(9, np.full(3, np.nan, np.float32), inputs=[7])
    t = VarTree.from_folders(ga.folder, gb.folder)
    assert t.node(5).status == "ok"
    assert t.node(7).status == "nonfinite" and t.node(9).status == "nonfinite"
    assert t.root_ids() == (7,)


def test_text_dump_adds_edges(tmp_path):
    td = tmp_path / "t.txt"
    td.write_text("")  # an empty text dump adds nothing
    t = VarTree([vd(1), vd(2, "divergent", [1])], text_dump=td)
    assert t.graph.number_of_edges() == 1


# ============================================================================ JSON and text


def test_report_json_follows_design(tmp_path):
    ga, gb = GraphDump(tmp_path / "a"), GraphDump(tmp_path / "b")
    x = np.ones(4, np.float32)
    ga.add(3, x)
    gb.add(3, x)
    ga.add(5, x, inputs=[3])
    y = x.copy()
    y[0] = np.inf
    gb.add(5, y, inputs=[3])
    ga.add(7, x, inputs=[5])
    gb.add(7, x * 1.5, inputs=[5])
    t = VarTree.from_folders(ga.folder, gb.folder)
    obj = from_tree(t, command="compare").to_json()
    text = json.dumps(obj, allow_nan=False)  # no NaN/Infinity may leak
    back = json.loads(text)
    assert back["schema"] == "lar-prec.report/1" and back["command"] == "compare"
    assert set(back["threshold"]) >= {"value", "mode", "metric"} and back["threshold"]["metric"] == "megengine_rel"
    assert back["threshold"]["mode"] == "auto" and isinstance(back["threshold"]["value"], float)
    for v in back["vars"]:
        assert set(v) >= {"id", "name", "opr", "opr_type", "dtype", "shape", "inputs", "status", "max_err", "max_abs_err", "cosine"}
        assert v["status"] in ("ok", "divergent", "nonfinite", "shape_mismatch", "dtype_mismatch", "missing")
    assert [v["id"] for v in back["vars"]] == [3, 5, 7]
    assert [r["id"] for r in back["roots"]] == [5]
    assert set(back["roots"][0]) >= {"id", "name", "opr", "opr_type", "max_err", "input_max_err"}
    assert back["runs"] == []
    assert "7" in render_table(t) and render_csv(t).count("\n") == 4


# ============================================================================ compare_binary_iodump text


def _mge(args, cwd=None) -> subprocess.CompletedProcess:
    return subprocess.run([PY, "-m", *args], capture_output=True, text=True, timeout=300, cwd=cwd)


def _their_roots(diff_txt: Path) -> subprocess.CompletedProcess:
    return _mge(["megengine.tools.accuracy_shake_var_tree", str(diff_txt)])


def _root_ids(stdout: str) -> list:
    return [int(m) for m in re.findall(r"^id:(\d+)$", stdout, flags=re.M)]


def _diff_txt(a: Path, b: Path, out: Path, e: float) -> Path:
    p = _mge(["megengine.tools.compare_binary_iodump", str(a), str(b), "-e", repr(e)])
    out.write_text(p.stdout)
    return out


@pytest.mark.megengine
def test_not_finite_shape_mismatch_and_any_order(tmp_path):
    """Entries the original tree ignores or crashes on: here they count and work."""
    ga, gb = GraphDump(tmp_path / "a"), GraphDump(tmp_path / "b")
    x = np.ones((2, 2), np.float32)
    for g in (ga, gb):
        g.add(30, x, opr_type="Host2DeviceCopy")
    ga.add(4, x, inputs=[30])  # consumer id below its producer: printed first
    gb.add(4, x * 2, inputs=[30])
    ga.add(5, x, inputs=[4])
    gb.add(5, x * 3, inputs=[4])
    ga.add(40, x, inputs=[30])
    gb.add(40, np.full((2, 2), np.nan, np.float32), inputs=[30])
    ga.add(41, x, inputs=[30])
    gb.add(41, np.ones((4,), np.float32), inputs=[30])
    diff = _diff_txt(ga.folder, gb.folder, tmp_path / "diff.txt", 1e-3)
    text = diff.read_text()
    assert "not finite" in text and "shape mismatch" in text and "not equal" in text
    tree, md = tree_from_megengine_diff(diff)
    assert [e.kind for e in md.entries].count("not equal") == 2
    assert tree.root_ids() == (4, 40, 41)
    assert tree.node(40).status == "nonfinite" and tree.node(41).status == "shape_mismatch"
    their = _their_roots(diff)
    assert _root_ids(their.stdout) == [4]  # it misses the NaN and the shape origin
    got = parse(diff)
    assert list(got) == ["id:4", "id:40", "id:41"]
    assert varNode.get_varNode("id::5").get_dependence_list()[0] is varNode.get_varNode(4)
    assert varNode.get_varNode("id:4").get_reference_list() == [varNode.get_varNode("id:5")]
    assert all(varNode.get_varNode(k).src_info for k in ("id:4", "id:5", "id:40", "id:41"))
    assert varNode.get_varNode("id:30").src_info == ""  # known only as a dependence
    with pytest.raises(KeyError, match="id:99"):
        varNode.get_varNode("id:99")


@pytest.fixture(scope="module")
def real_pairs(lar_dump):
    return {case: (Path(lar_dump(case, "naive")), Path(lar_dump(case, "default"))) for case in FLOAT32_CASES}


@pytest.mark.megengine
@pytest.mark.parametrize("case", FLOAT32_CASES)
def test_injected_fault_is_the_one_root(real_pairs, tmp_path, case):
    """A relative fault born in one var and carried downstream: that var is the one root."""
    naive, default = real_pairs[case]
    assert not VarTree.from_folders(naive, default).diverged
    victims = pick_spread(computed_float_vars(DumpFolder(default)), 3)
    for victim in victims:
        for rel in (1e-2, 1e-4, 1e-5):
            faulty = tmp_path / f"f{victim}_{rel}"
            changed = inject_fault(default, faulty, victim, rel)
            t = VarTree.from_folders(naive, faulty)
            assert t.root_ids() == (victim,), f"{case} var {victim} x(1+{rel}): roots {t.root_ids()} ({t.threshold.reason})"
            (r,) = t.roots()
            assert r.amplification is None or r.amplification > 3
            assert {d.id for d in t.diffs if d.status == "divergent"} <= changed


@pytest.mark.megengine
def test_several_faults_give_several_roots(real_pairs, tmp_path):
    naive, default = real_pairs["multi_input"]  # two branches (image conv, meta matmul) joined by a concat
    folder = DumpFolder(default)
    ids = computed_float_vars(folder)
    first = ids[0]
    later = next(v for v in ids if v not in downstream(folder, first))  # on the other branch
    inject_fault(default, tmp_path / "f1", first, 1e-2)
    inject_fault(tmp_path / "f1", tmp_path / "f2", later, 1e-4)
    assert VarTree.from_folders(naive, tmp_path / "f2").root_ids() == (first, later)


@pytest.mark.megengine
@pytest.mark.parametrize("case", ["cnn", "mlp", "attention", "resnet"])
def test_same_roots_as_accuracy_shake_var_tree(real_pairs, tmp_path, case):
    naive, default = real_pairs[case]
    victim = pick_spread(computed_float_vars(DumpFolder(default)), 3)[1]
    inject_fault(default, tmp_path / "faulty", victim, 1e-2)
    diff = _diff_txt(naive, tmp_path / "faulty", tmp_path / "diff.txt", 1e-3)
    their = _their_roots(diff)
    assert their.returncode == 0, their.stderr[-1500:]
    theirs = _root_ids(their.stdout)
    tree, _ = tree_from_megengine_diff(diff)
    assert list(tree.root_ids()) == theirs
    assert victim in theirs
    assert [int(k.split(":")[1]) for k in parse(diff)] == theirs
    cli = CliRunner(mix_stderr=False).invoke(main_cli, ["tree", str(diff), "--json", "-"])
    assert cli.exit_code == 1
    assert [r["id"] for r in json.loads(cli.stdout)["roots"]] == theirs
    # lar-prec's own comparison of the same folders agrees
    assert VarTree.from_folders(naive, tmp_path / "faulty").root_ids() == (victim,)


@pytest.mark.megengine
def test_input_dumps_crash_their_tree_not_ours(lar_dump, tmp_path):
    naive = Path(lar_dump("cnn", "naive", env={"MGB_DUMP_INPUT": "1"}))
    default = Path(lar_dump("cnn", "default", env={"MGB_DUMP_INPUT": "1"}))
    diff = _diff_txt(naive, default, tmp_path / "diff.txt", 1e-7)
    assert "-inp" in diff.read_text()
    their = _their_roots(diff)
    assert their.returncode != 0 and "TypeError" in their.stderr
    tree, md = tree_from_megengine_diff(diff)
    assert any(e.input_index is not None for e in md.entries)
    # the same roots as lar-prec's own comparison at the same fixed threshold
    assert tree.root_ids() == VarTree.from_folders(naive, default, threshold=1e-7).root_ids()
    assert tree.root_ids()


def test_show_src_info_prints_titles_and_message(tmp_path, capsys):
    a = "var={id:5, shape:{2}, Float32, owner:x[4]{Elemwise}, name:x, slot:0, cpu0, s, 4, 1} owner_opr_inputs={id:3, shape:{2}, Float32, owner:h2d[2]{Host2DeviceCopy}, name:data, slot:0, cpu0, s, 4, 4}"
    text = f"d/000005: \n{a}\n{a}\n not equal: shape=(2,) nonequal_idx=(1,) v0=1.0 v1=2.0 err=0.5\n"
    p = tmp_path / "diff.txt"
    p.write_text(text)
    roots = parse(p)
    assert list(roots) == ["id:5"]
    roots["id:5"].show_src_info()
    out = capsys.readouterr().out
    assert out.count("var={id:5,") == 2 and "not equal: shape=(2,)" in out
    assert [n.id for n in roots["id:5"].get_dependence_list()] == ["id:3"]


def test_read_megengine_diff_tolerates_noise_and_traceback(tmp_path):
    p = tmp_path / "d.txt"
    p.write_text("")
    assert read_megengine_diff(p).entries == ()
    p.write_text("debug: failed to load cuda func\nTraceback (most recent call last):\n  File \"x\", line 1\nKeyError: 12\n")
    md = read_megengine_diff(p)
    assert md.entries == () and md.crashed == "KeyError: 12"


@pytest.mark.megengine
def test_wrapped_titles_with_awkward_names(tmp_path):
    """Names with spaces, braces, 'id:' and 100-character words survive the 70-column wrap."""
    ga, gb = GraphDump(tmp_path / "a"), GraphDump(tmp_path / "b")
    x = np.ones(6, np.float32)
    long = "backbone.stage4.block3.attention.query_key_value_projection_weight_" + "x" * 40
    for g in (ga, gb):
        g.add(3, x, opr_type="Host2DeviceCopy", name="data {grid:9, id:77}")
    ga.add(5, x, inputs=[3], name=long)
    gb.add(5, x * 3, inputs=[3], name=long)
    ga.add(8, x, inputs=[5, 3], name="a-b c-d, e {f}")
    gb.add(8, x * 2, inputs=[5, 3], name="a-b c-d, e {f}")
    diff = _diff_txt(ga.folder, gb.folder, tmp_path / "diff.txt", 1e-3)
    tree, md = tree_from_megengine_diff(diff)
    assert [(e.var_id, e.inputs) for e in md.entries] == [(5, (3,)), (8, (5, 3))]
    assert tree.root_ids() == (5,)
    assert tree.inputs(8) == (5, 3)
