"""The shared loader of btacalc/data's named tables (precision recipes, attention kernels)."""

from __future__ import annotations

import pytest
from pydantic import BaseModel, ConfigDict

from btacalc.config import named_tables
from btacalc.errors import BtacalcError, DataError


class _Entry(BaseModel):
    model_config = ConfigDict(extra="forbid")
    name: str
    value: int


def test_each_table_becomes_a_model_named_by_its_key(tmp_path, monkeypatch):
    (tmp_path / "t.toml").write_text("[entry.a]\nvalue = 1\n[entry.b]\nvalue = 2\n", encoding="utf-8")
    monkeypatch.setattr(named_tables, "package_data", lambda name: tmp_path / name)
    table = named_tables.load_named_tables("t.toml", "entry", _Entry)
    assert {k: (v.name, v.value) for k, v in table.items()} == {"a": ("a", 1), "b": ("b", 2)}


def test_a_broken_shipped_file_is_a_data_error_naming_it(tmp_path, monkeypatch):
    (tmp_path / "t.toml").write_text("[entry.a]\nvalue = 'x'\n", encoding="utf-8")
    monkeypatch.setattr(named_tables, "package_data", lambda name: tmp_path / name)
    with pytest.raises(DataError, match=r"btacalc/data/t\.toml"):
        named_tables.load_named_tables("t.toml", "entry", _Entry)


def test_an_unknown_name_is_one_line_naming_the_option_and_the_choices():
    with pytest.raises(BtacalcError) as err:
        named_tables.pick({"a": 1, "b": 2}, "c", "attention_kernel")
    # the CLI renders {attention_kernel} as the flag's name (--attention-kernel); the text stays one line
    assert str(err.value) == "attention_kernel must be one of a, b, got 'c'"
    assert named_tables.pick({"a": 1}, "a", "x") == 1
