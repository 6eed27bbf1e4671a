"""Interfaces stage: what people look at. The one-screen summary of ``sbrs inspect`` (``summary``), and
``sbrs report``'s pictures and offline HTML page (``make``; matplotlib, the optional ``plots`` extra, is
imported only when pictures are drawn, never by ``sbrs run``)."""
