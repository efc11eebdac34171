"""Imported by every experiment before it imports axon: puts the repository this script sits in
ahead of any installed axon on `sys.path`.

A script's `sys.path` starts at its own folder, and the development venv holds an editable install
of one checkout: without this, a script run from a second checkout (a git worktree) would time that
other checkout's code and report it as this one's.
"""

import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
if sys.path[:1] != [str(REPO)]:
    sys.path.insert(0, str(REPO))
