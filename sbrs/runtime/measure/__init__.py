"""Measuring: ``sbrs bench`` (``bench``) and the measured cost table of the buffer-reduction search
(``parts_cost``)."""
