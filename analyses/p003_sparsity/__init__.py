"""analyses/p003_sparsity/: paper 003: sparse parity, PPC scratchpads, leave-one-out."""
