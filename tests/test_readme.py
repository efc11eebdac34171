"""The README runs as written: every command of its ```bash blocks, the spec it shows, its links.

The commands are read from README.md itself, so a command added to the README is run here without
touching this file. They run in order, in segments (one `tune` or `sweep` each with the commands
after it: `axon runs` lists the sweep's runs), each segment in a scratch copy of the repository
whose `.venv` links to the environment under test, so `.axon/`, kernels and timelines land in the
copy. Each `.venv/bin/axon` command executes that console script in the test's process (its argv,
working directory and environment set as a new process would have them), except `axon ui`, which
serves until Ctrl-C and runs in a process of its own. Two lines are not run, and the skip list says
why; the test fails if the README's `make` lines and the skip list ever disagree.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import queue
import re
import runpy
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import traceback
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from axon.cli.track import _descendants
from axon.options import parse_shape_range
from axon.workdir import pid_alive
from tests.conftest import REPO, axon_in_process, exit_status, rel_err

README = REPO / "README.md"

# The only README commands not executed. `make test` runs this suite, so running it from here would
# recurse. `make demo` first creates .venv and installs Axon (minutes, network) and then runs
# `python -m axon.demo`, whose steps are `axon workloads`, `axon variants rmsnorm_matmul`, the
# configs/sweeps/demo.yaml sweep and `axon runs`: the tour below runs each of those as a command of
# its own. Both are checked against the Makefile instead (`test_make_lines`).
NOT_RUN = {("make", "demo"): "-m axon.demo", ("make", "test"): "pytest"}

COMMAND_TIMEOUT_S = 300
UI_TIMEOUT_S = 120


def bash_blocks(text: str) -> list[list[str]]:
    """The lines of every ```bash fenced block, in order."""
    return [block.splitlines() for block in re.findall(r"^```bash\n(.*?)^```", text, flags=re.S | re.M)]


def readme_commands() -> list[str]:
    """Every non-empty line of the README's bash blocks (each line is one command)."""
    lines = [line.strip() for block in bash_blocks(README.read_text()) for line in block]
    commands = [line for line in lines if line and not line.startswith("#")]
    continued = [c for c in commands if c.endswith("\\")]
    assert not continued, f"README commands continued over lines are not supported here: {continued}"
    return commands


def argv_of(command: str) -> list[str]:
    return shlex.split(command, comments=True)


def tour_commands() -> list[str]:
    return [c for c in readme_commands() if tuple(argv_of(c)) not in NOT_RUN]


def _heavy(command: str) -> bool:
    return argv_of(command)[1:2] in (["tune"], ["sweep"])


def tour_segments() -> list[list[str]]:
    """The tour cut before every `tune` or `sweep` but the first: each segment is one heavy command
    with the cheap ones after it (`axon runs` and `axon ui` follow the sweep, and read what it
    wrote), so the segments run side by side on the test workers instead of as one long test."""
    segments: list[list[str]] = [[]]
    for command in tour_commands():
        if _heavy(command) and any(_heavy(c) for c in segments[-1]):
            segments.append([])
        segments[-1].append(command)
    return segments


def allowed_exit_codes(argv: list[str]) -> set[int]:
    """0; and 3 for `--fail-on-regression` only because the README documents that exit code."""
    documented = "`--fail-on-regression` exits 3" in README.read_text()
    return {0, 3} if "--fail-on-regression" in argv and documented else {0}


# ---- the cheap checks -------------------------------------------------------------------------


def test_readme_has_the_tour():
    assert [argv_of(c) for c in readme_commands()[:2]] == [["make", "demo"], ["make", "test"]]
    subcommands = {tuple(argv_of(c)[1:3]) for c in tour_commands()}
    for expected in [
        ("workloads",),
        ("variants", "rmsnorm_matmul"),
        ("runs",),
        ("ui",),
        ("nki", "run"),
        ("nki", "profile"),
    ]:
        assert any(s[: len(expected)] == expected for s in subcommands), expected
    assert sum(argv_of(c)[1] == "tune" for c in tour_commands()) >= 3


def test_skip_list_is_exactly_the_make_lines():
    make_lines = {tuple(argv_of(c)) for c in readme_commands() if argv_of(c)[0] == "make"}
    assert make_lines == set(NOT_RUN), "README make lines and NOT_RUN differ: run the new line or justify skipping it"


@pytest.mark.parametrize("target", sorted(t for _, t in NOT_RUN))
def test_make_lines(target):
    """`make -n` (prints, runs nothing) shows what the README's make line would do."""
    assert shutil.which("make"), "make is not installed"
    out = subprocess.run(["make", "-n", target], cwd=REPO, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert NOT_RUN[("make", target)] in out.stdout, out.stdout
    if target == "demo":
        from axon.search.sweepconfig import load_sweep

        config = load_sweep(REPO / "configs" / "sweeps" / "demo.yaml")  # what axon.demo sweeps
        assert len(config.entries) == 2  # "tunes two workloads"


def test_spec_section_shows_examples_my_model():
    text = README.read_text()
    section = text[text.index("## Writing a spec") :]
    shown = re.search(r"^```python\n(.*?)^```", section, flags=re.S | re.M).group(1)
    assert "this is `examples/my_model.py`" in section.split("```python")[0]
    assert shown == (REPO / "examples" / "my_model.py").read_text()


def test_readme_documents_gelu_approximation():
    """The README says `ax.gelu` is the tanh form; the reference evaluator agrees, and not with erf."""
    from math import erf

    import axon.spec as ax
    from axon.ir import evaluate, trace

    assert "`ax.gelu` is the tanh approximation" in README.read_text()

    @ax.spec(x="N")
    def gelu_only(x):
        return ax.gelu(x)

    x = np.linspace(-4, 4, 81)
    (y,) = evaluate(trace(gelu_only, N=x.size), {"x": x}).values()
    assert rel_err(y, _gelu_tanh(x)) < 1e-12
    assert rel_err(y, 0.5 * x * (1 + np.vectorize(erf)(x / np.sqrt(2)))) > 1e-4


# Paths the README names that a run creates (gitignored), so a fresh clone does not have them.
MADE_BY_RUNS = {"experiments/results/work/"}  # results_table.py's cache of rows and measurements


def test_readme_paths_exist():
    """Markdown links and the repository paths the README names in backticks are in the repository."""
    text = README.read_text()
    links = [t for t in re.findall(r"\]\(([^)]+)\)", text) if "://" not in t]
    named = [
        t
        for t in re.findall(r"`((?:docs|examples|configs|models|experiments)/[^`\s]*)`", text)
        if not any(ch in t for ch in "*{") and t not in MADE_BY_RUNS
    ]
    missing = [t for t in links + named if not (REPO / t.split("#")[0]).exists()]
    assert links and not missing, f"README names paths that do not exist: {missing}"


# ---- the example specs and kernel the README points at ------------------------------------------


def _gelu_tanh(x):
    return 0.5 * x * (1 + np.tanh(np.sqrt(2 / np.pi) * (x + 0.044715 * x**3)))


# file:function -> the formula from the README's table, in float64 NumPy over the named inputs
EXAMPLE_SPECS = {
    "my_model.py:rmsnorm_matmul": lambda x, g, w: (x / np.sqrt((x * x).mean(-1, keepdims=True) + 1e-6) * g) @ w,
    "geglu.py:geglu": lambda x, wg, wu: _gelu_tanh(x @ wg) * (x @ wu),
    "add_layernorm.py:add_layernorm": lambda x, r, g, b: (
        ((x + r) - (x + r).mean(-1, keepdims=True)) / np.sqrt((x + r).var(-1, keepdims=True) + 1e-5) * g + b
    ),
    "logsumexp.py:logsumexp": lambda x: (
        x.max(-1, keepdims=True) + np.log(np.exp(x - x.max(-1, keepdims=True)).sum(-1, keepdims=True))
    ),
    "l2norm_matmul.py:l2norm_matmul": lambda x, w: (x / np.sqrt((x * x).sum(-1, keepdims=True) + 1e-12)) @ w,
}


def test_readme_lists_every_example_spec():
    text = README.read_text()
    on_disk = {p.name for p in (REPO / "examples").glob("*.py")}
    listed = {ref.split(":")[0] for ref in EXAMPLE_SPECS}
    assert on_disk == listed
    for ref in EXAMPLE_SPECS:
        assert f"`{ref}`" in text, f"README's examples table does not list {ref}"


@pytest.mark.parametrize("ref", sorted(EXAMPLE_SPECS))
def test_example_spec_computes_its_formula(ref):
    from axon.ir import evaluate, random_inputs
    from axon.workloads import load_spec

    w = load_spec(str(REPO / "examples" / ref))
    assert set(w.presets) == {"default", "small"}
    w.graph("default")  # binds every dimension
    g = w.graph("small")
    inputs = random_inputs(g, 0)
    (out,) = evaluate(g, inputs).values()
    expected = EXAMPLE_SPECS[ref](*(np.asarray(v, dtype=np.float64) for v in inputs.values()))
    assert rel_err(out, expected) < 1e-12


@pytest.mark.parametrize("ref", sorted(EXAMPLE_SPECS))
def test_example_spec_variants_agree(ref):
    """Every discovered variant of an example evaluates to what the spec computes."""
    from axon.ir import evaluate, random_inputs
    from axon.synth import discover_variants
    from axon.verify import Proof
    from axon.workloads import load_spec

    g = load_spec(str(REPO / "examples" / ref)).graph("small")
    inputs = random_inputs(g, 1)
    (expected,) = evaluate(g, inputs).values()
    variants = discover_variants(g, max_depth=2, max_variants=8)
    assert variants
    for v in variants:
        if all(isinstance(p, Proof) for p in v.proofs):
            (got,) = evaluate(v.graph, inputs).values()
            assert rel_err(got, expected) < 1e-9, v.moves


@pytest.mark.parametrize("rows, dtype, tol", [(256, "float32", 1e-6), (200, "float32", 1e-6), (128, "bfloat16", 1e-2)])
def test_example_kernel_normalizes_rows(rows, dtype, tol):
    import axon.nki
    from axon.nki.dtypes import as_dtype

    kernel = axon.nki.load_kernel(str(REPO / "examples" / "kernels" / "l2norm.py") + ":l2_normalize")
    a = np.random.default_rng(rows).standard_normal((rows, 512)).astype(as_dtype(dtype))
    out = axon.nki.run(kernel, a)
    a64 = a.astype(np.float64)
    assert out.dtype == a.dtype
    assert rel_err(out, a64 / np.sqrt((a64 * a64).sum(-1, keepdims=True) + 1e-12)) < tol


# ---- the tour, run as written -------------------------------------------------------------------


def _environment_under_test() -> Path:
    for venv in (Path(sys.prefix), REPO / ".venv"):
        if (venv / "bin" / "axon").exists():
            return venv
    pytest.fail("no environment with bin/axon (the README's commands run .venv/bin/axon): run `make setup`")


def _scratch_repo(tmp: Path) -> Path:
    """A copy of the repository as a fresh clone has it, with `.venv` linked to the environment under test."""
    repo = tmp / "axon"
    shutil.copytree(
        REPO,
        repo,
        symlinks=True,
        ignore=shutil.ignore_patterns(
            ".venv",
            ".git",
            ".axon",
            "__pycache__",
            "*.egg-info",
            ".pytest_cache",
            ".hypothesis",
            "mlruns",
            "mlartifacts",
            "mlflow.db",
            "work",
            "model_work",
        ),
    )
    (repo / ".venv").symlink_to(_environment_under_test(), target_is_directory=True)
    return repo


def _serve_then_stop(argv: list[str], cwd: Path, env: dict[str, str]) -> tuple[int, str, str]:
    """A serving command (`axon ui`): wait for its URL, fetch it, then Ctrl-C it as the README says.

    Returns the exit code, stderr and what went wrong ("" when the page answered and Ctrl-C stopped it).
    """
    errors = tempfile.TemporaryFile("w+")  # a file, not a pipe: a chatty server cannot block on it
    proc = subprocess.Popen(
        argv, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=errors, text=True, start_new_session=True
    )
    lines: queue.Queue[str] = queue.Queue()
    threading.Thread(target=lambda: [lines.put(line) for line in proc.stdout], daemon=True).start()
    deadline, url, note = time.monotonic() + UI_TIMEOUT_S, None, ""
    try:
        while url is None and time.monotonic() < deadline and proc.poll() is None:
            try:
                found = re.search(r"https?://[^\s]+", lines.get(timeout=1))
            except queue.Empty:
                continue
            url = found.group(0) if found else None
        if url is None:
            note = f"no URL printed within {UI_TIMEOUT_S} s"
        else:
            try:
                with urllib.request.urlopen(url, timeout=30) as page:
                    note = "" if page.status == 200 else f"{url} answered {page.status}"
            except OSError as exc:
                note = f"{url}: {exc}"
    finally:
        tree = _descendants(proc.pid)  # the MLflow server and its uvicorn: Ctrl-C stops them all
        if proc.poll() is None:
            proc.send_signal(signal.SIGINT)
        try:
            code = proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            proc.kill()
            code = proc.wait()
            note += "; did not stop on Ctrl-C (SIGINT) within 60 s"
    left = {pid for pid in tree if pid_alive(pid)}
    deadline = time.monotonic() + 10
    while left and time.monotonic() < deadline:
        time.sleep(0.1)
        left = {pid for pid in left if pid_alive(pid)}
    for pid in left:
        os.kill(pid, signal.SIGKILL)
    if url is not None and len(tree) < 2:
        note += f"; {len(tree)} processes under it (the MLflow server and its uvicorn expected)"
    if left:
        note += f"; processes {sorted(left)} still ran 10 s after Ctrl-C"
    errors.seek(0)
    return code, errors.read(), note


class _CommandTimedOut(BaseException):
    """Raised in a command run in this process when it overruns: not an Exception, so that no
    `except Exception` in the command (a trial's error handling) takes it for its own failure."""


@contextlib.contextmanager
def _process_state(argv: list[str], cwd: Path, env: dict[str, str]) -> Iterator[tuple[io.StringIO, io.StringIO]]:
    """This process set up as a new process of `argv` would start: its argv, working directory
    and environment, stdout and stderr captured, SIGINT's handler and a SIGALRM deadline of
    COMMAND_TIMEOUT_S; all put back after."""
    saved_env, saved_argv, saved_cwd = dict(os.environ), sys.argv, Path.cwd()
    saved_int = signal.getsignal(signal.SIGINT)

    def overrun(signum, frame):
        raise _CommandTimedOut

    saved_alarm = signal.signal(signal.SIGALRM, overrun)
    out, err = io.StringIO(), io.StringIO()
    try:
        os.environ.clear()
        os.environ.update(env)
        sys.argv = list(argv)
        os.chdir(cwd)
        signal.alarm(COMMAND_TIMEOUT_S)
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            yield out, err
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, saved_alarm)
        signal.signal(signal.SIGINT, saved_int)
        os.chdir(saved_cwd)
        sys.argv = saved_argv
        os.environ.clear()
        os.environ.update(saved_env)


def _run_as_written(argv: list[str], cwd: Path, env: dict[str, str]) -> tuple[int, str]:
    """Run a README command: exit code and stderr.

    `.venv/bin/axon` is the console script pip wrote for the `axon` entry point (a Python file
    whose `__main__` block is `sys.exit(main())` of `axon.cli`). It is executed in this process,
    as its interpreter would execute it, with the command's argv, working directory and
    environment: the same code and arguments as in a new process, without the few seconds of
    imports (Axon, MLflow, XGBoost) each new process pays. An exception it lets through is a
    traceback on stderr and exit 1, as Python prints it. Anything else runs in a new process.
    """
    script = cwd / argv[0]
    first_line = script.read_bytes().split(b"\n", 1)[0] if script.is_file() else b""
    if not (first_line.startswith(b"#!") and b"python" in first_line):
        try:
            done = subprocess.run(argv, cwd=cwd, env=env, capture_output=True, text=True, timeout=COMMAND_TIMEOUT_S)
            return done.returncode, done.stderr
        except subprocess.TimeoutExpired:
            return -1, f"timed out after {COMMAND_TIMEOUT_S} s"
    code = 0
    with _process_state(argv, cwd, env) as (_, err):
        try:
            runpy.run_path(str(script), run_name="__main__")
        except SystemExit as exc:
            code = exit_status(exc, err)
        except _CommandTimedOut:
            code = -1
            err.write(f"timed out after {COMMAND_TIMEOUT_S} s\n")
        except Exception:
            code = 1
            err.write(traceback.format_exc())
    return code, err.getvalue()


def test_tour_segments_are_the_tour_in_order():
    segments = tour_segments()
    assert [c for seg in segments for c in seg] == tour_commands()
    assert all(sum(_heavy(c) for c in seg) <= 1 for seg in segments)
    assert len(segments) >= 4


@pytest.mark.slow
@pytest.mark.parametrize(
    "segment",
    range(len(tour_segments())),
    ids=lambda i: " ".join(argv_of(next(c for c in tour_segments()[i] if _heavy(c)))[1:3]),
)
def test_tour_runs_as_written(tmp_path, segment):
    repo = _scratch_repo(tmp_path)
    commands = tour_segments()[segment]
    env = {k: v for k, v in os.environ.items() if k not in ("AXON_HOME", "MLFLOW_TRACKING_URI")}
    env["OMP_NUM_THREADS"] = "1"  # the Makefile's setting for tests; the machine has 2 cores
    failures, timings = [], []
    for command in commands:
        argv = argv_of(command)
        start = time.perf_counter()
        problem = ""
        if argv[1:2] == ["ui"]:
            code, stderr, problem = _serve_then_stop(argv, repo, env)
        else:
            code, stderr = _run_as_written(argv, repo, env)
        timings.append(f"{time.perf_counter() - start:6.1f} s  {command}")
        if code not in allowed_exit_codes(argv) or "Traceback" in stderr or problem:
            tail = "\n      ".join(([problem] if problem else []) + stderr.strip().splitlines()[-6:])
            failures.append(f"exit {code}: {command}\n      {tail}")
        elif argv[1:3] == ["nki", "profile"]:  # the timeline files the README says it writes
            out = Path(argv[argv.index("--out") + 1]) if "--out" in argv else Path(".")
            timeline = repo / out / (argv[3].rpartition(":")[2] + ".perfetto.json")
            if not timeline.is_file():
                failures.append(f"no {timeline.relative_to(repo)}: {command}")
    print("\n".join(timings))
    assert not failures, "README commands that fail as written:\n" + "\n".join(failures)
    tunes = [argv_of(c) for c in commands if argv_of(c)[1] == "tune"]
    for argv in (a for a in tunes if not _tunes_a_family(a)):
        if "--out" in argv:
            assert (repo / argv[argv.index("--out") + 1]).is_file(), f"no kernel at --out: {argv}"
        else:
            assert list((repo / ".axon" / "kernels").glob("*.py")), "the tunes wrote no kernel under .axon/kernels/"
    if any(_tunes_a_family(argv) for argv in tunes):  # a shape range: a family module and its kernels
        assert list((repo / ".axon" / "families").glob("*/*_family.py")), "the family tune wrote no family module"


def _tunes_a_family(argv: list[str]) -> bool:
    """`--shape` gives a range or a list of values for some dimension."""
    shape = argv[argv.index("--shape") + 1] if "--shape" in argv else ""
    return any(len(values) > 1 for values in parse_shape_range(shape).values())


@pytest.mark.slow
@pytest.mark.parametrize("ref", sorted(EXAMPLE_SPECS))
def test_example_spec_tunes(ref, tmp_path):
    """Each example is a workload like the built-in ones: a few trials give a kernel that passes numerics."""
    done = axon_in_process(  # the CLI's main() in this process: the tour runs the installed `axon` script
        "tune",
        f"examples/{ref}",
        "--preset",
        "small",
        "--trials",
        "4",
        "--no-track",
        "--json",
        "--workdir",
        str(tmp_path),
    )
    assert done.returncode == 0, done.stderr[-2000:]
    report = json.loads(done.stdout)
    assert report["numerics"]["max_rel_err"] <= report["numerics"]["tolerance"]
    assert Path(report["kernel_path"]).is_file()


@pytest.mark.slow
def test_architecture_section_python_example_runs(tmp_path, monkeypatch, capsys):
    """The tune-seam example of the Architecture section runs as shown (in a scratch $AXON_HOME)."""
    text = README.read_text()
    section = text[text.index("### The tune seam") :]
    code = re.search(r"^```python\n(.*?)^```", section, flags=re.S | re.M).group(1)
    monkeypatch.setenv("AXON_HOME", str(tmp_path / "home"))
    monkeypatch.chdir(tmp_path)
    namespace: dict = {}
    exec(compile(code, "README.md", "exec"), namespace)
    printed = capsys.readouterr().out.splitlines()
    assert len(printed) == 8 and all(
        line.split()[1] in ("measured", "reused", "infeasible", "error") for line in printed
    )
    assert namespace["report"].best_latency_ns > 0
    assert (tmp_path / "home" / "records.db").exists()  # $AXON_HOME was the working directory
