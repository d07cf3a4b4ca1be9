"""`python -m ascend_node` behaves exactly like the `ascend-node` console script."""

from ascend_node.cli import main

if __name__ == "__main__":
    main()
