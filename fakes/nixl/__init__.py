"""The fake NIXL agent (``nixl._api.nixl_agent`` over a fake ``nixl._bindings``), checked
call by call against nixl-cu12 1.5.1 (docs/nixl.md)."""

from __future__ import annotations

from .bindings import NixlCrash, NixlError, NotModelledError, nixl_mem_t, nixl_status_t
from .fake import FakeNixl, LiveRegistration
from .profiles import PROFILES, NixlProfile, get_nixl_profile

__all__ = ["PROFILES", "FakeNixl", "LiveRegistration", "NixlCrash", "NixlError", "NixlProfile",
           "NotModelledError", "get_nixl_profile", "nixl_mem_t", "nixl_status_t"]
