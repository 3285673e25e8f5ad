"""Dump-only roots across two graphs whose operators one side fused away (lar_prec.compare.fused).

Under a layout option MegEngine computes a convolution, its bias and the residual add inside one
ConvBias whose output takes the RELU's name: paired by name, that RELU carries the convolution's
rounding while its own inputs have no partner. Real runs of ResNet-18 (K up to 2304)."""
from __future__ import annotations

from pathlib import Path

import pytest

from compare_helpers import inject_fault
from lar_prec.compare.folders import compare_folders
from lar_prec.compare.fused import through_unpaired
from lar_prec.diagnosis.tree import VarTree
from lar_prec.dumps.folder import DumpFolder


def _tree(a: Path, b: Path) -> VarTree:
    c = compare_folders(a, b, pairing="auto")
    return VarTree(c.diffs, comparison=c)


@pytest.fixture(scope="module")
def resnet18_nchw44(lar_dump):
    return Path(lar_dump("resnet18", "naive")), Path(lar_dump("resnet18", "default", flags=("--enable-nchw44",)))


@pytest.mark.megengine
def test_a_relu_after_a_fused_away_convolution_is_not_a_root(resnet18_nchw44):
    naive, nchw44 = resnet18_nchw44
    c = compare_folders(naive, nchw44, pairing="auto")
    through = through_unpaired(c.diffs, DumpFolder(naive))
    # the structure this is about: paired vars whose inputs the other side fused away, sums among them
    assert any(t.reducing for t in through.values()), sorted(through)
    t = VarTree(c.diffs, comparison=c)
    assert not t.diverged and t.root_ids() == (), (t.root_ids(), t.threshold.reason)


@pytest.mark.megengine
def test_a_fault_born_in_a_fused_operator_is_its_root(resnet18_nchw44, tmp_path):
    naive, nchw44 = resnet18_nchw44
    fb = DumpFolder(nchw44)
    c = compare_folders(naive, nchw44, pairing="auto")
    through = through_unpaired(c.diffs, DumpFolder(naive))
    a_id = {d.id: d.name for d in c.diffs}
    judged = [v for v, t in through.items() if t.reducing]
    for victim in (judged[0], judged[len(judged) // 2]):
        name = a_id[victim]
        b_var = next(v for v in fb.ids if fb.var_info(v).name == name)
        out = tmp_path / f"f{victim}"
        inject_fault(nchw44, out, b_var, 1e-4)
        got = _tree(naive, out)
        assert got.root_ids()[:1] == (victim,), (name, got.root_ids(), got.threshold.reason)
