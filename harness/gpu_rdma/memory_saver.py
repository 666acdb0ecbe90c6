"""The ``pause_resume`` option: SGLang's ``release_memory_occupation`` and
``resume_memory_occupation`` between register and the transfers (docs/gpu-rdma.md §7).

On each node, prefill first, the implementation's ``release(engine, handle)`` runs (where it
declares one: SGLang deregisters its Mooncake buffers there, sglang #27696), then the node's
memory saver pauses the tag "kv_cache" as ``TorchMemorySaver::pause`` does (``cuMemUnmap`` +
``cuMemRelease`` of every allocation of the region, csrc/core.cpp) and resumes it
(``cuMemCreate`` + ``cuMemMap`` at the same address + ``cuMemSetAccess``), then the
implementation's ``resume(engine, buffers, handle)`` runs (where it declares one) and what it
returns is the handle teardown gets. Both hooks are optional module-level functions beside
``register``. An MR nvidia-peermem pinned over the old memory is invalidated
(``MrRecord.invalidated``): the engine still publishes it, and the first transfer through it
fails.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from typing import TYPE_CHECKING, Any

from kvreg.harness.run.endstate import exc_text
from kvreg.harness.run.result import Violation

from . import nixl_reference, reference
from .layout import saver_pause, saver_resume

if TYPE_CHECKING:
    from kvreg.harness.run.implementation import Implementation

    from .node_world import NodeWorld

__all__ = ["HOOKS", "HookError", "hooks", "pause_resume", "release_text", "with_hook_errors"]

# the optional hooks and the arguments kvreg gives them, in order (``agent`` for the nixl
# style in place of ``engine``)
HOOKS = {"release": ("engine", "handle"), "resume": ("engine", "buffers", "handle")}


@dataclass(frozen=True)
class HookError:
    """A hook of the implementation that raised."""

    seq: int
    node: str
    hook: str
    error: BaseException

    def violation(self) -> Violation:
        return Violation("unexpected-error", f"{self.node}: {self.hook} raised "
                         f"{exc_text(self.error)} around the memory saver's pause and "
                         "resume of the KV cache", self.seq)


def hooks(impl: Implementation, transport: str = "mooncake") -> dict[str, Callable[..., Any]]:
    """The implementation's ``release`` / ``resume`` found beside its register function, in
    the module ``--impl`` names (kvreg's reference: its own). A hook that cannot take its arguments
    is the implementation's mistake, said in one line."""
    from kvreg.harness.run.implementation import ImplementationError  # the runner's, when it runs
    if impl.style == "reference":
        ref: Any = nixl_reference if transport == "nixl" else reference
        return {"release": ref.release, "resume": ref.resume}
    if impl.register_fn is None:
        return {}
    found = {}
    for name, params in HOOKS.items():
        hook = impl.beside(name)
        if hook is None:
            continue
        if not callable(hook):
            raise ImplementationError(f"{name} beside {impl.label} is not callable")
        try:
            inspect.signature(hook).bind(*params)
        except TypeError as exc:
            raise ImplementationError(f"{name}{inspect.signature(hook)} cannot be called as "
                                      f"{name}({', '.join(params)}): {exc}") from None
        except ValueError:
            pass             # a builtin without a signature: called as it is
        found[name] = hook
    return found


def pause_resume(world: NodeWorld[Any, Any], impl: Implementation,
                 next_seq: Callable[[], int], registrar: Callable[[Any], Any]
                 ) -> list[HookError]:
    """Release and resume each registered node's KV cache around the hooks, which get
    ``registrar(node)``: its engine or NIXL agent. The hooks that raised are returned (the
    run goes on to the transfers, as a server that logged the error would)."""
    found = hooks(impl, world.opts.transport)
    errors: list[HookError] = []
    nodes: list[Any] = list(world.nodes)
    runs: list[Any] = list(world.record.nodes)
    for gn, run in zip(nodes, runs, strict=True):
        if not run.registered:
            continue
        held = registrar(gn)
        world.progress.step("pause and resume", gn.name)
        drv = gn.cuda.driver_api
        if "release" in found:
            with gn.cuda.patch(torch=False):
                _, error = world.attempt(partial(found["release"], held, run.handle))
            if error is not None:
                errors.append(HookError(next_seq(), gn.name, "release", error))
        saver_pause(drv, gn.layout.saver)
        saver_resume(drv, gn.layout.saver)
        if "resume" in found:
            with gn.cuda.patch(torch=False):
                handle, error = world.attempt(partial(found["resume"], held,
                                                      gn.layout.buffers, run.handle))
            if error is not None:
                errors.append(HookError(next_seq(), gn.name, "resume", error))
            else:
                run.handle = handle
    return errors


def with_hook_errors(found: list[Violation], errors: list[HookError],
                     expect: str) -> list[Violation]:
    """A run's violations with its hooks that raised, in trace order (a scenario that
    expects an error does not judge them)."""
    if not errors or expect != "success":
        return found
    return sorted([*found, *(e.violation() for e in errors)], key=lambda v: v.seq)


def release_text(node: str) -> str:
    """How a transfer failure through an invalidated MR names the pause."""
    return (f"{node}'s memory saver released the KV cache after register (cuMemUnmap + "
            "cuMemRelease, torch_memory_saver's pause) and mapped new memory at the same "
            "address on resume: nvidia-peermem invalidated the MR registered over the old "
            "memory, and nothing registered the new memory again (deregister it in a "
            "release hook, or in a resume hook, and register the buffers after resume)")
