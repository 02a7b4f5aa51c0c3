"""HTTP and WebSocket handlers: they translate between the wire and the domain, with the middleware and app state."""
