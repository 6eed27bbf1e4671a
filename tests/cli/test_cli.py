"""The command line's own contract: --help everywhere, zoo list/export, exit codes, one-line errors."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import onnx
import pytest

from sbrs.cli import build_parser, main

COMMANDS = ["check", "inspect", "build", "run", "bench", "report", "switch", "env", "status", "zoo", "export"]


@pytest.mark.parametrize("command", COMMANDS)
def test_every_command_has_help(command: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_info:
        build_parser().parse_args([command, "--help"])
    assert exit_info.value.code == 0
    assert "usage: sbrs" in capsys.readouterr().out


def test_a_command_s_own_parser_parses_as_the_full_one() -> None:
    """``main`` builds only the parser of the command asked for: it must know every command and parse each
    command's arguments exactly as the parser of all commands does."""
    import argparse

    from sbrs.cli import COMMANDS as NAMED

    full = build_parser()
    subcommands = next(a for a in full._actions if isinstance(a, argparse._SubParsersAction))
    assert tuple(subcommands.choices) == NAMED == tuple(COMMANDS)
    samples = {"run": ["run", "a.yaml", "--frames", "3", "--no-socket", "--metrics-port", "9100"],
               "build": ["build", "a.yaml", "--memory-limit", "2", "--min-fps", "x=3"],
               "bench": ["bench", "a.yaml", "--switching", "--repeats", "4"],
               "switch": ["switch", "fast", "--app", "drone"], "check": ["check", "a.yaml", "--json"],
               "zoo": ["zoo", "export", "resnet18", "-o", "x.onnx"], "export": ["export", "a.yaml", "-o", "a.onnx"]}
    for command, argv in samples.items():
        alone, every = vars(build_parser(command).parse_args(argv)), vars(full.parse_args(argv))
        assert alone.keys() == every.keys() and all(
            alone[key] == every[key] for key in alone if key != "handler"), command
        assert alone["handler"].__name__ == every["handler"].__name__


def test_console_script_is_installed() -> None:
    result = subprocess.run([sys.executable, "-m", "sbrs.cli", "--version"], capture_output=True, text=True,
                            check=False)
    assert result.returncode == 0 and result.stdout.startswith("sbrs ")


def test_zoo_list_text_and_json(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["zoo", "list"]) == 0
    text = capsys.readouterr().out
    assert "mobilenet_v2" in text and "resnet50" in text and "options:" in text
    assert main(["zoo", "list", "--json"]) == 0
    names = {model["name"] for model in json.loads(capsys.readouterr().out)["models"]}
    assert names == {"mobilenet_v1", "mobilenet_v2", "resnet18", "resnet50", "squeezenet1_1", "efficientnet_b0",
                     "cifar_resnet", "har_cnn", "yolo_detector"}


def test_zoo_export_writes_a_checked_model(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    target = tmp_path / "m.onnx"
    assert main(["zoo", "export", "mobilenet_v2", "-o", str(target), "--width", "0.5", "--resolution", "96",
                 "--seed", "3", "--option", "classes=10", "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["options"] == {"width": 0.5, "resolution": 96, "seed": 3, "classes": 10}
    model = onnx.load(str(target))
    onnx.checker.check_model(model, full_check=True)
    assert [d.dim_value for d in model.graph.input[0].type.tensor_type.shape.dim] == [1, 3, 96, 96]


@pytest.mark.parametrize(("argv", "fragment"), [
    (["zoo", "export", "alexnet", "-o", "x.onnx"], "alexnet"),
    (["zoo", "export", "resnet18", "-o", "x.onnx", "--option", "drop_blocks=2"], "drop_blocks"),
    (["zoo", "export", "resnet18", "-o", "x.onnx", "--option", "speed=2"], "speed"),
    (["zoo", "export", "resnet18", "-o", "/no/such/dir/x.onnx"], "does not exist"),
    (["check", "/no/such/app.yaml"], "no such file"),
    (["check", "/"], "/: is a folder, not a YAML file"),
    # said before a build is logged and started (the run said it was building "app.build" first)
    (["run", "/no/such/app.yaml", "--no-socket"], "/no/such/app.yaml: no such file"),
    (["run", "/tmp", "--no-socket"], "/tmp: is a folder, not an app file"),
])
def test_bad_input_exits_2_with_one_line(argv: list[str], fragment: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("sbrs: error: ") and fragment in err


def test_usage_errors_exit_2(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main(["no-such-command"])
    assert exit_info.value.code == 2


def test_bad_input_with_stderr_closed_still_exits_2(tmp_path: Path) -> None:
    """Started with stderr closed (``2>&-``), Python makes ``sys.stderr`` None: writing the error there failed in
    turn, and the exit status was 1 instead of the error's own 2."""
    import os

    done = subprocess.run([sys.executable, "-m", "sbrs.cli", "check", str(tmp_path / "missing.yaml")],
                          stdout=subprocess.PIPE, preexec_fn=lambda: os.close(2), timeout=120, check=False)
    assert done.returncode == 2 and done.stdout == b""
