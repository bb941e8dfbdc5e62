"""
The message and the folder rules every layer shares.
"""
