"""Which algorithm fast-run ran, read from its real algorithm cache, and the noise floors
that follow from it: a Winograd convolution rounds more than a direct one (issue 14's "no
false alarm on clean fast-run pairs").

Which algorithm fast-run picks depends on timing and on the CPU, so the Winograd tests do not
wait for fast-run to pick it: they reorder a real cache (``prefer_algorithms``) so that each
convolution's Winograd candidate comes first, which a run reading the cache then takes.
"""
from __future__ import annotations


import pytest

from conftest import run_lar
from lar_prec.dumps.algocache import chosen_algorithms, prefer_algorithms, read_algo_cache, winograd_tile
from lar_prec.errors import UsageError
from lar_prec.diagnosis.floors import algorithm_factor
from lar_prec.diagnosis.local import build_layerwise, local_errors, scale_constant
from lar_prec.diagnosis.floors import local_roots, noise_floors
from lar_prec.run.config import get_config

CASE = "fastrun_shake"


@pytest.fixture(scope="module")
def fast_run(manifest, tmp_path_factory):
    """A real --fast-run run of fastrun_shake with its algorithm cache, and its layerwise model."""
    base = tmp_path_factory.mktemp("algocache")
    case = manifest[CASE]
    cache = base / "algo.cache"
    run_lar(case.model, case.input_specs(), base / "test", flags=("--fast-run", "--fast-run-algo-policy", str(cache)))
    return case, cache, base


def test_every_convolution_of_a_real_cache_is_matched_to_the_algorithm_it_ran(fast_run, lar_dump):
    case, cache, base = fast_run
    entries = read_algo_cache(cache)
    assert entries and all(e.results for e in entries)
    for e in entries:  # fastest first: what a run reading the cache takes
        times = [r.seconds for r in e.results if r.seconds is not None]
        assert times == sorted(times) and e.chosen() is e.results[0]
    lw = build_layerwise(case.model, lar_dump(CASE, "naive"), base / "lw")
    convs = [m for m in lw.measured if m.opr_type == "ConvolutionForward"]
    got = chosen_algorithms(entries, [(m.id, m.opr_type, m.input_shapes, m.shape) for m in convs])
    assert set(got) == {m.id for m in convs}
    names = {e.results[0].name for e in entries}
    assert all(set(v) <= names for v in got.values())


def test_winograd_tiles_and_floor_factors():
    assert winograd_tile("CONVOLUTION_DEFAULT_WINOGRAD:FB_GI_F32_MK4_4x8:4:6:32:3") == 6
    assert winograd_tile("CONVOLUTION_DEFAULT_WINOGRAD:FB_GI_F32_MK4_4x8:4:2:8:3") == 2
    assert winograd_tile("CONVOLUTION_DEFAULT_IM2COLMATMUL:X86_F32_6x16:96") is None
    f2, f4, f6 = (algorithm_factor([f"WINOGRAD:X:4:{m}:8:3"]) for m in (2, 4, 6))
    assert algorithm_factor(["CONVOLUTION_DEFAULT_F32DIRECT"]) == 1.0 <= f2 < f4 < f6
    assert algorithm_factor(["CONVOLUTION_DEFAULT_F32DIRECT", "WINOGRAD:X:4:6:8:3"]) == f6  # the worst


def test_a_reordered_cache_keeps_every_entry_and_puts_the_preferred_algorithm_first(fast_run, tmp_path):
    _, cache, _ = fast_run
    before = read_algo_cache(cache)
    after = read_algo_cache(prefer_algorithms(cache, tmp_path / "w.cache", "WINOGRAD"))
    assert [(e.category, e.key) for e in before] == [(e.category, e.key) for e in after]
    for b, a in zip(before, after):
        assert sorted(r.name for r in b.results) == sorted(r.name for r in a.results)
        has = [r.name for r in b.results if "WINOGRAD" in r.name]
        assert a.chosen().name == (has[0] if has else b.chosen().name)
    assert read_algo_cache(prefer_algorithms(cache, tmp_path / "same.cache", "NO SUCH ALGORITHM")) == before


def test_a_cut_or_foreign_cache_names_the_file(fast_run, tmp_path):
    _, cache, _ = fast_run
    cut = tmp_path / "cut.cache"
    cut.write_bytes(cache.read_bytes()[:-7])
    with pytest.raises(UsageError, match=str(cut)):
        read_algo_cache(cut)
    foreign = tmp_path / "foreign.cache"
    foreign.write_bytes(b"\x89PNG\r\n\x1a\n" + bytes(64))
    with pytest.raises(UsageError, match=str(foreign)):
        read_algo_cache(foreign)
    with pytest.raises(UsageError, match="missing.cache"):
        read_algo_cache(tmp_path / "missing.cache")


# MegEngine's MK4 Winograd names: F(2,3), F(4,3), F(6,3); each rounds more than the last
@pytest.mark.parametrize("tile", [":4:2:", ":4:4:", ":4:6:"])
def test_winograd_convolutions_are_no_false_alarm_and_a_fault_in_one_is_still_rooted(fast_run, lar_dump, tmp_path,
                                                                                     tile):
    case, cache, base = fast_run
    if not any(tile in r.name for e in read_algo_cache(cache) for r in e.results):
        pytest.skip(f"this CPU's fast-run offers no Winograd {tile} algorithm")
    wino = prefer_algorithms(cache, tmp_path / "winograd.cache", tile)
    cfg = get_config("fast-run").with_extra(["--fast-run-algo-policy", str(wino)])
    lw = build_layerwise(case.model, lar_dump(CASE, "naive"), tmp_path / "lw")
    clean = local_errors(case.model, lar_dump(CASE, "naive"), cfg, out_dir=tmp_path / "clean", layerwise=lw,
                         checks=False)
    winograd = {k for k, v in clean.algorithms.items() if any(tile in n for n in v)}
    assert winograd, "the reordered cache makes some convolution run Winograd"
    assert local_roots(clean).roots == (), [(r.name, r.local_err, r.floor) for r in local_roots(clean).roots]
    # the same local errors judged without knowing the algorithm: the floors are narrower
    from dataclasses import replace

    blind = noise_floors(replace(clean, algorithms={}))
    assert all(blind[k] < noise_floors(clean)[k] for k in winograd)

    target = next(m for m in lw.measured if m.id in winograd)
    weight = target.name.rsplit(".", 1)[0] + ".weight"
    faulty = scale_constant(case.model, weight, 1 + 1e-3, tmp_path / "faulty.mge")
    lw_f = build_layerwise(faulty, lar_dump(CASE, "naive"), tmp_path / "lw-faulty")
    res = local_errors(faulty, lar_dump(CASE, "naive"), cfg, out_dir=tmp_path / "faulty", layerwise=lw_f, checks=False)
    assert [r.name for r in local_roots(res).roots] == [target.name]
