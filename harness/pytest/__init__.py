"""The pytest side: the plugin (fixtures, markers, leak check), scenario files as test items,
Hypothesis strategies and the registration state machine."""
