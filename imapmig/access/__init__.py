"""
Access to the servers: passwords and secret files, client TLS identities,
trust roots and the cleartext-login policy.
"""
