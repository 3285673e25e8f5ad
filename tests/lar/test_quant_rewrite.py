"""The int8 model with layers kept in float (lar/quant_rewrite.py, run as a child process): what it
refuses, with the operator named (the happy path runs in tests/workflows/test_quant_mbv2.py)."""
from __future__ import annotations

import pytest

from lar_prec.diagnosis.quantkeep import write_kept_model
from lar_prec.errors import UsageError


@pytest.mark.megengine
def test_a_layer_that_cannot_be_kept_or_is_not_in_the_model_is_a_usage_error(manifest, tmp_path):
    model = manifest["mbv2_int8"].model
    with pytest.raises(UsageError, match="Reshape is computed by Reshape: only ConvBiasForward, ElemwiseMultiType, "
                                         "PoolingForward can be kept in float"):
        write_kept_model(model, tmp_path / "a.mge", [{"name": "Reshape", "weight": None}])
    with pytest.raises(UsageError, match="no var\\(s\\) named 'features.9.ConvBias': expected exactly one"):
        write_kept_model(model, tmp_path / "b.mge", [{"name": "features.9.ConvBias", "weight": None}])
    assert not (tmp_path / "a.mge").exists() and not (tmp_path / "b.mge").exists()
