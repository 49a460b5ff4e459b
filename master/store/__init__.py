"""Durable state: the store protocol, its SQLite and etcd backends (mirror, bridge,
leadership, standby), and the group committer."""
