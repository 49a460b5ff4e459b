"""The etcd v3 client every daemon shares: store URLs, TLS, the key-value façade and a prefix mirror."""
