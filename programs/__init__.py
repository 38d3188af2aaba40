"""dmn.programs — the builtin plugins as data (design §2, §3.7).

Each plugin lives in ``<plugin>/<version>/``: ``plugin.yaml`` (a NetworkPlugin CR whose
``hooks`` hold only the cleanup entries) and sibling ``prepare.yaml`` / ``connect.yaml``
HookProgram files. This package imports nothing; :data:`PROGRAMS_DIR` locates the folder.
"""

from pathlib import Path

PROGRAMS_DIR = Path(__file__).resolve().parent
"""The folder holding the builtin plugin directories."""
