"""Rendezvous on a shared volume: every pod of a run meets its peers through files.

- `models`   : the versioned documents written on the volume (pydantic, validated on read)
- `store`    : where they live and how they are read (never following links) and written
- `decide`   : pure decisions — which attempt, is the cluster consistent, what to do next
- `protocol` : the wait loops for the assembler (global node 0) and the followers
"""
