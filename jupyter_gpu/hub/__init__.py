"""The instructor's view of a JupyterHub GPU node: a Hub service (``python -m jupyter_gpu.hub``).

``app`` (start-up, routes), ``handlers`` (auth, page, JSON, actions), ``fleet`` (the Hub's API
and the concurrent reads of user servers), ``view`` (pure: checking replies, sorting, shaping).
"""
