"""The CUDA fidelity probes: docs/cuda-runtime.md §12, items 1-9, plus the attribute rows.

Every probe body takes a :class:`CudaProbeContext` and writes codes (ints) and normalised
values into ``ctx.observation``. Pointers never appear there: an interior query reports
"queried"/"base"/"other", a device alias "same"/"alias"/"null". That keeps observations
equal exactly when the fake behaved like the hardware, whatever addresses each one used.

Probes run in the order listed. Those that leave torch's runtime with a pending error
(docs/cuda-runtime.md §6) come last, so that error cannot land on an unrelated probe.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from typing import Any

from kvreg.fakes.cuda import errors as E

from .cuda_context import CEILING, PAGE, SPLIT, CudaProbeContext, GiB, KiB, code_of
from .memory import cap_ipc_lock, temporary_memlock
from .probe_types import Probe

__all__ = ["CUDA_PROBES", "CudaProbeContext"]


# -- §12.1 and the overlap rows ---------------------------------------------------------------

def same_page(ctx: CudaProbeContext) -> None:
    p = ctx.host(2 * PAGE)
    ctx.observation["first"] = ctx.register(p, 100)
    ctx.observation["second"] = ctx.register(p + 200, 100)


def overlap(ctx: CudaProbeContext) -> None:
    p = ctx.host(4 * PAGE)
    ctx.register(p, 2 * PAGE)
    ctx.observation["partial"] = ctx.register(p + PAGE, 2 * PAGE)
    ctx.observation["same_range"] = ctx.register(p, 2 * PAGE)


def unaligned(ctx: CudaProbeContext) -> None:
    p = ctx.host(PAGE)
    ctx.observation["register"] = ctx.register(p + 8, 160, 3)


# -- §12.2 unregister ---------------------------------------------------------------------------

def unregister_interior(ctx: CudaProbeContext) -> None:
    p = ctx.host(2 * PAGE)
    ctx.register(p, 2 * PAGE)
    ctx.observation["interior"] = ctx.unregister(p + PAGE)
    ctx.observation["base"] = ctx.unregister(p)


def unregister_twice(ctx: CudaProbeContext) -> None:
    p = ctx.host(PAGE)
    ctx.register(p, PAGE)
    ctx.observation["first"] = ctx.unregister(p)
    ctx.observation["second"] = ctx.unregister(p)


def unregister_unknown(ctx: CudaProbeContext) -> None:
    ctx.observation["unregister"] = ctx.unregister(ctx.host(PAGE))


def unregister_null(ctx: CudaProbeContext) -> None:
    ctx.observation["unregister"] = ctx.unregister(0)


# -- §12.3 register arguments -------------------------------------------------------------------

def register_size_zero(ctx: CudaProbeContext) -> None:
    ctx.observation["register"] = ctx.register(ctx.host(PAGE), 0)


def register_null(ctx: CudaProbeContext) -> None:
    ctx.observation["register"] = ctx.register(0, PAGE)


def register_bad_flags(ctx: CudaProbeContext) -> None:
    ctx.observation["register"] = ctx.register(ctx.host(PAGE), PAGE, 0x10)


def register_read_only(ctx: CudaProbeContext) -> None:
    ctx.observation["register"] = ctx.register(ctx.host(PAGE), PAGE, 0x08)


# -- §12.4 cudaHostAlloc memory and cudaHostGetFlags -----------------------------------------

def register_host_alloc(ctx: CudaProbeContext) -> None:
    p = ctx.host_alloc(64 * KiB)
    ctx.observation["register"] = ctx.register(p, 64 * KiB)
    ctx.observation["unregister"] = ctx.unregister(p)


def host_get_flags_registered(ctx: CudaProbeContext) -> None:
    p = ctx.host(PAGE)
    ctx.register(p, PAGE, 1)          # Portable
    err, flags = ctx.rt.cudaHostGetFlags(p)
    ctx.observation["code"] = int(err)
    ctx.observation["flags"] = None if flags is None else int(flags)


def host_get_flags_host_alloc(ctx: CudaProbeContext) -> None:
    p = ctx.host_alloc(64 * KiB)
    err, flags = ctx.rt.cudaHostGetFlags(p)
    ctx.observation["code"] = int(err)
    ctx.observation["flags"] = None if flags is None else int(flags)


# -- §12.5 pointer attributes, and the device alias (§4) ------------------------------------

def _where(value: int | None, queried: int, base: int) -> str:
    if not value:
        return "null"
    return "queried" if value == queried else "base" if value == base else "other"


def pointer_attributes_interior(ctx: CudaProbeContext) -> None:
    p = ctx.host(16 * PAGE)
    ctx.register(p, 16 * PAGE)
    q = p + 0x1234
    err, attrs = ctx.rt.cudaPointerGetAttributes(q)
    ctx.observation["code"] = int(err)
    if attrs is not None:
        host, dev = int(attrs.hostPointer or 0), int(attrs.devicePointer or 0)
        ctx.observation.update(type=int(attrs.type), device=int(attrs.device),
                               host=_where(host, q, p),
                               alias="same" if dev == host else "null" if not dev else "alias")


def pointer_attributes_malloc(ctx: CudaProbeContext) -> None:
    p = ctx.host(PAGE) + 64
    err, attrs = ctx.rt.cudaPointerGetAttributes(p)
    ctx.observation["code"] = int(err)
    if attrs is not None:
        ctx.observation.update(type=int(attrs.type), device=int(attrs.device),
                               host=_where(int(attrs.hostPointer or 0), p, p),
                               dev=_where(int(attrs.devicePointer or 0), p, p))


def host_get_device_pointer(ctx: CudaProbeContext) -> None:
    p = ctx.host(4 * PAGE)
    ctx.register(p, 4 * PAGE)
    err, dev = ctx.rt.cudaHostGetDevicePointer(p + 100, 0)
    ctx.observation["code"] = int(err)
    ctx.observation["alias"] = None if dev is None else (
        "same" if int(dev) == p + 100 else "alias")


def device_attributes(ctx: CudaProbeContext) -> None:
    for attr in (91, 99, 113):
        err, value = ctx.rt.cudaDeviceGetAttribute(ctx.rt.cudaDeviceAttr(attr), 0)
        ctx.observation[f"attr{attr}"] = None if int(err) else int(value)
    err, value = ctx.rt.cudaDeviceGetAttribute(ctx.rt.cudaDeviceAttr(100), 0)
    ctx.details["attr100_pageable_uses_host_page_tables"] = None if int(err) else int(value)
    # the whole cudaDeviceAttr table, so the device profile's values (data/
    # device_attributes.tsv, [DOC]/[INF]) can be checked against this machine
    table: dict[str, int | None] = {}   # JSON-ready: attribute number as text
    for member in ctx.rt.cudaDeviceAttr:
        err, value = ctx.rt.cudaDeviceGetAttribute(member, 0)
        table[str(int(member))] = None if int(err) else int(value)
    ctx.rt.cudaGetLastError()   # the unsupported members leave InvalidValue pending
    ctx.details["attribute_table"] = table


# -- §12.6 copies across two adjacent registrations ------------------------------------------

def _two_registrations(ctx: CudaProbeContext, split: int, *, second: bool = True) -> int:
    p = ctx.host(2 * SPLIT)
    ctx.observation["reg_a"] = ctx.register(p, split)
    if second:
        ctx.observation["reg_b"] = ctx.register(p + split, 2 * SPLIT - split)
    return p


def copy_across_async(ctx: CudaProbeContext) -> None:
    p = _two_registrations(ctx, SPLIT)
    dev, stream = ctx.device(2 * PAGE), ctx.stream()
    ctx.observation["copy"] = ctx.memcpy_h2d(dev, p + SPLIT - PAGE, 2 * PAGE, stream)
    ctx.observation["sync"] = ctx.sync(stream)


def copy_across_batch(ctx: CudaProbeContext) -> None:
    p = _two_registrations(ctx, SPLIT)
    dev, stream = ctx.device(2 * PAGE), ctx.stream()
    ctx.observation["copy"] = ctx.batch([dev], [p + SPLIT - PAGE], [2 * PAGE], stream)
    ctx.observation["sync"] = ctx.sync(stream)


def copy_across_unaligned_split(ctx: CudaProbeContext) -> None:
    split = SPLIT + 1000               # not a multiple of 4 KiB: the chunks share a page
    p = _two_registrations(ctx, split)
    dev, stream = ctx.device(2 * PAGE), ctx.stream()
    ctx.observation["async"] = ctx.memcpy_h2d(dev, p + split - PAGE, 2 * PAGE, stream)
    ctx.observation["batch"] = ctx.batch([dev], [p + split - PAGE], [2 * PAGE], stream)
    ctx.observation["sync"] = ctx.sync(stream)


def copy_mixed_control(ctx: CudaProbeContext) -> None:
    p = _two_registrations(ctx, SPLIT, second=False)
    dev, stream = ctx.device(2 * PAGE), ctx.stream()
    ctx.observation["async"] = ctx.memcpy_h2d(dev, p + SPLIT - PAGE, 2 * PAGE, stream)
    ctx.observation["batch"] = ctx.batch([dev], [p + SPLIT - PAGE], [2 * PAGE], stream)
    ctx.observation["sync"] = ctx.sync(stream)


# -- §12.7 batch argument rules -------------------------------------------------------------

def _batch_setup(ctx: CudaProbeContext) -> tuple[int, int, Any]:
    p = ctx.host(4 * PAGE)
    ctx.register(p, 4 * PAGE)
    return p, ctx.device(4 * PAGE), ctx.stream()


def batch_control(ctx: CudaProbeContext) -> None:
    p, dev, stream = _batch_setup(ctx)
    ctx.observation["copy"] = ctx.batch([dev], [p], [PAGE], stream)
    ctx.observation["sync"] = ctx.sync(stream)


def batch_stream_zero(ctx: CudaProbeContext) -> None:
    p, dev, _ = _batch_setup(ctx)
    ctx.observation["copy"] = ctx.batch([dev], [p], [PAGE], 0)


def batch_src_access_order_zero(ctx: CudaProbeContext) -> None:
    p, dev, stream = _batch_setup(ctx)
    ctx.observation["copy"] = ctx.batch([dev], [p], [PAGE], stream, order=0)


def batch_zero_size(ctx: CudaProbeContext) -> None:
    p, dev, stream = _batch_setup(ctx)
    ctx.observation["copy"] = ctx.batch([dev, dev + PAGE], [p, p + PAGE], [PAGE, 0], stream)


# -- §12.9 memlock, and the §2.2 per-call ceiling -------------------------------------------

def memlock(ctx: CudaProbeContext) -> None:
    p = ctx.host(GiB, large=True)
    ctx.details.update(euid=os.geteuid(), cap_ipc_lock=cap_ipc_lock())
    with temporary_memlock(64 * KiB) as soft:
        ctx.details["memlock_soft"] = soft
        ctx.observation["register"] = ctx.register(p, GiB)
    ctx.observation["unregister"] = ctx.unregister(p)


def per_call_ceiling(ctx: CudaProbeContext) -> None:
    p = ctx.host(CEILING, large=True)
    ctx.observation["register"] = ctx.register(p, CEILING)


# -- §12.8 two runtimes in one process (last: torch's pending error outlives the probe) -----

def cross_runtime_visibility(ctx: CudaProbeContext) -> None:
    torch = ctx.torch
    p = ctx.host(16 * PAGE)
    ctx.observation["torch_register"] = code_of(torch.cudaHostRegister(p, 16 * PAGE, 0))
    _err, attrs = ctx.rt.cudaPointerGetAttributes(p)
    ctx.observation["cuda_type"] = int(attrs.type) if attrs is not None else None
    ctx.observation["cuda_reregister"] = ctx.register(p, 16 * PAGE)
    ctx.observation["cuda_last_error"] = code_of(ctx.rt.cudaGetLastError())
    ctx.observation["cuda_last_error_again"] = code_of(ctx.rt.cudaGetLastError())
    ctx.observation["cuda_unregister"] = ctx.unregister(p)


def per_runtime_pending_error(ctx: CudaProbeContext) -> None:
    torch = ctx.torch
    p = ctx.host(PAGE)
    ctx.observation["cuda_register"] = ctx.register(p, 0)
    ctx.observation["torch_register"] = code_of(torch.cudaHostRegister(p, 0, 0))
    ctx.observation["cuda_peek"] = code_of(ctx.rt.cudaPeekAtLastError())
    ctx.observation["cuda_get"] = code_of(ctx.rt.cudaGetLastError())
    ctx.observation["cuda_get_again"] = code_of(ctx.rt.cudaGetLastError())
    next_op = getattr(ctx.backend, "torch_next_op", None)
    if next_op is not None:
        ctx.details["torch_next_op_after_failure"] = next_op()


# -- settle functions: observation -> DeviceProfile values ----------------------------------

Settle = Callable[[Mapping[str, Any]], dict[str, Any]]


def _by_code(key: str, table: Mapping[int, Any], field_name: str) -> Settle:
    """Settle ``field_name`` from the code under ``key`` when the table knows that code."""
    def settle(obs: Mapping[str, Any]) -> dict[str, Any]:
        code = obs.get(key)
        return {field_name: table[code]} if isinstance(code, int) and code in table else {}
    return settle


def _settle_code(key: str, field_name: str) -> Settle:
    """The field *is* the observed value (a code, a device id)."""
    def settle(obs: Mapping[str, Any]) -> dict[str, Any]:
        return {field_name: obs[key]} if obs.get(key) is not None else {}
    return settle


def _settle_copy(key: str) -> Settle:
    def settle(obs: Mapping[str, Any]) -> dict[str, Any]:
        if obs.get("reg_a") or obs.get("reg_b"):
            return {}          # not a two-registration copy after all
        code = obs.get(key)
        if code == 0 and obs.get("sync") == 0:
            return {"copy_across_registrations": "allow"}
        if code == E.INVALID_VALUE:
            return {"copy_across_registrations": "reject"}
        return {}
    return settle


def _settle_attributes(obs: Mapping[str, Any]) -> dict[str, Any]:
    names = {"attr91": "can_use_host_pointer_for_registered_mem",
             "attr99": "host_register_supported", "attr113": "read_only_supported"}
    return {f: bool(obs[k]) for k, f in names.items() if obs.get(k) is not None}


def _settle_interior(obs: Mapping[str, Any]) -> dict[str, Any]:
    host = obs.get("host")
    return {"pointer_attributes_interior": host} if host in ("queried", "base") else {}


def _settle_flags(obs: Mapping[str, Any]) -> dict[str, Any]:
    return _by_code("code", {0: "flags", E.INVALID_VALUE: "invalid"},
                    "host_get_flags_on_registered")(obs)


def _settle_ceiling(obs: Mapping[str, Any]) -> dict[str, Any]:
    # 2 at exactly 512 GiB: the R580+ ceiling; 0: this driver has none (per_call_limit None)
    return _by_code("register", {E.MEMORY_ALLOCATION: CEILING, 0: None},
                    "per_call_limit")(obs)


def _p(name: str, check: str, spec: str, question: str, expect: str,
       body: Callable[[CudaProbeContext], None], fields: tuple[str, ...] = (),
       settle: Settle | None = None) -> Probe:
    return Probe(name, "cuda", check, spec, question, expect, body, fields, settle)


CUDA_PROBES: tuple[Probe, ...] = (
    _p("device_attributes", "§12 (caps)", "§2.1, §4 attributes 91/99/113 [DOC]",
       "What do attributes 91, 99 and 113 say on device 0?", "91=1 on x86 Linux with UVA",
       device_attributes, ("can_use_host_pointer_for_registered_mem",
                           "host_register_supported", "read_only_supported"),
       _settle_attributes),
    _p("register_same_page", "§12.1", "§2.2 byte-disjoint, same 4 KiB page [UNC]",
       "Do byte-disjoint registrations that share a page both succeed?",
       "second=0 (observed per-byte check)", same_page, ("overlap_granularity",),
       _by_code("second", {0: "byte", E.HOST_MEMORY_ALREADY_REGISTERED: "page"},
                "overlap_granularity")),
    _p("register_overlap", "§12.1", "§2.2 overlap rows [OBS-ext]",
       "Partial overlap and the same range again?", "712, 712", overlap),
    _p("register_unaligned", "§12.1", "§2.2 unaligned row [OBS-ext]",
       "160 bytes at an unaligned address, flags 3?", "0", unaligned),
    _p("unregister_interior", "§12.2", "§3 interior pointer [OBS-ext]",
       "Unregister an interior pointer, then the base?", "interior=1, base=0",
       unregister_interior),
    _p("unregister_twice", "§12.2", "§3 second unregister [INF]",
       "Unregister the same base twice?", "0 then 713", unregister_twice),
    _p("unregister_unknown", "§12.2", "§3 never registered [OBS-ext]",
       "Unregister memory that was never registered?", "713", unregister_unknown),
    _p("unregister_null", "§12.2", "§3 NULL [UNC]", "cudaHostUnregister(NULL)?",
       "1 or 713", unregister_null, ("unregister_null_code",),
       _settle_code("unregister", "unregister_null_code")),
    _p("register_size_zero", "§12.3", "§2.2 size 0 [OBS-ext]", "Register 0 bytes?", "1",
       register_size_zero),
    _p("register_null", "§12.3", "§2.2 NULL pointer [INF]", "Register a NULL pointer?",
       "1", register_null),
    _p("register_bad_flags", "§12.3", "§2.1 invalid flag bits [OBS-ext]",
       "Register with flags 0x10?", "1", register_bad_flags),
    _p("register_read_only", "§12.3", "§2.1 ReadOnly without attribute 113 [DOC]",
       "Register with cudaHostRegisterReadOnly?", "801 without attribute 113, else 0",
       register_read_only, ("read_only_supported",),
       _by_code("register", {0: True, E.NOT_SUPPORTED: False}, "read_only_supported")),
    _p("register_host_alloc", "§12.4", "§2.2 cudaHostAlloc memory [UNC]; §3 [OBS-ext]",
       "Register, then unregister, a cudaHostAlloc block?", "register 712 (probably), "
       "unregister 1", register_host_alloc, ("register_host_alloc_code",),
       _settle_code("register", "register_host_alloc_code")),
    _p("host_get_flags_registered", "§12.4", "§4 cudaHostGetFlags on registered memory [UNC]",
       "cudaHostGetFlags on memory registered with Portable?", "flags or 1",
       host_get_flags_registered, ("host_get_flags_on_registered",), _settle_flags),
    _p("host_get_flags_host_alloc", "§12.4", "§4 cudaHostGetFlags after cudaHostAlloc "
       "[OBS-ext]", "cudaHostGetFlags on a cudaHostAlloc(flags=0) block?", "0, flags 2",
       host_get_flags_host_alloc),
    _p("pointer_attributes_interior", "§12.5", "§4 interior address [UNC]",
       "hostPointer/devicePointer for an interior address of a registration?",
       "type 1, the queried address [INF]", pointer_attributes_interior,
       ("pointer_attributes_interior",), _settle_interior),
    _p("pointer_attributes_malloc", "§12.5", "§4 plain host memory [DOC]; device [UNC]",
       "cudaPointerGetAttributes on unregistered memory?",
       "0, type 0, hostPointer set, devicePointer NULL (x86)", pointer_attributes_malloc,
       ("unregistered_pointer_device",), _settle_code("device", "unregistered_pointer_device")),
    _p("host_get_device_pointer", "§12.5", "§4 cudaHostGetDevicePointer [DOC]",
       "Device pointer of a Default-flags registration?", "0, equal to the host pointer "
       "when attribute 91 is 1", host_get_device_pointer),
    _p("copy_across_async", "§12.6", "§5.4 copy spanning two registrations [UNC]",
       "cudaMemcpyAsync H2D across two adjacent registrations?", "unknown (fake: 1)",
       copy_across_async, ("copy_across_registrations",), _settle_copy("copy")),
    _p("copy_across_batch", "§12.6", "§5.4 copy spanning two registrations [UNC]",
       "cudaMemcpyBatchAsync H2D across two adjacent registrations?",
       "unknown; SGLang PR #36798 claims 1", copy_across_batch,
       ("copy_across_registrations",), _settle_copy("copy")),
    _p("copy_across_unaligned_split", "§12.6", "§5.4 split point not 4 KiB aligned [UNC]",
       "Both copy APIs across a split that shares a page?", "as copy_across_*",
       copy_across_unaligned_split),
    _p("copy_mixed_control", "§12.6", "§5.1 registered + pageable mix [DOC]",
       "Copy that is half registered, half pageable (the control)?", "1 and 1",
       copy_mixed_control),
    _p("batch_control", "§12.7", "§5.3 a valid batch [DOC]",
       "A valid one-copy batch on a created stream?", "0", batch_control),
    _p("batch_stream_zero", "§12.7", "§5.3 legacy NULL stream [DOC]",
       "Batch on stream 0?", "1", batch_stream_zero),
    _p("batch_src_access_order_zero", "§12.7", "§5.3 srcAccessOrder Invalid [DOC]",
       "Batch with srcAccessOrder 0?", "1", batch_src_access_order_zero),
    _p("batch_zero_size", "§12.7", "§5.3 zero-size entry [OBS-ext]",
       "Batch with a zero-size entry?", "1", batch_zero_size),
    _p("memlock", "§12.9", "§12.9 RLIMIT_MEMLOCK ignored [INF]",
       "Register 1 GiB with the soft memlock limit at 64 KiB?", "0 (limit ignored)",
       memlock),
    _p("per_call_ceiling", "§2.2", "§2.2/§10 512 GiB per call on R580+ [OBS-ext]",
       "Register exactly 512 GiB in one call?", "2 on R580+, 0 before",
       per_call_ceiling, ("per_call_limit",), _settle_ceiling),
    _p("cross_runtime_visibility", "§12.8", "§6 registrations are driver-level [INF]",
       "Register through torch; query, re-register, unregister through cuda-python?",
       "type 1, 712, last error 712 then 0, unregister 0", cross_runtime_visibility),
    _p("per_runtime_pending_error", "§12.8", "§6 per-runtime last error [DOC]",
       "Does a torch-side failure show in cuda-python's cudaGetLastError?",
       "cuda-python sees only its own 1: peek 1, get 1, get 0", per_runtime_pending_error),
)
