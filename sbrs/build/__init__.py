"""The compiled build of an app: ``compile`` writes it (``sbrs build``), ``artifact`` verifies and loads it,
``reduce`` chooses its processing by parts under a memory limit (``sbrs build --memory-limit``)."""
