"""Real network libraries (aiohttp, websockets, httpx) run unchanged on snakeloop."""
