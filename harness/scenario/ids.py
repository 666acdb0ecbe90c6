"""Scenario ids: one id per scenario, whatever folder kvreg runs from and however the path
to its file is spelled, so a baseline written in one place holds in every other.

A scenario's id is ``<its file's path from the id root, without .toml>/<name>``, the way
pytest names a test by its path from the rootdir. The id root of a file (symlinks followed):

1. kvreg's own catalog, for the files in it: ``mha/unregister_faults/teardown-runtime-unloading``;
2. else the folder pytest would take as rootdir for the file's folder
   (https://docs.pytest.org/en/stable/reference/customize.html, "Finding the rootdir";
   pytest 9's ``_pytest/config/findpaths.py``): the nearest folder at or above it with a
   pytest configuration (``pytest.toml``, ``.pytest.toml``, ``pytest.ini``, ``.pytest.ini``;
   ``pyproject.toml`` with a ``[tool.pytest]`` or ``[tool.pytest.ini_options]`` table;
   ``tox.ini`` with ``[pytest]``; ``setup.cfg`` with ``[tool:pytest]``), else the nearest
   with a ``pyproject.toml``, else the nearest with a ``setup.py``;
3. else (no project around the file) the folder kvreg was given (a ``kvreg run`` PATH, a
   ``kvreg_scenarios`` entry; a file's own folder when the file itself was given).

So in a repository ``kvreg run kv_scenarios`` from its root, ``kvreg run ../kv_scenarios``
from a subfolder, ``kvreg run kv_scenarios/mla/pool.toml`` and the plugin's items all name a
scenario ``kv_scenarios/mla/pool/<name>``. The root is found from the file, not from the
command line (pytest starts from its arguments): the same file always has the same id.
"""

from __future__ import annotations

import re
import tomllib
from functools import lru_cache
from pathlib import Path

__all__ = ["PYTEST_CONFIGS", "catalog_folder", "file_id", "id_root", "project_root"]

# the names pytest looks for at each folder, in its order (locate_config's config_names)
PYTEST_CONFIGS = ("pytest.toml", ".pytest.toml", "pytest.ini", ".pytest.ini", "pyproject.toml",
                  "tox.ini", "setup.cfg")
_SECTION = re.compile(r"^\[([^\]]*)\]")


def _ini_sections(path: Path) -> set[str]:
    """The section names of an ini file (what iniconfig sees as ``[name]`` lines)."""
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return set()
    return {m.group(1).strip() for line in text.splitlines() if (m := _SECTION.match(line))}


def _has_pytest_config(path: Path) -> bool:
    """Whether pytest would take this file as its configuration (findpaths'
    ``load_config_dict_from_file`` returning a table)."""
    if path.name in ("pytest.toml", ".pytest.toml", "pytest.ini", ".pytest.ini"):
        return True     # always the configuration, even when empty
    if path.name == "pyproject.toml":
        try:
            data = tomllib.loads(path.read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError):
            return False
        tool = data.get("tool")
        table = tool.get("pytest") if isinstance(tool, dict) else None
        return isinstance(table, dict) and bool(table)
    if path.name == "tox.ini":
        return "pytest" in _ini_sections(path)
    return "tool:pytest" in _ini_sections(path)   # setup.cfg


def project_root(folder: Path) -> Path | None:
    """The rootdir pytest would find for ``folder`` (an absolute, resolved path), or None
    when no configuration, ``pyproject.toml`` or ``setup.py`` lies at or above it."""
    chain = (folder, *folder.parents)
    first_pyproject: Path | None = None
    for base in chain:
        for name in PYTEST_CONFIGS:
            p = base / name
            if p.is_file():
                if name == "pyproject.toml" and first_pyproject is None:
                    first_pyproject = base
                if _has_pytest_config(p):
                    return base
    if first_pyproject is not None:
        return first_pyproject
    return next((base for base in chain if (base / "setup.py").is_file()), None)


def catalog_folder() -> Path:
    """The folder of the scenario files shipped with kvreg (``bundled``)."""
    from importlib import resources

    return Path(str(resources.files("kvreg.scenarios")))


@lru_cache(maxsize=1)
def _catalog() -> Path:
    return catalog_folder().resolve()


def id_root(file: Path, given: Path | None = None) -> Path:
    """The folder the ids of the scenarios in ``file`` are relative to (the module's rule);
    ``given`` is the folder kvreg was pointed at, used only where no project is found."""
    real = Path(file).resolve()
    catalog = _catalog()
    if catalog in real.parents:
        return catalog
    root = project_root(real.parent)
    if root is not None:
        return root
    if given is not None:
        top = Path(given).resolve()
        if top in real.parents:
            return top
    return real.parent.parent


def file_id(file: Path, given: Path | None = None) -> str:
    """The id prefix of the scenarios in ``file``: its path from :func:`id_root`, without
    ``.toml``, ``/``-separated (a scenario's id is ``<file_id>/<name>``)."""
    real = Path(file).resolve()
    return real.with_suffix("").relative_to(id_root(real, given)).as_posix()
