"""Switching: the control node's state machine (``control_node``) and the SBRS-TP transition tables, hazards and
shadow arena (``transition``)."""
