"""One module per coding agent; each defines a `Tool` subclass and nothing else."""
