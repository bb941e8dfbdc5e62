"""
The benchmark of imapmig against the tools admins use today: see
L{bench.run}.
"""
