"""Compile time: the MoC cut into execution units and their arena (``plan``, ``layout``, ``arena``, ``units``),
or, under a memory limit, into band calls (``parts`` compiles them, ``band_calls`` holds the plan that runs).
The run of a build reads only the plan's dataclasses: ``units``' or ``band_calls``'."""
