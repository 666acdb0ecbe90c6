"""FakeCuda, the verbs Fabric, FakeMooncake and FakeNixl answer alike (kvreg.fakes.protocol.Fake): a
trace, a fault plan, ``live()`` and ``leak_report()``, so the harness reads any of them the
same way. The assignments below are checked by mypy (--strict) as well as run here."""

from __future__ import annotations

from kvreg.fakes.address_space import buffer_address
from kvreg.fakes.cuda.fake_cuda import FakeCuda
from kvreg.fakes.faults import FaultPlan
from kvreg.fakes.mooncake.fake import FakeMooncake
from kvreg.fakes.nixl.fake import FakeNixl
from kvreg.fakes.protocol import Fake
from kvreg.fakes.recorder import Trace
from kvreg.fakes.verbs.fabric import Fabric

MiB = 1 << 20


def test_fake_cuda_answers_as_a_fake() -> None:
    fake: Fake = FakeCuda()
    assert isinstance(fake, Fake)
    assert isinstance(fake.trace, Trace) and isinstance(fake.faults, FaultPlan)
    cuda = FakeCuda()
    pool = cuda.space.virtual((4 * MiB,), "uint8", name="pool")
    assert int(cuda.runtime.cudaHostRegister(pool.data_ptr(), 2 * MiB, 0)[0]) == 0
    assert [x.describe() for x in cuda.live()] == [r.describe()
                                                   for r in cuda.live_registrations()]
    assert cuda.leak_report().startswith("1 host registration(s) still live")
    assert "pool" in cuda.leak_report()
    assert int(cuda.runtime.cudaHostUnregister(pool.data_ptr())[0]) == 0
    assert cuda.live() == [] and cuda.leak_report() == ""


def test_verbs_fabric_answers_as_a_fake() -> None:
    fabric = Fabric(())
    fake: Fake = fabric
    assert isinstance(fake, Fake)
    fabric.add_node("n")
    fabric.add_device("dev0", "mlx5", node="n")
    m = fabric.node("n").modules
    pd = m["pyverbs.pd"].PD(m["pyverbs.device"].Context(name="dev0"))
    pool = fabric.node("n").virtual(4 * MiB, name="kv_pool")
    mr = m["pyverbs.mr"].MR(pd, MiB, 1, address=pool.data_ptr())
    assert len(fabric.live()) == 1 and fabric.live() == fabric.live_mrs()
    assert fabric.leak_report().startswith("1 MR(s) still registered")
    assert "kv_pool" in fabric.leak_report()
    mr.close()
    assert fabric.live() == [] and fabric.leak_report() == ""


def test_fake_mooncake_answers_as_a_fake() -> None:
    mooncake = FakeMooncake("released")
    fake: Fake = mooncake
    assert isinstance(fake, Fake)
    store = mooncake.store()
    assert store.setup("host0", "P2PHANDSHAKE", 4 * MiB, MiB, "rdma", "", "m:50051") == 0
    pool = mooncake.virtual(2 * MiB, name="pool")
    assert store.register_buffer(pool.data_ptr(), MiB) == 0
    assert len(mooncake.live()) == 1 and mooncake.live() == mooncake.live_buffers()
    assert mooncake.leak_report().startswith("1 Mooncake buffer(s) still registered")
    assert store.unregister_buffer(pool.data_ptr()) == 0
    assert mooncake.live() == [] and mooncake.leak_report() == ""
    mooncake.close_all()


def test_fake_nixl_answers_as_a_fake() -> None:
    nixl = FakeNixl()
    fake: Fake = nixl
    assert isinstance(fake, Fake)
    pool = bytearray(4096)
    nixl.track(pool, name="pool")
    agent = nixl.agent("A")
    base, _ = buffer_address(pool)
    regs = agent.register_memory([(base, 1024, 0, "")], "DRAM")
    assert len(nixl.live()) == 1
    assert nixl.leak_report().startswith("1 NIXL descriptor(s) still registered")
    assert "pool" in nixl.leak_report()
    agent.deregister_memory(regs)
    assert nixl.live() == [] and nixl.leak_report() == ""


def test_an_object_without_the_answers_is_no_fake() -> None:
    class NotAFake:
        trace = Trace()
        faults = FaultPlan()

        def leak_report(self) -> str:
            return ""

    assert not isinstance(NotAFake(), Fake)   # no live()
