"""Screenshot of `axon ui` over a working directory with a few small tunes, and a check of what it shows.

Tunes rmsnorm and softmax (small preset, 4 trials each) into a fresh working directory (or uses
`--workdir` as it is if it already has a tracking store), starts `axon ui` on it, renders the page it
prints with headless Chromium, checks the rendered runs table (classic ML view, one row per tune,
the best_latency_us, speedup_vs_unfused, speedup_vs_expert and roofline_fraction columns), and
writes the screenshot (default experiments/results/ui.png). `axon ui` is stopped with SIGTERM.

Needs a Chromium binary (`apt-get install chromium` on Debian); it is evidence for a human, not
part of CI: tests/track/test_ui_render.py runs this script only where Chromium is installed.

    .venv/bin/python experiments/ui_screenshot.py [--workdir W] [--out experiments/results/ui.png]

Last line: ui_check=ok columns=4/4 runs=N (or ui_check=FAILED missing=...); exit code 1 on failure.
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
BROWSERS = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable")
COLUMNS = ("best_latency_us", "speedup_vs_unfused", "speedup_vs_expert", "roofline_fraction")
# A shared view, the runs tab of the classic ML navigation: what the page says when it is the one we want.
PAGE_MARKS = ("Runs", "Model training", "Axon tuning runs")


def find_chromium() -> str | None:
    return next((path for path in map(shutil.which, BROWSERS) if path), None)


def chromium(binary: str, url: str, *extra: str, width: int = 1920, height: int = 1080) -> str:
    """Run headless Chromium on `url` with a fresh profile; the JS app gets 15 s of virtual time."""
    with tempfile.TemporaryDirectory() as profile:
        cmd = [
            binary,
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-quic",
            "--no-first-run",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            f"--user-data-dir={profile}",
            f"--window-size={width},{height}",
            "--virtual-time-budget=15000",
            *extra,
            url,
        ]
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=180)
    if done.returncode != 0:
        raise RuntimeError(f"chromium exited with {done.returncode}: {done.stderr[-500:]}")
    shot = next((arg.split("=", 1)[1] for arg in extra if arg.startswith("--screenshot=")), None)
    if shot and not Path(shot).exists():
        raise RuntimeError(f"chromium wrote no screenshot: {done.stderr[-500:]}")
    return done.stdout


def tune(workdir: Path, workloads: list[str], trials: int) -> None:
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    for workload in workloads:
        subprocess.run(
            [
                sys.executable,
                "-m",
                "axon.cli",
                "tune",
                workload,
                "--preset",
                "small",
                "--trials",
                str(trials),
                "--workdir",
                str(workdir),
                "--quiet",
            ],
            cwd=REPO,
            env=env,
            check=True,
            stdout=subprocess.DEVNULL,
        )


def start_axon_ui(workdir: Path) -> tuple[subprocess.Popen, str]:
    """`axon ui` as a user starts it; returns it and the URL it prints once the server answers."""
    with socket.socket() as s:  # a port nobody else's UI is on (another user's server on 5000 would answer too)
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    proc = subprocess.Popen(
        [sys.executable, "-m", "axon.cli", "ui", "--workdir", str(workdir), "--port", str(port), "--no-open"],
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    line = proc.stdout.readline()
    url = next((token for token in line.split() if token.startswith("http://")), None)
    if url is None:
        proc.kill()
        raise RuntimeError(
            f"axon ui printed no URL: {line!r} {proc.stderr.read()[-500:] if proc.poll() is not None else ''}"
        )
    return proc, url


def check_page(dom: str, workloads: list[str]) -> list[str]:
    """What the rendered page lacks of what `axon ui` promises (empty when it shows it all)."""
    missing = [f"column {c}" for c in COLUMNS if f">{c}<" not in dom]
    missing += [f"run 'tune {w}'" for w in workloads if f">tune {w}<" not in dom]
    missing += [f"page mark {m!r}" for m in PAGE_MARKS if m not in dom]
    return missing


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workdir", type=Path, help="working directory (default: a fresh one with new tunes)")
    parser.add_argument("--out", type=Path, default=REPO / "experiments" / "results" / "ui.png")
    parser.add_argument("--workloads", nargs="+", default=["rmsnorm", "softmax"])
    parser.add_argument("--trials", type=int, default=4)
    args = parser.parse_args(argv)

    binary = find_chromium()
    if binary is None:
        print(
            f"no Chromium found (looked for {', '.join(BROWSERS)}); on Debian: apt-get install chromium",
            file=sys.stderr,
        )
        return 2
    workdir = args.workdir or Path(tempfile.mkdtemp(prefix="axon-ui-"))
    if not (workdir / "mlflow.db").exists():
        tune(workdir, args.workloads, args.trials)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    proc, url = start_axon_ui(workdir)
    try:
        print(f"workdir: {workdir}\naxon ui: {url}")
        # The DOM is rendered wider than the screenshot: the grid only renders the columns in view.
        dom = chromium(binary, url, "--dump-dom", width=2400)
        missing = check_page(dom, args.workloads)
        if missing:
            dump = args.out.with_suffix(".failed.html")
            dump.write_text(dom)
            print(f"rendered page written to {dump}")
        chromium(binary, url, f"--screenshot={args.out.resolve()}")
        print(f"screenshot: {args.out}")
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=60)
    if missing:
        print(f"ui_check=FAILED missing={'; '.join(missing)}")
        return 1
    print(f"ui_check=ok columns={len(COLUMNS)}/{len(COLUMNS)} runs={len(args.workloads)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
