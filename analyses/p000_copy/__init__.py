"""analyses/p000_copy/: paper 000: copying with 2D RoPE (the lab)."""
