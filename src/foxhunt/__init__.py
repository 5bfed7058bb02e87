"""foxhunt: deep-RL research for index futures from limit-order-book data.

The package is organised by stage of the data flow (see ../shared/SPEC.md §1):
``data`` (DBN ingest, book rebuild, synthetic market, bars), then later stages.
"""

__version__ = "0.1.0"
