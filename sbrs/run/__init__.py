"""The ``sbrs run`` interface: the frame loop with its JSON lines and signals (``loop``) and its frame sources
(``frames``)."""
