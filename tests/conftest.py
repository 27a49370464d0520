import os

from hypothesis import settings

# CI runs many examples once; local runs stay quick. Deadlines off: first calls JIT-compile.
settings.register_profile("ci", max_examples=150, deadline=None, derandomize=True)
settings.register_profile("dev", max_examples=40, deadline=None)
settings.load_profile("ci" if os.environ.get("CI") else "dev")
