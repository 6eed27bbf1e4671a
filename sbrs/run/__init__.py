"""The ``sbrs run`` interface: the frame loop with its JSON lines and signals (``loop``), its frame sources
(``frames``, ``sources``, ``capture``) and what a person watches (``overlay``)."""
