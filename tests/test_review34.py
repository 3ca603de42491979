"""review34: a hostile campaign on the sixteenth session's options (seventeenth session). docs/story.md "review34"
says what each test pins and what happened before. The one-line refusals are cases in tests/test_bad_input.py."""

from __future__ import annotations


def test_a_sweep_that_fails_to_write_does_not_say_it_wrote(cli, tmp_path, monkeypatch):
    """`sweep --csv /dev/full -o new.json` printed "written to .../new.json (--output)", then failed on the CSV with
    exit 2 and wrote neither file: the summary now prints once the streamed files are closed."""
    monkeypatch.chdir(tmp_path)
    code, out, err = cli("sweep", "-q", "--model", "llama-3-8b", "--hw", "h100", "--devices", "8", "--vary",
                         "seq=1024,2048", "--csv", "/dev/full", "-o", "new.json")
    assert code == 2 and "No space left on device" in err and err.count("\n") == 1
    assert "written to" not in out and not (tmp_path / "new.json").exists()
    code, out, _ = cli("sweep", "-q", "--model", "llama-3-8b", "--hw", "h100", "--devices", "8", "--vary",
                       "seq=1024,2048", "--csv", "s.csv", "-o", "new.json")
    assert code == 0 and "2 points, 2 fit; written to" in out
    assert (tmp_path / "new.json").is_file() and (tmp_path / "s.csv").is_file()
