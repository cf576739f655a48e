"""The CLI runs end to end on shipped data."""

import json

from optimizer.cli.main import main


def test_curves_json(capsys):
    assert main(["curves", "--model", "llama-3.1-8b", "--gpu", "h100-sxm", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["kv_bytes_per_token"] == 131072
    assert {c["tp"] for c in out["configs"]} == {1, 2, 4, 8}


def test_validate_bad_file_exits_2(tmp_path, capsys):
    bad = tmp_path / "bad.yaml"
    bad.write_text("name: x\nworkloads: {patch: {chat: {ttft_p99_ms: 0}}}\n")
    assert main(["validate", str(bad)]) == 2
    err = capsys.readouterr().err
    assert "ttft_p99_ms" in err and "expected 5 to 86,400,000 ms" in err
