"""lar-prec compare --pair id|name|auto on real dumps of plain and rewritten graphs."""
from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from lar_prec.cli import cli
from lar_prec.dumps.folder import DumpFolder

pytestmark = pytest.mark.megengine


def compare(tmp_path, a, b, *more, expect=None):
    out = tmp_path / f"r{len(list(tmp_path.iterdir()))}.json"
    res = CliRunner(mix_stderr=False).invoke(cli, ["compare", str(a), str(b), "--json", str(out), *more],
                                             catch_exceptions=False)
    if expect is not None:
        assert res.exit_code == expect, res.stdout + res.stderr
    return json.loads(out.read_text()), res


def b_id(note: str) -> int:
    return int(note.split("B's var ")[1].split(";")[0])


def test_auto_pairs_two_runs_of_one_graph_by_id(lar_dump, tmp_path):
    d, _ = compare(tmp_path, lar_dump("cnn", "naive"), lar_dump("cnn", "default"), "--pair", "auto")
    assert "pairing" not in d  # by id: nothing to list
    assert all(v["status"] != "missing" for v in d["vars"])


@pytest.mark.parametrize("flag", ["--enable-nhwcd4", "--enable-fuse-conv-bias-nonlinearity", "--const-shape"])
def test_auto_pairs_a_rewritten_graph_by_name_with_no_false_pair(lar_dump, tmp_path, flag):
    ref, opt = lar_dump("cnn", "naive"), lar_dump("cnn", "default", flags=(flag,))
    d, res = compare(tmp_path, ref, opt, "--pair", "auto", "--threshold", "1e-4", expect=0)
    assert d["pairing"]["mode"] == "name"
    fb = DumpFolder(opt)
    names_b = {v: fb.var_info(v).name for v in fb.ids}
    for v in d["vars"]:
        assert v["status"] == "ok" and v["max_err"] < 1e-4, v  # every pair agrees by value: none is false
        if "B's var" in (v["note"] or ""):
            assert names_b[b_id(v["note"])] == v["name"]
    computed = {v["name"] for v in d["vars"] if v["opr_type"] not in ("Host2DeviceCopy",)}
    assert {"RELU[0]", "Pooling[1]", "Softmax"} <= computed
    # what has no partner is listed, each side, with the reason
    for side in ("unpaired_a", "unpaired_b"):
        assert all(u["reason"] for u in d["pairing"][side])
    if flag == "--enable-nhwcd4":
        relaid = [v for v in d["vars"] if "relaid out from nhwcd4" in (v["note"] or "")]
        assert {v["name"] for v in relaid} >= {"RELU[0]", "Pooling[0]", "RELU[1]"}
    if flag == "--enable-fuse-conv-bias-nonlinearity":
        assert {u["name"] for u in d["pairing"]["unpaired_a"]} >= {"c1.Convolution", "c2.Convolution"}
    assert "paired by var name" in res.stdout


def test_id_pairing_of_a_rewritten_graph_is_what_the_user_asked(lar_dump, tmp_path):
    ref, opt = lar_dump("cnn", "naive"), lar_dump("cnn", "default", flags=("--enable-nhwcd4",))
    d, _ = compare(tmp_path, ref, opt, "--pair", "id", expect=1)
    assert "pairing" not in d and any(v["status"] != "ok" for v in d["vars"])


def test_roots_are_found_on_the_reference_graph(lar_dump, tmp_path):
    ref, opt = lar_dump("cnn", "naive"), lar_dump("cnn", "default", flags=("--enable-ioc16",))
    # fp16 rounding (~3e-3) is below 1e-2; the pooling's error (~1, or NaN/Inf) is not
    d, _ = compare(tmp_path, ref, opt, "--pair", "name", "--threshold", "1e-2", expect=1)
    fa = DumpFolder(ref)
    pool = next(v for v in fa.ids if fa.var_info(v).name == "Pooling[0]")
    # the default x86 fp16 max pooling is wrong: the first root is that pooling, by A's id
    assert d["roots"][0]["id"] == pool and d["roots"][0]["name"] == "Pooling[0]"
    conv = next(v for v in d["vars"] if v["name"] == "c1.Convolution")
    assert conv["status"] == "ok" and 0 < conv["max_err"] < 1e-2
    assert "Float16 values compared as Float32" in conv["note"]


def test_ambiguous_layout_says_so_and_the_rewritten_model_settles_it(lar_dump, tmp_path):
    ref = lar_dump("cnn", "naive")
    lite = lar_dump("cnn", "default", flags=("--enable-nchw44",))  # lite's pass: no model kept
    d, _ = compare(tmp_path, ref, lite, "--pair", "name")
    amb = [v for v in d["vars"] if v["status"] == "shape_mismatch"]
    assert amb and all("fits nchw4 and nhwcd4" in v["note"] for v in amb)
    # with a graph rewrite the run keeps the model beside the dump: its formats settle it
    # (naive kernels: the default ones segfault under this pair of options on x86)
    graph = lar_dump("cnn", "naive", flags=("--enable-nchw44", "--enable-fuse-conv-bias-nonlinearity"))
    assert (graph.parent / (graph.name + ".rewritten.mge")).is_file()
    d, _ = compare(tmp_path, ref, graph, "--pair", "name", "--threshold", "1e-4", expect=0)
    assert all(v["status"] == "ok" for v in d["vars"])
    assert any("relaid out from nchw4 (format)" in (v["note"] or "") for v in d["vars"])


def test_unknown_pair_mode_is_a_usage_error(lar_dump, tmp_path):
    res = CliRunner(mix_stderr=False).invoke(cli, ["compare", str(lar_dump("cnn", "naive")),
                                                   str(lar_dump("cnn", "default")), "--pair", "names"])
    assert res.exit_code == 2


def _copy_dump(src, dst):
    import shutil

    shutil.copytree(src, dst)
    return dst


def _output_id(folder) -> int:
    """The model's output: the computed var no other dumped var consumes."""
    f = DumpFolder(folder)
    consumed = {u for v in f.ids for u in f.inputs_of(v)}
    outs = [v for v in f.ids if v not in consumed and f.var_info(v).opr_type == "SoftmaxForward"]
    assert len(outs) == 1
    return outs[0]


@pytest.mark.parametrize("damage", ["output_deleted", "half_deleted", "folder_in_place", "output_renamed"])
def test_a_dump_that_lost_vars_is_never_an_all_clear(lar_dump, tmp_path, damage):
    """Issue 20 #8: a deleted output file, half a dump, a folder where a dump file was, or an
    output var renamed: with --pair auto the lost vars count (exit 1), never 'all within'."""
    ref = lar_dump("cnn", "naive")
    b = _copy_dump(lar_dump("cnn", "default"), tmp_path / "b")
    out = _output_id(b)
    path = b / f"{out:06x}"
    if damage == "output_deleted":
        path.unlink()
    elif damage == "half_deleted":
        files = sorted(p for p in b.iterdir())
        for p in files[len(files) // 2:]:
            p.unlink()
    elif damage == "folder_in_place":
        path.unlink()
        path.mkdir()
    else:  # the output's title names another var: B no longer has a var named 'Softmax'
        from lar_prec.dumps.binary import read_binary_dump, write_binary_dump

        d = read_binary_dump(path)
        write_binary_dump(path, d.array(), d.title.replace("name:Softmax,", "name:Softmax_renamed,"), dtype=d.dtype.code)
    d, res = compare(tmp_path, ref, b, "--pair", "auto")
    assert res.exit_code == 1, res.stdout + res.stderr
    assert "all" not in d["verdict"] or "within" not in d["verdict"]
    missing = [v for v in d["vars"] if v["status"] == "missing"]
    assert any(v["id"] == out and v["name"] == "Softmax" for v in missing), missing
    if damage == "folder_in_place":
        assert any("not dumps ignored" in n for n in d["notes"]), d["notes"]


def test_a_58_channel_var_nchw44_padded_to_60_is_compared_not_a_shape_mismatch(lar_dump, tmp_path):
    """Issue 20 #1 on the ShuffleNet-style case: plain against --enable-nchw44 dumps."""
    ref, opt = lar_dump("shufflenet", "naive"), lar_dump("shufflenet", "default", flags=("--enable-nchw44",))
    d, _ = compare(tmp_path, ref, opt, expect=0)
    assert not [v for v in d["vars"] if v["status"] == "shape_mismatch"]
    assert any("nchw_padded" in (v["note"] or "") for v in d["vars"])
