"""The shipped cost model resolves by name and by its repository path, from any directory."""

import pytest

from axon.errors import StoreError
from axon.search.costmodel import CostModel
from axon.shipped import MODELS_DIR, cost_model_ref, shipped_cost_models
from tests.conftest import REPO, axon_in_process

SHIPPED = MODELS_DIR / "axon-costmodel-trn1.json"


def test_names_and_the_repository_path_reach_the_shipped_model_outside_a_checkout(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert shipped_cost_models() == ["trn1"]
    for ref in ("trn1", "axon-costmodel-trn1", "models/axon-costmodel-trn1.json", "./models/axon-costmodel-trn1.json"):
        assert cost_model_ref(ref) == str(SHIPPED)
    assert CostModel.load(cost_model_ref("trn1")).feature_names


def test_files_registry_refs_and_other_paths_pass_unchanged(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "trn1").write_text("{}")  # a file of that name wins over the shipped model
    (tmp_path / "models").mkdir()
    (tmp_path / "models" / "axon-costmodel-trn1.json").write_text("{}")
    for ref in (
        "trn1",
        "models/axon-costmodel-trn1.json",
        "models:/axon-costmodel-trn1@champion",
        "elsewhere/m.json",
        "/abs/models/axon-costmodel-trn1.json",
        None,
        "",
    ):
        assert cost_model_ref(ref) == ref


def test_a_bare_name_without_a_shipped_model_names_the_shipped_ones(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(StoreError, match=r"cost model trn2 not found \(.*shipped: trn1\)"):
        cost_model_ref("trn2")


def test_the_repository_models_directory_is_the_package_one():
    assert (REPO / "models").resolve() == MODELS_DIR
    assert (REPO / "models" / "README.md").is_file()


def test_cli_cost_model_option_takes_a_shipped_name(tmp_path):
    bad = axon_in_process(
        "tune", "softmax", "--preset", "small", "--cost-model", "trn2", "--workdir", str(tmp_path / "w")
    )
    assert bad.returncode == 2 and bad.stderr.strip().splitlines() == [
        "axon: error: cost model trn2 not found (a file, models:/NAME@ALIAS, or shipped: trn1)"
    ]
