"""Random register / copy / teardown lifecycles of the fixed pool code (kvreg's state machine)."""

import mypool_fixed

from kvreg.harness.state_machine import RegistrationMachine


class FixedPoolMachine(RegistrationMachine):
    style = "sglang"
    register_impl = staticmethod(mypool_fixed.register)
    teardown_impl = staticmethod(mypool_fixed.teardown)


TestFixedPool = FixedPoolMachine.TestCase
