"""``chillfl analyze`` as a newcomer meets it (review cliux, findings 3 to 5): ``--import-plugins`` typed after the
analysis's name, an analysis interrupted (a bare "chillfl: interrupted"; "no checkpoint had been written yet" for the
in-memory runs of scarlet-deficit), and scarlet-deficit's tables cut off on stdout without a mark."""

from __future__ import annotations

import pytest

from chillfl.cli import main


# ---------------------------------------------------------------- 3: --import-plugins after the analysis's name


def test_import_plugins_is_taken_after_the_analysis_name_too(capsys: pytest.CaptureFixture[str]) -> None:
    from chillfl.cli import build_parser

    parser = build_parser(analyses=True)
    for argv, imports in ((["analyze", "calibration", "r"], False), (["analyze", "--import-plugins", "calibration", "r"], True),
                          (["analyze", "calibration", "--import-plugins", "r"], True), (["analyze", "cka", "r", "--import-plugins"], True)):
        assert parser.parse_args(argv).import_plugins is imports, argv
    with pytest.raises(SystemExit):
        main(["analyze", "calibration", "--help"])
    assert "--import-plugins" in capsys.readouterr().out  # the help the refusal points to lists it
