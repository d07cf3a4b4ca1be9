"""Rendezvous on a shared volume: every pod of a run meets its peers through files.

- `models`   : the versioned documents written on the volume (pydantic, validated on read)
- `store`    : where they live and how they are read (never following links) and written
- `decide`   : pure decisions — which attempt, is the cluster consistent, what to do next
- `freshness`: revalidate a directory before polling for a file in it (NFS lookup caches)
- `participant`, `assembler`, `follower`: the wait loops of global node 0 and of everyone else
- `failures` : publishing a local failure so peers exit 5 at once
- `protocol` : the entry point that gives a pod its role (and retries it after an I/O error)
- `volume_call`: the watch on every call on the volume, so a volume that hangs cannot stop the clock
"""
