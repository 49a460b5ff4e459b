"""The domain model: jobs, tasks, nodes, resources and units, their states, limits and field tables."""
