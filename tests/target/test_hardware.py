"""Hardware files load into a validated HardwareSpec; broken files name the field and the file."""

import dataclasses
from pathlib import Path

import pytest
import yaml

from axon.errors import HardwareError
from axon.target import DEFAULT_HW, builtin_hw, hardware, load_hw
from axon.target.hardware import CONFIG_DIR


def test_builtin_files_carry_the_documented_numbers():
    assert builtin_hw() == ["trn1", "trn2"]
    trn1, trn2 = load_hw("trn1"), load_hw("trn2")
    assert trn1.memory.sbuf_bytes_per_partition * 128 == 24 * 2**20
    assert trn2.memory.sbuf_bytes_per_partition * 128 == 28 * 2**20
    assert trn1.memory.psum_bank_bytes == 2048 and trn1.memory.psum_banks == 8
    assert abs(trn1.peak_matmul_flops_per_s / 1e12 - 91.75) < 0.01
    assert trn1.engines["vector"].clock_ghz == 1.12 and trn2.engines["vector"].clock_ghz == 0.96
    assert trn1.ports.vector_gpsimd_share_sbuf and not trn2.ports.vector_gpsimd_share_sbuf
    assert trn1.file_hash != trn2.file_hash and len(trn1.file_hash) == 16
    assert load_hw(CONFIG_DIR / "trn1.yaml") == trn1


def test_builtin_files_are_package_data_and_the_repository_path_names_them_anywhere(tmp_path, monkeypatch):
    repo = Path(__file__).resolve().parents[2]
    assert CONFIG_DIR == Path(load_hw("trn1").source).parent and CONFIG_DIR.parent.name == "target"
    assert (repo / "configs" / "hw").resolve() == CONFIG_DIR  # the documented location links to the package's
    monkeypatch.chdir(tmp_path)  # not a checkout
    assert load_hw("configs/hw/trn2.yaml") == load_hw("trn2")
    (tmp_path / "configs" / "hw").mkdir(parents=True)
    (tmp_path / "configs" / "hw" / "trn2.yaml").write_text((CONFIG_DIR / "trn1.yaml").read_text())
    assert load_hw("configs/hw/trn2.yaml").file_hash == load_hw("trn1").file_hash  # a file that is there wins
    with pytest.raises(HardwareError, match=r"not found \(built-in: trn1, trn2\)"):
        load_hw("configs/hw/trn3.yaml")


def _broken(tmp_path: Path, edit) -> Path:
    data = yaml.safe_load((CONFIG_DIR / "trn1.yaml").read_text())
    edit(data)
    path = tmp_path / "broken.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def test_missing_field_names_field_and_file(tmp_path):
    path = _broken(tmp_path, lambda d: d["dma"].pop("fixed_cost_ns"))
    with pytest.raises(HardwareError, match=r"broken\.yaml: missing field dma\.fixed_cost_ns"):
        load_hw(path)


def test_negative_field_names_field_and_file(tmp_path):
    path = _broken(tmp_path, lambda d: d["memory"].__setitem__("sbuf_bytes_per_partition", -1))
    with pytest.raises(HardwareError, match=r"broken\.yaml: field memory\.sbuf_bytes_per_partition must be positive"):
        load_hw(path)


@pytest.mark.parametrize(
    "group, field, value",
    [
        ("memory", "hbm_bytes", float("nan")),
        ("memory", "hbm_bandwidth_gbps", float("nan")),
        ("dma", "fixed_cost_ns", float("inf")),
    ],
)
def test_a_field_that_is_not_a_finite_number_is_refused(tmp_path, group, field, value):
    # hbm_bytes: .nan was int()'s ValueError traceback; a NaN bandwidth gave a 0.0 us roofline and exit 0
    path = _broken(tmp_path, lambda d: d[group].__setitem__(field, value))
    with pytest.raises(HardwareError, match=rf"broken\.yaml: field {group}\.{field} must be a finite number"):
        load_hw(path)


def test_numbers_in_exponent_notation_are_numbers(tmp_path):
    # YAML 1.1 reads 16e9 (no dot) and 1.5e3 (no exponent sign) as strings: "must be a number, got '16e9'"
    text = (CONFIG_DIR / "trn1.yaml").read_text()
    text = text.replace("hbm_bytes: 17179869184", "hbm_bytes: 16e9").replace("clock_ghz: 1.12", "clock_ghz: 112e-2")
    path = tmp_path / "exp.yaml"
    path.write_text(text)
    hw = load_hw(path)
    assert hw.memory.hbm_bytes == 16 * 10**9 and isinstance(hw.memory.hbm_bytes, int)
    assert hw.engines["vector"].clock_ghz == pytest.approx(1.12)
    path.write_text(text.replace("hbm_bytes: 16e9", "hbm_bytes: 16e9x"))
    with pytest.raises(HardwareError, match=r"memory\.hbm_bytes must be a number, got '16e9x'"):
        load_hw(path)


def test_wrong_type_and_unknown_field(tmp_path):
    path = _broken(tmp_path, lambda d: d["engines"]["tensor"].__setitem__("clock_ghz", "fast"))
    with pytest.raises(HardwareError, match=r"engines\.tensor\.clock_ghz must be a number"):
        load_hw(path)
    path = _broken(tmp_path, lambda d: d["memory"].__setitem__("sbuf_bytes", 3))
    with pytest.raises(HardwareError, match=r"unknown field memory\.sbuf_bytes"):
        load_hw(path)


def test_missing_file_lists_builtins(tmp_path):
    with pytest.raises(HardwareError, match="built-in: trn1, trn2"):
        load_hw("trn9")
    bad = tmp_path / "bad.yaml"
    bad.write_text("name: [unclosed\n")
    with pytest.raises(HardwareError, match="not valid YAML"):
        load_hw(bad)


def test_a_file_is_parsed_once_per_content(tmp_path, monkeypatch):
    assert load_hw() is load_hw(DEFAULT_HW) is load_hw(DEFAULT_HW)  # the default, parsed once
    parsed = []
    real = hardware.load_yaml
    monkeypatch.setattr(hardware, "load_yaml", lambda raw: parsed.append(1) or real(raw))
    path = tmp_path / "mine.yaml"
    path.write_text((CONFIG_DIR / "trn1.yaml").read_text())
    first = load_hw(path)
    assert load_hw(path) is first and load_hw(str(path)) is first and len(parsed) == 1
    assert first.file_hash == load_hw("trn1").file_hash and first.source == str(path)
    path.write_text((CONFIG_DIR / "trn1.yaml").read_text() + "\n# edited\n")
    edited = load_hw(path)
    assert len(parsed) == 2 and edited.file_hash != first.file_hash
    assert dataclasses.replace(edited, file_hash=first.file_hash) == first
    with pytest.raises(dataclasses.FrozenInstanceError):
        edited.name = "changed"  # type: ignore[misc]
