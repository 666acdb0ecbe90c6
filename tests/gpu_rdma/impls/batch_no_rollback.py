"""Broken: one batch per group, raises on a nonzero return, but leaves the groups it
registered before that one registered."""

from engine_calls import batch_teardown


def register(engine, buffers):
    done = []
    for group in ("kv", "aux", "state"):
        ptrs = getattr(buffers, f"{group}_data_ptrs")
        lens = getattr(buffers, f"{group}_data_lens")
        if not ptrs:
            continue
        rc = engine.batch_register_memory(ptrs, lens)
        if rc != 0:
            raise RuntimeError(f"batch_register_memory of {group} returned {rc}")
        done += ptrs
    return done


def teardown(engine, handle):
    batch_teardown(engine, handle)
