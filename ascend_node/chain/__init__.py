"""The chain itself: `table` runs steps 1-5 (`ranktable`), `boot` continues with 6-8 (`boot`).

Each step lives in its own package (`discover`, `sources`, `handoff`); this package only
orders them, times them in `events.jsonl` and records `status.json`.
"""
