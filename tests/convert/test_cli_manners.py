"""CLI manners for every ``detfmt`` subcommand (issue 13 item 9): defaults in every --help, no
prefix abbreviations, a suggestion for a mistyped option or command, errors that name CLI
options, one line and exit code 130 on Ctrl-C."""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from detfmt.cli import _leaves, build_parser, main
from tests.convert.conftest import save_image


def _leaf_parsers() -> list[argparse.ArgumentParser]:
    return _leaves(build_parser())


def _positionals(parser: argparse.ArgumentParser) -> list[str]:
    return ["x" for a in parser._actions if not a.option_strings and a.nargs != "?"
            and not isinstance(a, argparse._SubParsersAction)]


def _option_help(text: str, option: str) -> str:
    """The help chunk of one option in a --help text."""
    lines = text.splitlines()
    for i, line in enumerate(lines):
        if line.strip().startswith(option) and (line.strip() == option or line.strip()[
                len(option)] in " ,="):
            chunk = [line]
            for follow in lines[i + 1:]:
                if follow.startswith("  -") or not follow.startswith("   "):
                    break
                chunk.append(follow)
            return " ".join(chunk)
    raise AssertionError(f"{option} not in help")


def test_every_option_default_is_shown_in_help():
    checked = 0
    for parser in _leaf_parsers():
        text = parser.format_help()
        for action in parser._actions:
            if (not action.option_strings or action.default in (None, False, argparse.SUPPRESS)
                    or isinstance(action, (argparse._HelpAction, argparse._VersionAction))):
                continue
            assert "default" in _option_help(text, action.option_strings[0]).lower(), (
                parser.prog, action.option_strings)
            checked += 1
    assert checked >= 10  # convert's max-side, codec, workers, on-error, jpeg-quality, ...


@pytest.mark.parametrize("parser", _leaf_parsers(), ids=lambda p: p.prog)
def test_no_prefix_abbreviations_and_a_suggestion(parser, capsys):
    long_options = [o for a in parser._actions for o in a.option_strings
                    if o.startswith("--") and len(o) > 4 and o not in ("--help", "--version")]
    if not long_options:
        pytest.skip("no long option")
    option = long_options[0]
    argv = [*parser.prog.split()[1:], option[:-1], *_positionals(parser)]
    with pytest.raises(SystemExit) as info:
        build_parser().parse_args([*argv, "1"] if "=" not in option else argv)
    assert info.value.code == 2
    err = capsys.readouterr().err
    assert f"did you mean {option}" in err or f"{option}" in err.split("did you mean")[-1]


@pytest.mark.parametrize("argv,suggested", [
    (["convrt", "yolo", "a"], "'convert'"),
    (["convert", "yolov", "a"], "'yolo'"),
    (["infoo", "x"], "'info'"),
    (["convert", "yolo", "src", "dst", "--max-sid", "3"], "--max-side"),
    (["convert", "coco", "src", "dst", "--on_error", "skip"], "--on-error"),
])
def test_mistyped_command_or_option_gets_a_suggestion(argv, suggested, capsys):
    with pytest.raises(SystemExit) as info:
        main(argv)
    assert info.value.code == 2
    assert f"did you mean {suggested}" in capsys.readouterr().err


def _yolo(root: Path, text: str) -> Path:
    save_image(root / "images" / "a.jpg", 40, 30)
    (root / "labels").mkdir(parents=True)
    (root / "labels" / "a.txt").write_text(text)
    (root / "data.yaml").write_text("names: [x]\n")
    return root


@pytest.mark.parametrize("label,flag,python", [
    ("0 0.5 0.5 0.2\n", "--on-error skip", "on_error"),
    ("", "--allow-empty", "allow_empty"),
])
def test_errors_name_cli_options(tmp_path, capsys, label, flag, python):
    root = _yolo(tmp_path / "src", label)
    if python == "on_error":  # skipping is advised only when it leaves something to convert
        save_image(root / "images" / "b.jpg", 40, 30, seed=1)
        (root / "labels" / "b.txt").write_text("0 0.5 0.5 0.2 0.2\n")
    assert main(["convert", "yolo", str(root), str(tmp_path / "out"), "--workers", "0"]) == 2
    err = capsys.readouterr().err
    assert flag in err and python not in err
    assert "report saved to" in err and (tmp_path / "out.report.json").is_file()
    assert json.loads((tmp_path / "out.report.json").read_text())["written"] is False


def test_existing_target_names_overwrite_option(tmp_path, capsys):
    root = _yolo(tmp_path / "src", "0 0.5 0.5 0.2 0.2\n")
    argv = ["convert", "yolo", str(root), str(tmp_path / "out"), "--workers", "0"]
    assert main(argv) == 0
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert "--overwrite" in err and "overwrite=True" not in err
    assert main([*argv, "--overwrite"]) == 0


def test_split_overlap_names_cli_options(tmp_path, capsys):
    root = tmp_path / "src"
    save_image(root / "images" / "a.jpg", 40, 30)
    (root / "labels").mkdir(parents=True)
    (root / "labels" / "a.txt").write_text("0 0.5 0.5 0.2 0.2\n")
    (root / "list.txt").write_text("images/a.jpg\n")
    (root / "data.yaml").write_text("train: list.txt\nval: list.txt\nnames: [x]\n")
    assert main(["convert", "yolo", str(root / "data.yaml"), str(tmp_path / "out"),
                 "--workers", "0"]) == 2
    err = capsys.readouterr().err
    assert "--allow-overlap" in err and "--split NAME" in err and "allow_overlap" not in err


def _in_group(pgid: int) -> list[str]:
    """States of the processes still in a process group (zombies are already dead)."""
    states = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if int(fields[2]) == pgid:
                states.append(fields[0])
    return states


@pytest.mark.slow
@pytest.mark.skipif(sys.platform != "linux", reason="process groups and /proc")
def test_ctrl_c_prints_one_line_and_exits_130(tmp_path):
    """Ctrl-C (SIGINT to the whole process group, as a terminal sends it) while the writer's
    workers run: one line, exit code 130, no traceback, no process left, nothing published."""
    rng = np.random.default_rng(0)
    (tmp_path / "img").mkdir()
    Image.fromarray(rng.integers(0, 256, (1500, 2000, 3), np.uint8)).save(
        tmp_path / "img" / "big.jpg", quality=95)
    images = [{"id": i + 1, "file_name": "big.jpg"} for i in range(400)]
    anns = [{"id": i + 1, "image_id": i + 1, "category_id": 1, "bbox": [10, 10, 50, 50]}
            for i in range(400)]
    (tmp_path / "a.json").write_text(json.dumps({"images": images, "annotations": anns,
                                                 "categories": [{"id": 1, "name": "x"}]}))
    env = dict(os.environ, PYTHONPATH=str(Path(__file__).resolve().parents[2]))
    proc = subprocess.Popen(
        [sys.executable, "-m", "detfmt", "convert", "coco", str(tmp_path / "a.json"),
         str(tmp_path / "out"), "--images", str(tmp_path / "img"), "--workers", "2",
         "--codec", "raw", "--no-progress", "--no-fingerprint"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
        start_new_session=True,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    try:
        first = proc.stderr.readline()  # "codec: raw (...)": the write pass has started
        assert first.startswith("codec"), first
        # Samples are flowing: the writer's temporary images.bin holds bytes (an event, not a
        # sleep: on a loaded machine the workers may take seconds to start)
        deadline = time.monotonic() + 300  # a bound on a hang only
        blobs = ".detfmt-tmp-out-*/images.bin"
        while not any(blob.stat().st_size for blob in tmp_path.glob(blobs)):
            assert proc.poll() is None, proc.communicate()
            assert time.monotonic() < deadline, "the write never started"
            time.sleep(0.02)
        os.killpg(proc.pid, signal.SIGINT)
        _, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    assert proc.returncode == 130, err
    assert err == "detfmt: interrupted\n"
    deadline = time.monotonic() + 120  # a bound on a hang: killed workers go in moments
    while any(state != "Z" for state in _in_group(proc.pid)) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert all(state == "Z" for state in _in_group(proc.pid))
    assert not (tmp_path / "out").exists()


def _wait_for_usr1(ready) -> None:
    """Say it is running, then wait for SIGUSR1 (sent after the SIGINT under test: pending
    signals are handled lowest number first, so SIGINT's handler has run by the time this
    returns, whatever the machine's load)."""
    done = []
    signal.signal(signal.SIGUSR1, lambda signum, frame: done.append(signum))
    ready.set()
    while not done:
        signal.pause()


@pytest.mark.skipif(sys.platform != "linux", reason="fork")
def test_forked_workers_leave_ctrl_c_to_the_parent():
    """A worker forked by the writer inherits the CLI's SIGINT handler and ignores the
    terminal's Ctrl-C (which reaches the whole group): it neither dies nor prints a traceback;
    the parent stops it."""
    import multiprocessing

    from detfmt import cli

    previous = signal.getsignal(signal.SIGINT)
    try:
        signal.signal(signal.SIGINT, signal.default_int_handler)
        cli._interrupt_in_parent_only()
        context = multiprocessing.get_context("fork")
        ready = context.Event()
        child = context.Process(target=_wait_for_usr1, args=(ready,))
        child.start()
        assert ready.wait(300)  # the child runs with the handler it inherited
        os.kill(child.pid, signal.SIGINT)
        os.kill(child.pid, signal.SIGUSR1)
        child.join(300)
        assert child.exitcode == 0  # the default handler makes it exit 1 with a traceback
        with pytest.raises(KeyboardInterrupt):  # the parent still gets it
            signal.raise_signal(signal.SIGINT)
    finally:
        signal.signal(signal.SIGINT, previous)
