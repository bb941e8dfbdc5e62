"""
OAuth 2 access tokens: their sources, cache and refresh over HTTPS.
"""
