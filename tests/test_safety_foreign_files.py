"""Files from other tools (issue class 5): spreadsheets in other locales, empty files, YAML's
booleans, graph files that are folders or not UTF-8, paths relative to the scenario, and
files that are not tables at all — each a one-line error (exit 2) that says what it is."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from small import SMALL

from optimizer.cli.main import main

METRO_HEADER = "id,name,lat,lon,utc_offset_hours,population"
CHICAGO = "chicago,Chicago,41.8373,-87.6862,-6,8604203"
NEW_YORK = "new-york,New York,40.6943,-73.9249,-5,18908608"
WASHINGTON = "washington,Washington,38.9047,-77.0163,-5,5379184"


def error(path: Path, capsys) -> str:
    assert main(["validate", str(path)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1, err
    return err


def test_semicolon_separated_csv(write_scenario, capsys):
    text = METRO_HEADER.replace(",", ";") + "\n" + CHICAGO.replace(",", ";").replace(".", ",") + "\n"
    err = error(write_scenario({**SMALL, "metros": "metros.csv"}, {"metros.csv": text}), capsys)
    assert "metros.csv, line 1" in err and "separated by ';'" in err and "decimal" in err


def test_decimal_commas_unquoted_and_quoted(write_scenario, capsys):
    text = f"{METRO_HEADER}\nchicago,Chicago,41,8373,-87,6862,-6,8604203\n"
    err = error(write_scenario({**SMALL, "metros": "metros.csv"}, {"metros.csv": text}), capsys)
    assert "metros.csv, line 2" in err and "decimal" in err and "comma" in err
    text = f'{METRO_HEADER}\nchicago,Chicago,"41,8373",-87.6862,-6,8604203\n{NEW_YORK}\n{WASHINGTON}\n'
    err = error(write_scenario({**SMALL, "metros": "metros.csv"}, {"metros.csv": text}), capsys)
    assert "field 'lat'" in err and "decimal comma" in err


def test_tab_separated_csv(write_scenario, capsys):
    text = METRO_HEADER.replace(",", "\t") + "\n" + CHICAGO.replace(",", "\t") + "\n"
    err = error(write_scenario({**SMALL, "metros": "metros.csv"}, {"metros.csv": text}), capsys)
    assert "tabs" in err


@pytest.mark.parametrize("text", ["", "\n\n", "# only a comment\n", "---\n"])
def test_an_empty_scenario_is_an_error_not_the_whole_catalogue(tmp_path, capsys, text):
    path = tmp_path / "empty.yaml"
    path.write_text(text)
    err = error(path, capsys)
    assert "empty.yaml" in err and "empty" in err


def test_yaml_booleans_get_a_hint(write_scenario, capsys):
    err = error(write_scenario({**SMALL, "metros": ["chicago", False]}), capsys)  # written `no` (Norway)
    assert "quote" in err and "YAML reads unquoted on, off, yes, no" in err
    path = write_scenario(SMALL)
    path.write_text(path.read_text().replace("name: small", "name: on"))
    err = error(path, capsys)
    assert "field 'name'" in err and "quote" in err
    err = error(write_scenario({**SMALL, "sites": {"ids": ["chicago"], "patch": {"chicago": {"metro": True}}}}), capsys)
    assert "quote" in err


def test_a_table_that_is_not_a_table_is_not_echoed(write_scenario, tmp_path, capsys):
    secret = tmp_path / "secret.txt"
    secret.write_text("root:x:0:0:root:/root:/bin/bash\nuser:secret-token-1234\n")
    err = error(write_scenario({**SMALL, "metros": str(secret)}), capsys)
    assert "does not look like the expected table" in err
    assert "root:x" not in err and "secret-token" not in err


def test_a_header_with_some_known_columns_is_listed(write_scenario, capsys):
    err = error(write_scenario({**SMALL, "metros": "metros.csv"}, {"metros.csv": "id,name,lat\nx,y,1\n"}), capsys)
    assert "missing required column(s) lon" in err and "the header has id, name, lat" in err


@pytest.mark.parametrize("graph,content,says", [
    ("graphs", None, "this is a folder"),
    ("edges.csv", b"from,to,one_way_ms\nmetro:chicago,site:chicago,\xff\xfe1\n", "not UTF-8"),
    ("g.graphml", b"<?xml version='1.0'?>\n<graphml>\xe9\xff</graphml>", "not UTF-8"),
    ("edges.csv", b"", "missing column"),
    ("missing.csv", False, "does not exist"),
])
def test_graph_files_get_the_same_errors_as_tables(write_scenario, tmp_path, capsys, graph, content, says):
    if content is None:
        (tmp_path / graph).mkdir()
    elif content is not False:
        (tmp_path / graph).write_bytes(content)
    err = error(write_scenario({**SMALL, "network": {"graph": graph}}), capsys)
    assert says in err, err


def test_paths_are_relative_to_the_scenario_not_the_current_folder(write_scenario, tmp_path, capsys, monkeypatch):
    text = f"{METRO_HEADER}\n{CHICAGO}\n{NEW_YORK}\n{WASHINGTON}\n"
    path = write_scenario({**SMALL, "metros": "tables/metros.csv"})
    (tmp_path / "tables").mkdir()
    (tmp_path / "tables" / "metros.csv").write_text(text)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    assert main(["validate", os.path.relpath(path, elsewhere)]) == 0
    assert "valid" in capsys.readouterr().out


def test_a_scenario_that_is_a_folder_or_binary(tmp_path, capsys):
    assert "this is a folder" in error(tmp_path, capsys)
    binary = tmp_path / "x.yaml"
    binary.write_bytes(b"\x89PNG\r\n\x1a\n\x00\x00")
    assert "not UTF-8" in error(binary, capsys)
