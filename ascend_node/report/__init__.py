"""One picture of a job's start: every node's phases on the shared volume's clock.

Each node leaves a small summary of its start on the shared volume (`summary` holds the
document, `record` writes it); `ascend-node report` reads them all (`collect`), lines
them up (`timeline`) and draws them as text (`text`) or as a self-contained page (`html`).
"""
