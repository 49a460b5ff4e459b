"""The dashboard: aiohttp app, JSON API under /api/v1/, /metrics, static UI."""
