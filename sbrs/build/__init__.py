"""The compiled build of an app: ``compile`` writes it (``sbrs build``), ``artifact`` verifies and loads it."""
