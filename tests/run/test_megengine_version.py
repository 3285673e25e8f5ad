"""megengine_version() reads the wheel's dist-info name instead of importing importlib.metadata
(~40 ms before the first run): it must say what importlib.metadata says."""
import importlib.metadata
import sys

import pytest

from lar_prec.run import config


@pytest.fixture(autouse=True)
def fresh_cache():
    config.megengine_version.cache_clear()
    yield
    config.megengine_version.cache_clear()


def test_the_installed_wheels_version_is_what_importlib_metadata_says():
    try:
        want = importlib.metadata.version("megengine")
    except importlib.metadata.PackageNotFoundError:
        want = None
    assert config.megengine_version() == want


@pytest.mark.parametrize("folder, version", [("megengine-1.13.0.dist-info", "1.13.0"),
                                             ("MegEngine-1.9.1.post1-py3.8.egg-info", "1.9.1.post1"),
                                             ("megengine_ext-2.0.dist-info", None)])
def test_the_first_folder_on_the_path_names_the_version(tmp_path, monkeypatch, folder, version):
    (tmp_path / folder).mkdir()
    monkeypatch.setattr(sys, "path", [str(tmp_path / "missing"), str(tmp_path)])
    assert config.megengine_version() == version
