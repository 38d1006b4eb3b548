"""One module per constraint family; each exposes ``add_<family>(m, d)``."""
