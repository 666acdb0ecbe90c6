"""The fake NIXL agent against what nixl-cu12 1.5.1 does (docs/nixl.md §3-§5): registration,
deregistration, metadata, transfer requests and their statuses, each behaviour observed on
the wheel's agent (the same calls are held call by call against it in tests/nixl_real)."""

from __future__ import annotations

import sys

import numpy as np
import pytest
import torch

from kvreg.fakes.nixl import FakeNixl, NixlCrash, NotModelledError

from ..helpers.nixl_pair import KiB, Pair, make_pair


def _raises(pair: Pair, name: str) -> type[BaseException]:
    cls: type[BaseException] = getattr(pair.bind, name)
    return cls


# -- the patch contract ---------------------------------------------------------------------

def test_patch_installs_the_meta_packages_layout(pair: Pair) -> None:
    # the nixl meta package (1.5.1) maps nixl._api / nixl._bindings onto nixl_cu12's
    from nixl import nixl_agent as top
    from nixl._api import nixl_agent, nixl_agent_config

    assert isinstance(pair.a, nixl_agent) and isinstance(pair.a, top)
    assert nixl_agent_config().backends == ["UCX"]
    assert pair.bind.NIXL_INIT_AGENT == "" and pair.bind.DEFAULT_COMM_PORT == 8888
    assert int(pair.bind.nixl_status_t.NIXL_ERR_NOT_FOUND) == -4
    assert pair.a.get_plugin_list()[-1] == "UCX"
    assert pair.a.get_backend_mem_types("UCX") == ["DRAM_SEG", "VRAM_SEG"]
    assert pair.a.get_backend_params("UCX") == {}


def test_patch_ends_with_its_block() -> None:
    fake = FakeNixl()
    with fake.patch():
        import nixl._api  # noqa: F401
    assert "nixl._api" not in sys.modules or "kvreg" not in str(sys.modules["nixl._api"])


def test_unmodelled_backends_and_methods_say_so(pair: Pair) -> None:
    with pytest.raises(NotModelledError, match="UCX backend only"):
        pair.a.create_backend("POSIX")
    with pytest.raises(NotModelledError, match="does not model estimate_xfer_cost"):
        pair.a.estimate_xfer_cost(None)
    assert hasattr(pair.a, "make_connection")          # present, as on the real class
    assert not hasattr(pair.a, "no_such_method")


# -- registration (§3) ------------------------------------------------------------------------

def test_overlapping_duplicate_and_zero_length_registrations_are_accepted(pair: Pair) -> None:
    # [OBS-local] all three succeed on 1.5.1 (unlike Mooncake's engine, which refuses them)
    a, pa = pair.a, pair.pa
    a.register_memory([(pa, 4 * KiB, 0, "")], "DRAM")
    a.register_memory([(pa + KiB, 4 * KiB, 0, "")], "DRAM")
    a.register_memory([(pa, 4 * KiB, 0, "")], "DRAM")
    a.register_memory([(pa + 6000, 0, 0, "")], "DRAM")
    assert len(pair.fake.live()) == 4


def test_registration_input_forms(pair: Pair) -> None:
    a, pa = pair.a, pair.pa
    t = torch.zeros(256, dtype=torch.uint8)
    assert a.register_memory(t)[0] == (t.data_ptr(), 256, 0, b"")
    rows = np.array([[pa, 100, 0]], dtype=np.uint64)
    assert a.register_memory(rows, "DRAM")[0] == (pa, 100, 0, b"")
    # [OBS-local] the wheel reads descs[0] first: an empty list or array is IndexError
    with pytest.raises(IndexError, match="list index out of range"):
        a.register_memory([], "DRAM")
    with pytest.raises(IndexError):
        a.register_memory(np.zeros((0, 3), dtype=np.uint64), "DRAM")
    # a shape it refuses is logged and becomes None, which registerMem refuses (pybind11)
    with pytest.raises(TypeError, match=r"^registerMem\(\): incompatible function arguments"):
        a.register_memory([(pa, 4, 0, "")])                 # no memory type
    with pytest.raises(TypeError, match="incompatible"):
        a.register_memory([(pa, 4, 0)], "DRAM")               # a 3-tuple
    with pytest.raises(TypeError, match="incompatible"):
        a.register_memory(torch.zeros(8, 8).t())              # not contiguous
    with pytest.raises(KeyError, match="HBM"):
        a.register_memory([(pa, 4, 0, "")], "HBM")
    with pytest.raises(RuntimeError, match="Unable to cast"):
        a.get_reg_descs([(-1, 4, 0, "")], "DRAM")


def test_descriptor_lists_have_no_len_but_index(pair: Pair) -> None:
    descs = pair.rd(pair.a, [(pair.pa, 4, 0)])
    assert descs.descCount() == 1 and not descs.isEmpty()
    assert descs.getType() == pair.bind.DRAM_SEG
    with pytest.raises(TypeError):
        len(descs)
    assert bool(descs) is True
    assert list(descs) == [(pair.pa, 4, 0, b"")]


def test_deregistration_matches_exactly_and_is_all_or_nothing(pair: Pair) -> None:
    a, pa = pair.a, pair.pa
    nf = _raises(pair, "nixlNotFoundError")
    both = a.register_memory([(pa, 4 * KiB, 0, ""), (pa + 4 * KiB, 4 * KiB, 0, "")], "DRAM")
    with pytest.raises(nf, match=r"^NIXL_ERR_NOT_FOUND$"):   # a sub-range is not a match
        a.deregister_memory(pair.rd(a, [(pa, KiB, 0)]))
    with pytest.raises(nf):                                   # another devID neither
        a.deregister_memory(pair.rd(a, [(pa, 4 * KiB, 1)]))
    # [OBS-local] [present, missing]: NOT_FOUND and the present one stays registered
    with pytest.raises(nf):
        a.deregister_memory(pair.rd(a, [(pa, 4 * KiB, 0), (pa + 1, 5, 0)]))
    assert len(pair.fake.live()) == 2
    # metaInfo is not part of the match
    a.deregister_memory(a.get_reg_descs([(pa, 4 * KiB, 0, "other")], "DRAM"))
    with pytest.raises(nf):                                   # the list, one already gone
        a.deregister_memory(both)
    a.deregister_memory(pair.rd(a, [(pa + 4 * KiB, 4 * KiB, 0)]))
    with pytest.raises(nf, match="NOT_FOUND") as exc:         # nothing left of DRAM
        a.deregister_memory(both)
    assert "no available backends for mem type 'DRAM_SEG'" in exc.value.kvreg_detail


def test_one_descriptor_twice_in_a_deregistration_list_crashes(pair: Pair) -> None:
    # [OBS-local] SIGSEGV on 1.5.1 whatever is registered (tests/nixl_real/test_crashes.py)
    a, pa = pair.a, pair.pa
    a.register_memory([(pa, 64, 0, "")], "DRAM")
    a.register_memory([(pa, 64, 0, "")], "DRAM")
    with pytest.raises(NixlCrash, match="SIGSEGV"):
        a.deregister_memory(pair.rd(a, [(pa, 64, 0), (pa, 64, 0)]))


# -- metadata (§3.3) --------------------------------------------------------------------------

def test_metadata_loads_by_name_and_refuses_garbage_and_self(pair: Pair) -> None:
    md = pair.b.get_agent_metadata()
    assert md.startswith(b"nixlSerDes|B")
    assert pair.a.add_remote_agent(md) == b"B"                # bytes, as the wheel
    assert pair.a.add_remote_agent(md) == b"B"                # a reload is fine
    with pytest.raises(_raises(pair, "nixlMismatchError")):
        pair.a.add_remote_agent(b"garbage")
    with pytest.raises(_raises(pair, "nixlInvalidParamError")):
        pair.a.add_remote_agent(pair.a.get_agent_metadata())
    pair.a.remove_remote_agent("nobody")                      # no error [OBS-local]


def test_a_refused_registration_poisons_the_agents_metadata(pair: Pair) -> None:
    # [OBS-local] after a VRAM registration UCX refused, B's metadata loads nowhere
    # (NOT_FOUND), and A can never load B again, even after remove_remote_agent
    # (INVALID_PARAM: UCX kept the connection the agent forgot)
    pair.b.register_memory([(pair.pb, 4 * KiB, 0, "")], "DRAM")
    with pytest.raises(_raises(pair, "nixlBackendError"), match="NIXL_ERR_BACKEND"):
        pair.b.register_memory([(pair.pb, 64, 0, "")], "VRAM")
    with pytest.raises(_raises(pair, "nixlNotFoundError")):
        pair.a.add_remote_agent(pair.b.get_agent_metadata())
    pair.a.remove_remote_agent("B")
    with pytest.raises(_raises(pair, "nixlInvalidParamError")):
        pair.a.add_remote_agent(pair.b.get_agent_metadata())


# -- transfer requests (§4) -------------------------------------------------------------------

def _registered(pair: Pair) -> None:
    pair.a.register_memory([(pair.pa, 32 * KiB, 0, "")], "DRAM")
    pair.b.register_memory([(pair.pb, 32 * KiB, 0, "")], "DRAM")
    pair.a.add_remote_agent(pair.b.get_agent_metadata())


def _run(pair: Pair, handle: object) -> str:
    state = pair.a.transfer(handle)
    while state == "PROC":
        state = pair.a.check_xfer_state(handle)
    return str(state)


@pytest.mark.parametrize("op", ["WRITE", "READ"])
def test_transfers_move_the_bytes(pair: Pair, op: str) -> None:
    _registered(pair)
    h = pair.a.initialize_xfer(op, pair.xd(pair.a, [(pair.pa + 100, 300, 0)]),
                               pair.xd(pair.b, [(pair.pb + 900, 300, 0)]), "B")
    pair.bbuf[900:1200] = 7
    assert _run(pair, h) == "DONE"
    if op == "WRITE":
        assert (pair.bbuf[900:1200] == pair.abuf[100:400]).all()
    else:
        assert (pair.abuf[100:400] == 7).all()


def test_transfer_reports_proc_then_done_or_done(pair: Pair) -> None:
    # [OBS-local] the wheel answers "PROC" or "DONE" by timing; the default makes code poll
    _registered(pair)
    h = pair.a.initialize_xfer("WRITE", pair.xd(pair.a, [(pair.pa, 8, 0)]),
                               pair.xd(pair.b, [(pair.pb, 8, 0)]), "B")
    with pytest.raises(_raises(pair, "nixlNotPostedError")):
        pair.a.check_xfer_state(h)
    assert pair.a.transfer(h) == "PROC"
    assert pair.a.check_xfer_state(h) == "DONE"
    assert pair.a.transfer(h) == "PROC"                       # a repost is allowed
    eager = FakeNixl(pair.fake.profile.replace(post_status="DONE"))
    a, b = eager.agent("A"), eager.agent("B")
    a.register_memory([(pair.pa, 64, 0, "")], "DRAM")
    b.register_memory([(pair.pb, 64, 0, "")], "DRAM")
    a.add_remote_agent(b.get_agent_metadata())
    h2 = a.initialize_xfer("WRITE", a.get_xfer_descs([(pair.pa, 8, 0)], "DRAM"),
                           a.get_xfer_descs([(pair.pb, 8, 0)], "DRAM"), "B")
    assert a.transfer(h2) == "DONE"


def test_request_checks_in_the_agents_order(pair: Pair) -> None:
    _registered(pair)
    a, pa, pb = pair.a, pair.pa, pair.pb
    inv, nf = _raises(pair, "nixlInvalidParamError"), _raises(pair, "nixlNotFoundError")
    cases = [
        ([(pa, 16, 0), (pa + 16, 16, 0)], [(pb, 16, 0)], "B", inv, "different descriptor"),
        ([(pa, 16, 0)], [(pb, 32, 0)], "C", inv, "length mismatch at index 0"),
        ([(pa, 16, 0)], [(pb, 16, 0)], "C", nf, "metadata for remote agent 'C'"),
        ([(pa, 16, 0)], [(pb + 32 * KiB, 16, 0)], "B", nf, "required registrations"),
        ([(pa, 16, 1)], [(pb, 16, 0)], "B", nf, "required registrations"),    # devID
    ]
    for local, remote, agent, exc, detail in cases:
        with pytest.raises(exc) as info:
            a.initialize_xfer("WRITE", pair.xd(a, local), pair.xd(a, remote), agent)
        assert detail in info.value.kvreg_detail
    with pytest.raises(KeyError, match="PUT"):
        a.initialize_xfer("PUT", pair.xd(a, [(pa, 8, 0)]), pair.xd(a, [(pb, 8, 0)]), "B")
    with pytest.raises(nf, match="NOT_FOUND") as vram:
        a.initialize_xfer("WRITE", pair.xd(a, [(pa, 8, 0)]),
                          a.get_xfer_descs([(pb, 8, 0)], "VRAM"), "B")
    assert "no potential backend" in vram.value.kvreg_detail
    empty = pair.bind.nixlXferDList(pair.bind.DRAM_SEG)
    with pytest.raises(nf):
        a.initialize_xfer("WRITE", empty, empty, "B")
    assert a.initialize_xfer("WRITE", pair.xd(a, [(pa, 0, 0)]), pair.xd(a, [(pb, 0, 0)]), "B")


def test_lookup_follows_nixls_walk_not_the_union_of_registrations(pair: Pair) -> None:
    # nixlMemSection::populate (src/infra/nixl_memory_section.cpp) [verified; OBS-local by the
    # differential]: a descriptor inside the union of two registrations but in neither is
    # NOT_FOUND, and with overlapping registrations the sorted search looks at two entries
    a, b, pa, pb = pair.a, pair.b, pair.pa, pair.pb
    nf = _raises(pair, "nixlNotFoundError")
    a.register_memory([(pa, 4 * KiB, 0, ""), (pa + 4 * KiB, 4 * KiB, 0, "")], "DRAM")
    b.register_memory([(pb, 4 * KiB, 0, ""), (pb, 32 * KiB, 0, ""), (pb, 64 * KiB, 0, ""),
                       (pb + 4 * KiB, 32 * KiB, 0, "")], "DRAM")
    a.add_remote_agent(b.get_agent_metadata())
    with pytest.raises(nf):                                    # spans two adjacent ones
        a.initialize_xfer("WRITE", pair.xd(a, [(pa + 4000, 192, 0)]),
                          pair.xd(a, [(pb, 192, 0)]), "B")
    # (pb + 41637) lies in (pb, 64 KiB), but the search looks at (pb + 4 KiB, 32 KiB) only
    with pytest.raises(nf):
        a.initialize_xfer("WRITE", pair.xd(a, [(pa, 8, 0)]),
                          pair.xd(a, [(pb + 41637, 8, 0)]), "B")
    # the same descriptor after a lower one is found by the forward walk
    h = a.initialize_xfer("WRITE", pair.xd(a, [(pa, 8, 0), (pa + 8, 8, 0)]),
                          pair.xd(a, [(pb + 8, 8, 0), (pb + 41637, 8, 0)]), "B")
    assert _run(pair, h) == "DONE"


def test_remote_registrations_are_the_loaded_snapshot(pair: Pair) -> None:
    _registered(pair)
    a, b, pa, pb = pair.a, pair.b, pair.pa, pair.pb
    b.register_memory([(pb + 40 * KiB, 4 * KiB, 0, "")], "DRAM")
    with pytest.raises(_raises(pair, "nixlNotFoundError")):      # not in the old metadata
        a.initialize_xfer("WRITE", pair.xd(a, [(pa, 8, 0)]),
                          pair.xd(a, [(pb + 40 * KiB, 8, 0)]), "B")
    a.add_remote_agent(b.get_agent_metadata())
    assert a.initialize_xfer("WRITE", pair.xd(a, [(pa, 8, 0)]),
                             pair.xd(a, [(pb + 40 * KiB, 8, 0)]), "B")


@pytest.mark.parametrize(("profile", "state"), [("ucx-host", "DONE"), ("ucx-cuda", "ERR")])
def test_transfer_to_memory_deregistered_after_the_metadata(profile: str, state: str) -> None:
    # [OBS-local] UCX over shared memory in one process still moves the bytes; an RDMA NIC
    # would fail the access [UNC]: the conservative default says ERR
    for p in make_pair(profile):
        _registered(p)
        regs = p.b.get_reg_descs([(p.pb, 32 * KiB, 0, "")], "DRAM")
        h = p.a.initialize_xfer("WRITE", p.xd(p.a, [(p.pa, 8, 0)]),
                                p.xd(p.a, [(p.pb, 8, 0)]), "B")
        p.b.deregister_memory(regs)
        assert _run(p, h) == state


def test_a_removed_remote_makes_old_handles_stale(pair: Pair) -> None:
    _registered(pair)
    a, pa, pb = pair.a, pair.pa, pair.pb
    nf = _raises(pair, "nixlNotFoundError")
    h = a.initialize_xfer("WRITE", pair.xd(a, [(pa, 8, 0)]), pair.xd(a, [(pb, 8, 0)]), "B")
    local = a.prep_xfer_dlist("NIXL_INIT_AGENT", [(pa, 64, 0)], "DRAM")
    remote = a.prep_xfer_dlist("B", [(pb, 64, 0)], "DRAM")
    a.remove_remote_agent("B")
    with pytest.raises(nf) as exc:
        a.transfer(h)
    assert "not posting stale handle" in exc.value.kvreg_detail
    a.add_remote_agent(pair.b.get_agent_metadata())            # loading again: still stale
    with pytest.raises(nf, match="NOT_FOUND") as exc2:
        a.make_prepped_xfer("WRITE", local, [0], remote, [0])
    assert "prepped descriptor lists must be re-created" in exc2.value.kvreg_detail


def test_prepared_lists_and_their_indices(pair: Pair) -> None:
    _registered(pair)
    a, pa, pb = pair.a, pair.pa, pair.pb
    inv, nf = _raises(pair, "nixlInvalidParamError"), _raises(pair, "nixlNotFoundError")
    local = a.prep_xfer_dlist("", [(pa, 64, 0), (pa + 64, 32, 0)], "DRAM")
    remote = a.prep_xfer_dlist("B", [(pb, 64, 0), (pb + 64, 32, 0)], "DRAM")
    loop = a.prep_xfer_dlist("A", [(pa + 200, 64, 0)], "DRAM")
    with pytest.raises(nf):
        a.prep_xfer_dlist("Z", [(pb, 64, 0)], "DRAM")
    with pytest.raises(nf):
        a.prep_xfer_dlist("B", [(pb + 40 * KiB, 64, 0)], "DRAM")
    for li, ri, detail in (([0], [1], "length mismatch at index 0 with local index 0 and "
                            "remote index 1"), ([2], [0], "local index out of range"),
                           ([0], [5], "remote index out of range"), ([-1], [0], "local index"),
                           ([0, 1], [0], "different number of indices"),
                           ([], [], "different number of indices")):
        with pytest.raises(inv) as exc:
            a.make_prepped_xfer("WRITE", local, li, remote, ri)
        assert detail in exc.value.kvreg_detail
    with pytest.raises(inv, match="INVALID_PARAM"):
        a.make_prepped_xfer("WRITE", remote, [0], local, [0])       # sides swapped
    assert _run(pair, a.make_prepped_xfer("WRITE", local, [0], loop, [0])) == "DONE"
    assert (pair.abuf[200:264] == pair.abuf[0:64]).all()
    a.release_dlist_handle(local)
    a.release_dlist_handle(local)                                    # twice: a no-op
    with pytest.raises(inv):                                         # a released side
        a.make_prepped_xfer("WRITE", local, [0], remote, [0])


def test_a_released_handle_crashes_where_the_real_one_does(pair: Pair) -> None:
    _registered(pair)
    h = pair.a.initialize_xfer("WRITE", pair.xd(pair.a, [(pair.pa, 8, 0)]),
                               pair.xd(pair.a, [(pair.pb, 8, 0)]), "B")
    pair.a.release_xfer_handle(h)
    pair.a.release_xfer_handle(h)                                    # twice: a no-op
    with pytest.raises(NixlCrash, match="SIGSEGV"):
        pair.a.transfer(h)


# -- VRAM against the fake GPU memory (§3.1) --------------------------------------------------

def test_vram_is_checked_against_the_fake_device_memory() -> None:
    from kvreg.fakes.cuda.fake_cuda import FakeCuda

    from ..helpers.gpu_memory import ready_driver

    cuda = FakeCuda("h200-r580")
    drv = ready_driver(cuda)
    err, ptr = drv.cuMemAlloc(8 << 20)
    assert int(err) == 0
    fake = FakeNixl("ucx-cuda", gpu=cuda.gpu_memory())
    a = fake.agent("A")
    a.register_memory([(int(ptr), 4 << 20, 0, "")], "VRAM")
    a.register_memory([(int(ptr) + (1 << 20), 1 << 20, 0, "")], "VRAM")   # interior
    import kvreg.fakes.nixl.bindings as bind

    with pytest.raises(bind.nixlBackendError):                      # past the block
        a.register_memory([(int(ptr) + (6 << 20), 4 << 20, 0, "")], "VRAM")
    with pytest.raises(bind.nixlBackendError):                      # never allocated
        a.register_memory([(int(ptr) + (64 << 20), 4096, 0, "")], "VRAM")
    without_gpu = FakeNixl("ucx-cuda").agent("B")
    with pytest.raises(bind.nixlBackendError):
        without_gpu.register_memory([(int(ptr), 4096, 0, "")], "VRAM")


# -- trace, faults, leaks ---------------------------------------------------------------------

def test_calls_are_traced_and_faults_raise_the_statuses_exception(pair: Pair) -> None:
    from kvreg.fakes.faults import FaultPlanError

    pair.fake.inject("register_memory", nth=2, error="NIXL_ERR_BACKEND")
    pair.a.register_memory([(pair.pa, 64, 0, "")], "DRAM")
    with pytest.raises(_raises(pair, "nixlBackendError")):
        pair.a.register_memory([(pair.pa + 64, 64, 0, "")], "DRAM")
    rows = pair.fake.trace.calls("register_memory")
    assert [(r.face, r.code, r.injected) for r in rows] == [("nixl:A", 0, False),
                                                            ("nixl:A", -3, True)]
    assert len(pair.fake.live()) == 1
    with pytest.raises(FaultPlanError, match="cannot return"):
        pair.fake.inject("transfer", error="NIXL_ERR_MISMATCH")
    pair.fake.inject("add_remote_agent")               # its own default status
    with pytest.raises(_raises(pair, "nixlInvalidParamError")):
        pair.a.add_remote_agent(pair.b.get_agent_metadata())


def test_leak_report_names_what_is_still_registered(pair: Pair) -> None:
    regs = pair.a.register_memory([(pair.pa, 64, 0, "")], "DRAM")
    assert "A: DRAM_SEG" in pair.fake.leak_report()
    pair.a.deregister_memory(regs)
    assert pair.fake.leak_report() == ""


def test_a_transfers_notification_reaches_the_peer(pair: Pair) -> None:
    # docs/nixl.md §4 [OBS-local]: what KV connectors poll to learn a read finished
    _registered(pair)
    pair.b.add_remote_agent(pair.a.get_agent_metadata())
    h = pair.a.initialize_xfer("WRITE", pair.xd(pair.a, [(pair.pa, 8, 0)]),
                               pair.xd(pair.a, [(pair.pb, 8, 0)]), "B", notif_msg=b"req-7")
    assert pair.b.get_new_notifs() == {}
    assert _run(pair, h) == "DONE"
    assert pair.b.check_remote_xfer_done("A", b"req") is True
    assert pair.b.check_remote_xfer_done("A", b"req") is False       # taken once
    pair.b.send_notif("A", "done")
    assert pair.a.get_new_notifs() == {"B": [b"done"]}
    with pytest.raises(_raises(pair, "nixlNotFoundError")):
        pair.a.send_notif("nobody", b"x")


def test_a_class_kept_from_an_earlier_patch_builds_the_current_fakes_agents() -> None:
    # the doors (fakes/doors.py): code that imported nixl_agent once reaches the fake
    # patched in at the time of each call, as for the other fakes
    first, second = FakeNixl(), FakeNixl()
    with first.patch():
        from nixl._api import nixl_agent as kept
    with second.patch():
        agent = kept("late")
    assert "late" in second.agents and "late" not in first.agents
    assert agent.name == "late"


def test_reloading_metadata_adds_and_never_drops(pair: Pair) -> None:
    # [OBS-local] docs/nixl.md §3.3: a region the peer deregistered stays in the initiator's
    # view across reloads, until remove_remote_agent
    a, b, pb = pair.a, pair.b, pair.pb
    a.register_memory([(pair.pa, 8 * KiB, 0, "")], "DRAM")
    first = b.register_memory([(pb, 4 * KiB, 0, "")], "DRAM")
    a.add_remote_agent(b.get_agent_metadata())
    b.deregister_memory(first)
    b.register_memory([(pb + 20 * KiB, 4 * KiB, 0, "")], "DRAM")
    a.add_remote_agent(b.get_agent_metadata())
    for addr in (pb, pb + 20 * KiB):
        a.release_dlist_handle(a.prep_xfer_dlist("B", [(addr, 8, 0)], "DRAM"))
    a.remove_remote_agent("B")
    a.add_remote_agent(b.get_agent_metadata())
    with pytest.raises(_raises(pair, "nixlNotFoundError")):
        a.prep_xfer_dlist("B", [(pb, 8, 0)], "DRAM")
