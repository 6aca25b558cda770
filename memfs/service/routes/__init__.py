"""The service's routes, one module per resource, sharing one `RouteContext` (core.py)."""
