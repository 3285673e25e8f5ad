"""namepair: the name-pairing rule on real dumps of the plain graph and rewritten graphs.

Values of every pair are checked in tests/lar/test_graphopts.py (all options, all cases); here the
rule itself: computed vars only, the last producer of a repeated name, the [N]-stripped
fallback only where unique on both sides, and a reason for everything left unpaired.
"""
from __future__ import annotations

import dataclasses

import pytest

from lar_prec.dumps.folder import DumpFolder
from lar_prec.compare.namepair import pair_by_name, skip_reason, strip_index

pytestmark = pytest.mark.megengine


def vars_of(path):
    return [d.var for d in DumpFolder(path)]


def test_same_graph_pairs_every_computed_var_by_its_own_id(lar_dump):
    a = vars_of(lar_dump("cnn", "naive"))
    b = vars_of(lar_dump("cnn", "default"))
    p = pair_by_name(a, b)
    assert p.paired_fraction == 1.0 and not p.unpaired_b
    assert all(x.a == x.b and x.how == "name" for x in p.pairs)
    # inputs and constants do not take part, each with its reason
    kinds = {s.reason.split(" (")[0] for s in p.skipped_a}
    assert kinds == {"model input", "constant"}
    assert {s.id for s in p.skipped_a} | {x.a for x in p.pairs} == {v.id for v in a}


def test_fused_vars_are_unpaired_with_a_reason(lar_dump):
    a = vars_of(lar_dump("cnn", "default"))
    b = vars_of(lar_dump("cnn", "default", flags=("--enable-fuse-conv-bias-nonlinearity",)))
    p = pair_by_name(a, b)
    # the fused ConvBias takes the name of the last var it replaces (the RELU)
    assert {u.name for u in p.unpaired_a} == {"c1.Convolution", "c2.Convolution"}
    assert all("no computed var named" in u.reason for u in p.unpaired_a)
    by_name = {x.name_a: x for x in p.pairs}
    assert by_name["RELU[0]"].a != by_name["RELU[0]"].b  # ids moved, names stayed
    assert 0.5 < p.paired_fraction < 1.0


def test_repeated_name_pairs_its_last_producer(lar_dump):
    a = vars_of(lar_dump("cnn", "default"))
    b = vars_of(lar_dump("cnn", "default", flags=("--enable-ioc16",)))
    p = pair_by_name(a, b)
    softmax_b = [v for v in b if v.name == "Softmax"]
    assert [v.opr_type for v in softmax_b] == ["SoftmaxForward", "TypeCvt"]  # fp16 out, then back to fp32
    pair = next(x for x in p.pairs if x.name_a == "Softmax")
    assert pair.b == softmax_b[-1].id
    assert any(u.id == softmax_b[0].id and u.reason.startswith("name repeated") for u in p.unpaired_b)
    # the fp16 copy of the input is computed (a TypeCvt named like the input): unpaired, with a reason
    assert any(u.name == "data" for u in p.unpaired_b)


def test_index_stripped_fallback_only_where_unique(lar_dump):
    a = vars_of(lar_dump("cnn", "default"))
    renamed = {"Softmax": "Softmax[3]", "RELU[0]": "RELU[7]"}
    b = [dataclasses.replace(v, name=renamed.get(v.name, v.name)) for v in a]
    p = pair_by_name(a, b)
    soft = next(x for x in p.pairs if x.name_a == "Softmax")
    assert (soft.name_b, soft.how) == ("Softmax[3]", "stripped")
    # RELU[0] -> RELU[7]: "RELU" is not unique (RELU[1] too), so no guess is made
    assert any(u.name == "RELU[0]" and "not unique" in u.reason for u in p.unpaired_a)
    assert any(u.name == "RELU[7]" for u in p.unpaired_b)
    assert strip_index("blocks.0.RELU[12]") == "blocks.0.RELU" and strip_index("fc.ADD") == "fc.ADD"


def test_lite_route_constants_are_skipped(lar_dump):
    b = vars_of(lar_dump("cnn", "default", flags=("--enable-nchw44",)))
    consts = [v for v in b if v.opr_type not in ("ImmutableTensor", "Host2DeviceCopy") and v.value_infer == 2]
    assert consts, "weight relayouts computed at compile time (value infer type 2)"
    assert all(skip_reason(v).startswith("constant") for v in consts)
