"""The memory-graph app: one self-contained HTML file (inline script and style, nothing from a CDN),
served as the MCP Apps resource ``ui://engram/memory-graph.html`` and inside the web page ``/graph``."""
