"""The fake pyverbs against the real one (docs/mooncake-verbs.md §4), with no RDMA device.

Debian's ``python3-pyverbs`` (which ``.ci/run`` installs with apt) puts pyverbs in the
system interpreter's dist-packages, not in the project's virtualenv; mixing the two is
fragile, so the real side runs in that interpreter: ``pyverbs_probe.py`` dumps names, enum
classes and values, class attributes, struct defaults and copy rules, the ``*_to_str``
helpers, constructor keywords and exception formatting as JSON, and the same probe runs
in-process against the fake. The tests compare the two dumps item by item. They skip only
where apt or the package is absent, and say which.
"""

from __future__ import annotations

import functools
import importlib
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from kvreg.fakes.verbs import Fabric
from kvreg.fakes.verbs.enums import SUPPLEMENT

HERE = Path(__file__).parent
sys.path.insert(0, str(HERE))
import pyverbs_probe as probe_mod  # noqa: E402

# names newer than the installed rdma-core (v44) that the fake models from the spec
NEWER_MODULE_NAMES = {"pyverbs.mr": {"MREx"}}      # §4.4 (rdma-core HEAD)
# pyverbs' logging hook on every object: configuration, not verbs behaviour
IGNORED_ATTRS = {"set_log_level"}


def _interpreters() -> list[str]:
    env = os.environ.get("KVREG_PYVERBS_PYTHON")
    found = [env] if env else []
    for cand in ("/usr/bin/python3", shutil.which("python3")):
        if cand and cand not in found and Path(cand).exists():
            found.append(cand)
    return found


@functools.cache
def _real_dump() -> tuple[dict[str, Any] | None, str]:
    """(the real pyverbs' dump, or None and the reason it could not be made)."""
    for python in _interpreters():
        ok = subprocess.run([python, "-c", "import pyverbs.device"], capture_output=True,
                            timeout=120)
        if ok.returncode:
            continue
        res = subprocess.run([python, str(HERE / "pyverbs_probe.py")], capture_output=True,
                             text=True, timeout=300)
        if res.returncode:
            return None, f"the pyverbs probe failed under {python}: {res.stderr[-2000:]}"
        return json.loads(res.stdout), python
    if shutil.which("apt-get") is None:
        return None, ("apt-get is absent on this machine, so Debian's python3-pyverbs "
                      "cannot be installed (the conformance test needs it)")
    return None, ("python3-pyverbs is not installed (apt-get install python3-pyverbs "
                  "puts pyverbs in /usr/bin/python3)")


@pytest.fixture(scope="module")
def real() -> dict[str, Any]:
    dump, why = _real_dump()
    if dump is None:
        if why.startswith("the pyverbs probe failed"):
            pytest.fail(why)
        pytest.skip(why)
    return dump


@functools.cache
def _fake_dump() -> dict[str, Any]:
    with Fabric(devices={"mlx5_0": "mlx5"}).patch():
        dump = probe_mod.probe(importlib.import_module)
    return dict(json.loads(json.dumps(dump, sort_keys=True)))


@pytest.fixture(scope="module")
def fake() -> dict[str, Any]:
    return _fake_dump()


def _fake_instances() -> dict[str, Any]:
    """An object of each compared class, built on a fake fabric (attributes of Cython
    classes are descriptors on the class; the fake's live on instances)."""
    f = Fabric(devices={"mlx5_0": "mlx5"})
    m = f.node().modules
    D, C, Q, W, A = (m["pyverbs.device"], m["pyverbs.cq"], m["pyverbs.qp"], m["pyverbs.wr"],
                     m["pyverbs.addr"])
    ctx = D.Context(name="mlx5_0")
    pd = m["pyverbs.pd"].PD(ctx)
    cq = C.CQ(ctx, 8)
    cap = Q.QPCap(max_send_wr=4, max_recv_wr=4)
    qp = Q.QP(pd, Q.QPInitAttr(qp_type=2, scq=cq, rcq=cq, cap=cap), Q.QPAttr())
    ex_init = Q.QPInitAttrEx(qp_type=2, scq=cq, rcq=cq, cap=cap, pd=pd, send_ops_flags=8)
    attr_ex = ctx.query_device_ex()
    sge = W.SGE(0x1000, 8, 1)
    return {
        "pyverbs.device.Context": ctx, "pyverbs.device.DeviceAttrEx": attr_ex,
        "pyverbs.device.ODPCaps": attr_ex.odp_caps, "pyverbs.device.TSOCaps": attr_ex.tso_caps,
        "pyverbs.device.GIDEntry": ctx.query_gid_ex(1, 0),
        "pyverbs.device.PortAttr": ctx.query_port(1),
        "pyverbs.device.Device": D.get_device_list()[0],
        "pyverbs.cq.CQ": cq, "pyverbs.cq.CompChannel": C.CompChannel(ctx),
        "pyverbs.cq.CQEX": C.CQEX(ctx, C.CqInitAttrEx(cqe=8)),
        "pyverbs.cq.CqInitAttrEx": C.CqInitAttrEx(), "pyverbs.cq.WC": C.WC(),
        "pyverbs.cq.PollCqAttr": C.PollCqAttr(),
        "pyverbs.qp.QP": qp, "pyverbs.qp.QPEx": Q.QPEx(ctx, ex_init),
        "pyverbs.qp.QPAttr": Q.QPAttr(), "pyverbs.qp.QPInitAttr": Q.QPInitAttr(),
        "pyverbs.qp.QPInitAttrEx": ex_init, "pyverbs.qp.QPCap": cap,
        "pyverbs.mr.MR": m["pyverbs.mr"].MR(pd, 64, 1), "pyverbs.pd.PD": pd,
        "pyverbs.wr.SGE": sge, "pyverbs.wr.SendWR": W.SendWR(num_sge=1, sg=[sge]),
        "pyverbs.wr.RecvWR": W.RecvWR(num_sge=1, sg=[sge]),
        "pyverbs.addr.GID": A.GID("fe80:0000:0000:0000:0000:0000:0000:0001"),
        "pyverbs.addr.AHAttr": A.AHAttr(),
        "pyverbs.addr.GlobalRoute": A.GlobalRoute(),
    }


PLAIN_MODULES = [m for m in probe_mod.MODULES if not m.endswith("enums")]


def test_the_real_pyverbs_is_found_where_apt_installed_it() -> None:
    # §4.7 / .ci/run: where apt installed python3-pyverbs the comparison must run
    if Path("/usr/lib/python3/dist-packages/pyverbs").is_dir():
        dump, why = _real_dump()
        assert dump is not None, why
    else:
        pytest.skip("python3-pyverbs is not installed on this machine")


@pytest.mark.parametrize("module", PLAIN_MODULES)
def test_module_names_match(real: dict[str, Any], fake: dict[str, Any], module: str) -> None:
    # every real name exists on the fake (modelled, or a stand-in that refuses to be
    # used), and the fake invents none
    assert module in real["modules"], f"real pyverbs has no {module}"
    r, f = set(real["modules"][module]), set(fake["modules"][module])
    assert sorted(r - f) == [], f"{module}: real names the fake lacks"
    assert sorted(f - r - NEWER_MODULE_NAMES.get(module, set())) == [], \
        f"{module}: names the fake has but the real module lacks"


@pytest.mark.parametrize("module", ["pyverbs.enums", "pyverbs.libibverbs_enums"])
def test_enum_classes_members_and_values_match(real: dict[str, Any], fake: dict[str, Any],
                                               module: str) -> None:
    # §4.6 values; every class and member of the installed generation is in the fake's
    # generated table, with the same value and the same base class (IntEnum)
    if module not in real:
        pytest.skip(f"the installed rdma-core has no {module} (that layout is v59+)")
    r, f = real[module], fake[module]
    assert r["bases"] == f["bases"]
    for cls, members in r["classes"].items():
        assert cls in f["classes"], cls
        for name, value in members.items():
            assert f["classes"][cls].get(name) == value, f"{cls}.{name}"
    # the supplement holds only names newer than the installed release
    real_names = {n for ms in r["classes"].values() for n in ms} | set(r["constants"])
    newer = {e["name"] for e in SUPPLEMENT if e["source"].startswith("docs/mooncake-verbs.md")
             or e["source"].startswith("[inferred]")}
    assert newer & real_names == set(), "a supplement entry is in rdma-core v44 after all"
    for name, value in r["constants"].items():
        assert f["constants"].get(name) == value, name


@pytest.mark.parametrize("cls", sorted(f"{m}.{c}" for m, classes in probe_mod.CLASSES.items()
                                       for c in classes))
def test_class_attributes_exist_on_the_fake(real: dict[str, Any], cls: str) -> None:
    # hasattr behaves as on the real class: each real attribute is there (modelled or a
    # stand-in raising NotModelledError)
    obj = _fake_instances()[cls]
    missing = [n for n in real["classes"].get(cls, [])
               if n not in IGNORED_ATTRS and not hasattr(obj, n)]
    assert missing == [], f"{cls}: attributes the fake lacks"


@pytest.mark.parametrize("helper", sorted(f"{m}.{fn}" for m, fns in
                                          probe_mod.STR_HELPERS.items() for fn in fns))
def test_string_helpers_match(real: dict[str, Any], fake: dict[str, Any],
                              helper: str) -> None:
    assert fake["strings"][helper] == real["strings"][helper]


@pytest.mark.parametrize("section", ["structs", "exceptions", "gid", "constructors"])
def test_struct_rules_exceptions_and_constructors_match(real: dict[str, Any],
                                                        fake: dict[str, Any],
                                                        section: str) -> None:
    # §4.2 exception formatting, §4.5 defaults, QPInitAttr cap write-through and copies,
    # QPAttr.ah_attr copies, Cython's int conversion, constructor keywords
    assert set(fake[section]) == set(real[section])
    for key in real[section]:
        assert fake[section][key] == real[section][key], key
