"""The OAuth 2.1 authorization server: the `mcp` SDK's handlers, our provider and sign-in pages."""
