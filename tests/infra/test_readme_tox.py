"""What the README says ``tox``, ``tox -m ci`` and ``tox -m hw`` run is what tox.ini says.

The README once said ``tox`` runs ``cpu-fake`` and ``lint`` while tox.ini's ``env_list`` also
held ``mooncake-real``; the sentence between the ``tox:begin``/``tox:end`` markers is now
checked name by name against tox.ini.
"""

from __future__ import annotations

import configparser
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _names(text: str) -> list[str]:
    return [n.strip() for n in re.split(r"[,\s]+", text) if n.strip()]


def tox_sets() -> dict[str, list[str]]:
    ini = configparser.ConfigParser(interpolation=None)
    ini.read(ROOT / "tox.ini")
    labels = {}
    for line in ini["tox"]["labels"].strip().splitlines():
        label, _, envs = line.partition("=")
        labels[label.strip()] = _names(envs)
    return {"tox": _names(ini["tox"]["env_list"]), **{f"tox -m {k}": v
                                                       for k, v in labels.items()}}


def readme_sets(text: str) -> dict[str, list[str]]:
    block = text.split("<!-- tox:begin")[1].split("<!-- tox:end -->")[0]
    block = " ".join(block.split("\n", 1)[1].split())
    out = {}
    for m in re.finditer(r"`(tox(?: -m \w+)?)` runs (.+?)(?:;|\(tox\.ini|$)", block):
        out[m.group(1)] = re.findall(r"`([\w-]+)`", m.group(2))
    return out


def test_the_readme_names_the_envs_tox_ini_runs() -> None:
    readme = readme_sets((ROOT / "README.md").read_text())
    assert readme == tox_sets()


def test_the_check_sees_a_missing_env() -> None:
    text = ("<!-- tox:begin x -->\n`tox` runs `cpu-fake` and `lint` by default; `tox -m ci` "
            "runs `cpu-fake`; `tox -m hw` runs `gpu-real`\n<!-- tox:end -->")
    assert readme_sets(text)["tox"] == ["cpu-fake", "lint"] != tox_sets()["tox"]
