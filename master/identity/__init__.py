"""Who may do what: the authentication gate, users, node certificates and joining, and the PKI caches."""
