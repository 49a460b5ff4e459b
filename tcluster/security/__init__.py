"""The cluster's security: PKI and certificates, join and user tokens, authorization rules,
TLS bootstrap with a pinned CA, and the options of a TLS channel to the master."""
