"""Compile time: the MoC cut into execution units and their arena (``plan``, ``layout``, ``arena``, ``units``),
or, under a memory limit, into band calls (``parts``). The run of a build reads only ``units``' dataclasses."""
