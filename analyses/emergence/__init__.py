"""analyses/emergence/: training dynamics: heads watched as they form."""
