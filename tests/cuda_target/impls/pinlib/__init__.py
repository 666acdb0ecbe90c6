"""A stand-in for a library's pool module (as SGLang's ``pool_host/common.py`` is to code that
wraps it): the adapters next to it call it, and kvreg must place what it raises at its own
lines, which count as the user's code."""
