"""Every file lar-prec reads back from disk and acts on is checked as data (issue 21 §1; the list
is docs/security.md): a hostile value in each is a one-line UsageError naming the file, never a
crash, a path outside the folder, or markup in the page."""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from lar_prec.diagnosis.graphinfo import read_graph_info
from lar_prec.diagnosis.local import build_layerwise, read_layerwise
from lar_prec.dumps.algocache import read_algo_cache
from lar_prec.errors import UsageError
from lar_prec.report.html import render_html
from lar_prec.report.model import from_tree, read_json, write_json
from lar_prec.diagnosis.tree import VarTree


@pytest.fixture(scope="module")
def layerwise(manifest, lar_dump, tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("lw")
    build_layerwise(manifest["cnn"].model, lar_dump("cnn", "naive"), out)
    return out


def _tamper(src: Path, tmp_path: Path, change) -> Path:
    d = tmp_path / "lw"
    shutil.copytree(src, d)
    data = json.loads((d / "layerwise.json").read_text())
    text = change(data)
    (d / "layerwise.json").write_text(text if isinstance(text, str) else json.dumps(data))
    return d


@pytest.mark.megengine
def test_a_real_layerwise_record_reads_back(layerwise):
    lw = read_layerwise(layerwise)
    assert lw.feeds and lw.measured


@pytest.mark.megengine
@pytest.mark.parametrize("change,words", [
    (lambda d: d["feeds"][0].__setitem__("name", "../../escaped"), "feed name"),
    (lambda d: d["feeds"][0].__setitem__("name", "/tmp/abs"), "feed name"),
    (lambda d: d["feeds"][0].__setitem__("name", "-x"), "feed name"),
    (lambda d: d["feeds"][0].__setitem__("feed_dtype", "object"), "feed_dtype"),
    (lambda d: d["feeds"][0].__setitem__("shape", ["1; rm"]), "shape"),
    (lambda d: d.pop("feeds"), "KeyError"),
    (lambda d: d.__setitem__("measured", 7), "TypeError"),
    (lambda d: json.dumps(d).replace('"scale": null', '"scale": NaN', 1) if '"scale": null' in json.dumps(d)
     else '{"feeds": NaN}', "NaN"),
])
def test_hostile_layerwise_json_is_refused(layerwise, tmp_path, change, words):
    d = _tamper(layerwise, tmp_path, change)
    with pytest.raises(UsageError) as exc:
        read_layerwise(d)
    assert "layerwise.json" in str(exc.value) and words in str(exc.value)
    assert not (tmp_path.parent / "escaped.npy").exists()


@pytest.mark.parametrize("text", ["", "[]", '{"schema": "nope"}', "{bad"])
def test_hostile_graph_record_is_refused(tmp_path, text):
    p = tmp_path / "graph.json"
    p.write_text(text)
    with pytest.raises(UsageError) as exc:
        read_graph_info(p)
    assert str(p) in str(exc.value)


@pytest.mark.parametrize("data", [b"", b"\x00" * 7, b"not a cache at all", bytes(range(256)) * 4])
def test_hostile_algorithm_cache_is_refused(tmp_path, data):
    p = tmp_path / "algo.cache"
    p.write_bytes(data)
    try:
        read_algo_cache(p)  # an empty cache may be valid: then nothing is refused, nothing crashes
    except UsageError as exc:
        assert str(p) in str(exc)


@pytest.mark.megengine
def test_a_report_json_whose_names_carry_markup_stays_data_in_the_page(lar_dump, tmp_path):
    tree = VarTree.from_folders(lar_dump("cnn", "naive"), lar_dump("cnn", "default"))
    p = tmp_path / "r.json"
    write_json(from_tree(tree, command="compare"), p)
    data = json.loads(p.read_text())
    evil = "</script><script>alert(1)</script>\u2028<!--"
    data["vars"][0]["name"] = evil
    data["verdict"] = evil
    p.write_text(json.dumps(data))
    report = read_json(p)
    html = render_html(report)
    assert "<script>alert(1)" not in html and "</script><script>" not in html
    # the value itself comes back intact from the JSON the page embeds
    assert report.vars[0].name == evil


@pytest.mark.parametrize("text", ["NaN", '{"schema": "lar-prec.report/1"}', "[]", "{"])
def test_hostile_report_json_is_refused(tmp_path, text):
    p = tmp_path / "r.json"
    p.write_text(text)
    with pytest.raises(UsageError):
        read_json(p)
