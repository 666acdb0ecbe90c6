"""cudaDeviceGetAttribute: every cudaDeviceAttr member answers, per device profile.

Values are labelled [DOC] (NVIDIA's compute-capability 9.0 tables, the GH100 whitepaper,
docs/cuda-runtime.md §2.1/§4) or [INF]; these tests check the table against those sources
and check that the attributes feature probes read no longer come back "unsupported".
"""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from kvreg.fakes.cuda.device_attributes import (
    DEVICES,
    attribute_mismatches,
    attribute_table,
    attribute_value,
)
from kvreg.fakes.cuda.fake_cuda import FakeCuda
from kvreg.fakes.cuda.profile import PROFILES, DeviceProfile

# CUDA C++ Programming Guide, "Technical Specifications per Compute Capability", column 9.0
# (sm_90: H100 and H200), typed here from the guide, independently of the data file
CC_9_0 = {
    "cudaDevAttrMaxThreadsPerBlock": 1024, "cudaDevAttrMaxBlockDimX": 1024,
    "cudaDevAttrMaxBlockDimY": 1024, "cudaDevAttrMaxBlockDimZ": 64,
    "cudaDevAttrMaxGridDimX": 2**31 - 1, "cudaDevAttrMaxGridDimY": 65535,
    "cudaDevAttrMaxGridDimZ": 65535, "cudaDevAttrWarpSize": 32,
    "cudaDevAttrMaxThreadsPerMultiProcessor": 2048, "cudaDevAttrMaxBlocksPerMultiprocessor": 32,
    "cudaDevAttrMaxRegistersPerBlock": 64 * 1024,
    "cudaDevAttrMaxRegistersPerMultiprocessor": 64 * 1024,
    "cudaDevAttrMaxSharedMemoryPerBlock": 48 * 1024,
    "cudaDevAttrMaxSharedMemoryPerBlockOptin": 227 * 1024,
    "cudaDevAttrMaxSharedMemoryPerMultiprocessor": 228 * 1024,
    "cudaDevAttrReservedSharedMemoryPerBlock": 1024,
    "cudaDevAttrTotalConstantMemory": 64 * 1024,
    "cudaDevAttrComputeCapabilityMajor": 9, "cudaDevAttrComputeCapabilityMinor": 0,
    "cudaDevAttrMaxTexture1DWidth": 131072, "cudaDevAttrMaxTexture1DLinearWidth": 2**28,
    "cudaDevAttrMaxTexture2DWidth": 131072, "cudaDevAttrMaxTexture2DHeight": 65536,
    "cudaDevAttrMaxTexture3DWidth": 16384, "cudaDevAttrMaxTexture3DHeight": 16384,
    "cudaDevAttrMaxTexture3DDepth": 16384, "cudaDevAttrMaxTextureCubemapWidth": 32768,
    "cudaDevAttrMaxTextureCubemapLayeredLayers": 2046,
    "cudaDevAttrMaxSurface2DWidth": 131072, "cudaDevAttrMaxSurface2DHeight": 65536,
    "cudaDevAttrClusterLaunch": 1, "cudaDevAttrCooperativeLaunch": 1,
}
# NVIDIA H100 Tensor Core GPU Architecture whitepaper: GH100 in SXM5 form (H200: same die)
GH100_SXM = {"cudaDevAttrMultiProcessorCount": 132, "cudaDevAttrL2CacheSize": 50 << 20,
             "cudaDevAttrGlobalMemoryBusWidth": 5120}


def _by_name(device: str) -> dict[str, int | None]:
    return {row.name: row.value for row in attribute_table(device).values()}


def _members() -> dict[int, str]:
    try:
        from cuda.bindings import runtime
    except ImportError:
        return {a: row.name for a, row in attribute_table("H200").items()}
    return {int(m): m.name for m in runtime.cudaDeviceAttr}


@pytest.mark.parametrize("device", DEVICES)
def test_every_member_has_a_value_or_a_documented_unsupported_answer(device: str) -> None:
    table = attribute_table(device)
    assert set(table) == set(_members())
    for attr, row in table.items():
        assert row.name == _members()[attr]
        assert row.label in ("DOC", "INF") and row.source
        if row.value is None and row.profile_field is None:
            # only reserved members and the enum bound are unsupported
            assert "Reserved" in row.name or row.name == "cudaDevAttrMax", row.name
            assert "InvalidValue" in row.source


@pytest.mark.parametrize("device", DEVICES)
def test_documented_values_match_the_compute_capability_table(device: str) -> None:
    values = _by_name(device)
    for name, expected in {**CC_9_0, **GH100_SXM}.items():
        assert values[name] == expected, name
    labels = {row.name: row.label for row in attribute_table(device).values()}
    assert all(labels[name] == "DOC" for name in {**CC_9_0, **GH100_SXM})


def test_every_doc_row_is_one_the_tests_check_or_cites_its_source() -> None:
    checked = set(CC_9_0) | set(GH100_SXM)
    for row in attribute_table("H200").values():
        if row.label == "DOC" and row.name not in checked:
            assert "Programming Guide" in row.source or "docs/cuda-runtime.md" in row.source \
                or "whitepaper" in row.source, row.name


def test_documented_relations_hold() -> None:
    # CC 9.0: 227 KB opt-in per block + 1 KB reserved per block = 228 KB per SM
    for device in DEVICES:
        v = _by_name(device)
        assert v["cudaDevAttrMaxSharedMemoryPerBlockOptin"] + \
            v["cudaDevAttrReservedSharedMemoryPerBlock"] == \
            v["cudaDevAttrMaxSharedMemoryPerMultiprocessor"]  # type: ignore[operator]
        assert v["cudaDevAttrMaxThreadsPerMultiProcessor"] % v["cudaDevAttrWarpSize"] == 0  # type: ignore[operator]


def test_same_compute_capability_same_documented_values() -> None:
    h200, h100 = attribute_table("H200"), attribute_table("H100")
    for attr, row in h200.items():
        if row.label == "DOC":
            assert h100[attr].value == row.value and h100[attr].label == "DOC", row.name


@pytest.mark.parametrize("attr", [83, 112, 115])
def test_attributes_feature_probes_read_are_supported(attr: int) -> None:
    # these used to return cudaErrorInvalidValue and set the last error
    fake = FakeCuda()
    rt = fake.runtime
    err, value = rt.cudaDeviceGetAttribute(rt.cudaDeviceAttr(attr), 0)
    assert int(err) == 0 and value == 1
    assert int(rt.cudaPeekAtLastError()[0]) == 0


def test_reserved_member_gives_invalid_value_and_sets_the_last_error() -> None:
    fake = FakeCuda()
    rt = fake.runtime
    err, value = rt.cudaDeviceGetAttribute(rt.cudaDeviceAttr(92), 0)
    assert int(err) == 1 and value is None
    assert int(rt.cudaGetLastError()[0]) == 1


@pytest.mark.parametrize("name", sorted(PROFILES))
def test_every_profile_answers_every_member(name: str) -> None:
    fake = FakeCuda(name)
    rt = fake.runtime
    expected_init = {"no-driver": 35, "no-gpu": 100}.get(name, 0)
    for attr in _members():
        err, value = rt.cudaDeviceGetAttribute(attr, 0)
        if expected_init:
            assert int(err) == expected_init and value is None
        else:
            assert (value is None) == (int(err) == 1)


def test_profile_fields_drive_their_attributes() -> None:
    # docs/cuda-runtime.md §2.1/§4: 91 CanUseHostPointerForRegisteredMem (0 on WSL2),
    # 99 HostRegisterSupported, 113 HostRegisterReadOnlySupported
    rt = FakeCuda("wsl2").runtime
    assert rt.cudaDeviceGetAttribute(91, 0)[1] == 0
    assert FakeCuda().runtime.cudaDeviceGetAttribute(91, 0)[1] == 1
    ro = FakeCuda(PROFILES["h200-r580"].replace(read_only_supported=True))
    assert ro.runtime.cudaDeviceGetAttribute(113, 0)[1] == 1
    assert FakeCuda().runtime.cudaDeviceGetAttribute(113, 0)[1] == 0
    off = FakeCuda(PROFILES["h200-r580"].replace(host_register_supported=False))
    assert off.runtime.cudaDeviceGetAttribute(99, 0)[1] == 0


def test_h100_and_h200_differ_where_the_devices_differ() -> None:
    h200, h100 = FakeCuda("h200-r580").runtime, FakeCuda("h100-r575").runtime
    assert h200.cudaDeviceGetAttribute(139, 0)[1] != h100.cudaDeviceGetAttribute(139, 0)[1]
    assert h200.cudaDeviceGetAttribute(16, 0)[1] == h100.cudaDeviceGetAttribute(16, 0)[1] == 132


def test_overrides_from_a_recorded_run() -> None:
    recorded = {"88": 1, "92": None}   # as JSON gives them back
    profile = DeviceProfile.from_dict({"attribute_overrides": recorded})
    assert profile.attribute_overrides == {88: 1, 92: None}
    rt = FakeCuda(profile).runtime
    assert rt.cudaDeviceGetAttribute(88, 0)[1] == 1
    assert attribute_mismatches(profile, {88: 1, 16: 132}) == []
    diff = attribute_mismatches(PROFILES["h200-r580"], {88: 1, 16: 132})
    assert diff == ["cudaDevAttrPageableMemoryAccess (88): profile 0 [INF], device 1"]


@given(st.integers(-5, 400))
def test_non_members_give_invalid_value(attr: int) -> None:
    value = attribute_value(PROFILES["h200-r580"], attr)
    assert (value is None) == (attr not in _members() or
                               (attribute_table("H200")[attr].value is None and
                               attribute_table("H200")[attr].profile_field is None))


def test_invalid_device_gives_101() -> None:
    rt = FakeCuda().runtime
    assert int(rt.cudaDeviceGetAttribute(16, 1)[0]) == 101


def test_profile_round_trips_through_json() -> None:
    import json

    profile = PROFILES["h200-r580"].replace(attribute_overrides={88: 1, 92: None},
                                            reserved_va=((1 << 33, 1 << 36),))
    data = json.loads(json.dumps(profile.to_dict()))
    assert data == profile.to_dict()
    assert DeviceProfile.from_dict(data) == profile
