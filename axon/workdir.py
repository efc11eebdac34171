"""`Workdir`: the one owner of the working directory's layout and of `$AXON_HOME`.

Every path Axon keeps state under is a property here, so the layout is spelled once:

    WORKDIR/records.db            measurements (the source of truth, `axon.measure.records`)
    WORKDIR/optuna.log            Optuna journal (a view, rebuilt from records.db if lost)
    WORKDIR/optuna.log.flock      its write lock (an OS lock, released when a writer dies)
    WORKDIR/mlflow.db             embedded MLflow store, WORKDIR/mlartifacts its artifacts
    WORKDIR/kernels/              the best kernels `axon tune` writes
    WORKDIR/cache/kernels/        kernel files traced while tuning
    WORKDIR/plots/                plots logged to MLflow runs
    WORKDIR/sweeps/               a sweep's resumable state
    WORKDIR/models/               cost models a sweep trained

The CLI and the Python API resolve a workdir the same way: the one given, else `$AXON_HOME`,
else `./.axon`.

>>> import os, tempfile
>>> wd = Workdir.resolve(os.path.join(tempfile.mkdtemp(), "w"))
>>> wd.records.name, wd.kernel_cache.relative_to(wd.root).as_posix()
('records.db', 'cache/kernels')
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from axon.errors import StoreError

ENV = "AXON_HOME"
DEFAULT = ".axon"
SUBDIRS = ("kernels", "cache", "cache/kernels", "plots", "sweeps", "models", "families", "mlartifacts")


@dataclass(frozen=True)
class Workdir:
    """A working directory, created on `resolve` (absolute path)."""

    root: Path

    @classmethod
    def resolve(cls, given: str | os.PathLike[str] | Workdir | None = None) -> Workdir:
        """`given`, else $AXON_HOME, else ./.axon; created if missing. StoreError when it is a file
        or cannot be created."""
        if isinstance(given, Workdir):
            return given
        root = cls.locate(given)
        if root.exists() and not root.is_dir():
            raise StoreError(f"workdir {root} is a file, not a directory: pass another --workdir")
        try:
            root.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise StoreError(f"workdir {root} cannot be created: {exc.strerror or exc}") from None
        if not os.access(root, os.W_OK | os.X_OK):  # a read-only mount, another user's directory
            raise StoreError(f"workdir {root} is not writable: pass another --workdir")
        for sub in SUBDIRS:  # created when first written, after the tuning: a file there was a traceback then
            if (root / sub).exists() and not (root / sub).is_dir():
                raise StoreError(f"workdir {root}: {sub} is a file, not a directory: move it or pass another --workdir")
        return cls(root)

    @classmethod
    def locate(cls, given: str | os.PathLike[str] | None = None) -> Path:
        """The path `resolve` would use, without creating it (for commands that only read)."""
        # `--workdir=~/x` and AXON_HOME=~/x in an env file reach here unexpanded: they made a directory "~" here
        path = Path(given or os.environ.get(ENV) or DEFAULT).expanduser()
        try:
            return path.resolve()
        except RuntimeError:  # Python 3.11's resolve of a symlink loop: it was a traceback
            raise StoreError(
                f"workdir {path} is a symbolic link that leads back to itself: pass another --workdir"
            ) from None

    @property
    def records(self) -> Path:
        return self.root / "records.db"

    @property
    def journal(self) -> Path:
        return self.root / "optuna.log"

    @property
    def mlflow_db(self) -> Path:
        return self.root / "mlflow.db"

    @property
    def tracking_uri(self) -> str:
        return f"sqlite:///{self.mlflow_db}"

    @property
    def artifact_root(self) -> str:
        return (self.root / "mlartifacts").as_uri()

    @property
    def kernels(self) -> Path:
        return self.root / "kernels"

    @property
    def kernel_cache(self) -> Path:
        return self.root / "cache" / "kernels"

    @property
    def plots(self) -> Path:
        return self.root / "plots"

    @property
    def sweeps(self) -> Path:
        return self.root / "sweeps"

    @property
    def models(self) -> Path:
        return self.root / "models"

    def __fspath__(self) -> str:
        return str(self.root)

    def __str__(self) -> str:
        return str(self.root)


def pid_alive(pid: int) -> bool:
    """Is process `pid` on this host still running? (A zombie counts as dead: its parent reaps it; a
    process of another user counts as alive.) Used to take over locks, claims and leases of killed workers."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return True
