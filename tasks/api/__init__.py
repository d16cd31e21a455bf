"""``dormant api``: the Camunda 8 Orchestration Cluster REST API (v2) on dormant's
Client (app.py; docs/camunda-api.md)."""
