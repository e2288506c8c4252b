"""analyses/p002_dyck/: paper 002: Dyck depth (the lab)."""
